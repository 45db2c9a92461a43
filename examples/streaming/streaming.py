"""The Python twin of examples/streaming (main.go, run.go): an unbounded
Beam Python pipeline on ksrunner that reads a Kafka topic through
ReadFromKafka, counts per key in 10-second fixed event-time windows and
writes one "key,windowStart,count" line per key and window (windowStart
RFC 3339, UTC; the record key is the key) through WriteToKafka.

ReadFromKafka and WriteToKafka are cross-language transforms: ksrunner's
expansion service (--expansion_service; `ksrunner jobserver` prints its
address) expands them into ksrunner's native Kafka primitives, so no Java
is involved. The input records are what the Go example produces: String
keys (UTF-8) and Long values (8 bytes, big-endian), event time = the
record's CreateTime.

    python streaming.py --job_endpoint=localhost:8099 \\
        --expansion_service=localhost:8097 --bootstrap_servers=localhost:9092 \\
        --input_topic=words --output_topic=counts [--job_id_file=FILE]

The job runs until it is cancelled (Ctrl-C or SIGTERM here, or the Job API's Cancel):
its LOOPBACK workers live in this process. With --job_id_file the job id is
written to that file once the job is submitted. Exits 0 when the job ends
CANCELLED or DONE, 1 otherwise. Other flags are passed on as pipeline
options (e.g. --application_id, --commit_interval_ms).
"""

import argparse
import datetime
import os
import signal
import struct
import sys
import threading

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka, WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window

# WINDOW is the size of the fixed windows counted in, in seconds.
WINDOW = 10


def decode_word(kv):
    """A words record: a String key and a Long value."""
    k, v = kv
    if k is None or v is None or len(v) != 8:
        raise ValueError('record %r: want a String key and a Long (8-byte) value' % (kv,))
    return k.decode('utf-8'), struct.unpack('>q', v)[0]


class FormatCount(beam.DoFn):
    """Writes a key's count in a window as the record value
    "key,windowStart,count", keyed by the key (both UTF-8)."""

    def process(self, kv, w=beam.DoFn.WindowParam):
        k, n = kv
        start = datetime.datetime.fromtimestamp(w.start.micros // 1000000, tz=datetime.timezone.utc)
        line = '%s,%s,%d' % (k, start.strftime('%Y-%m-%dT%H:%M:%SZ'), n)
        yield k.encode('utf-8'), line.encode('utf-8')


def pipeline(p, bootstrap, input_topic, output_topic, expansion):
    """Builds the counting pipeline on p."""
    _ = (
        p
        | 'ReadWords' >> ReadFromKafka(
            consumer_config={'bootstrap.servers': bootstrap, 'auto.offset.reset': 'earliest'},
            topics=[input_topic],
            timestamp_policy=ReadFromKafka.create_time_policy,
            expansion_service=expansion)
        | 'DecodeWord' >> beam.Map(decode_word)
        | 'Fixed10s' >> beam.WindowInto(window.FixedWindows(WINDOW))
        | 'Count' >> beam.CombinePerKey(sum)
        | 'FormatCount' >> beam.ParDo(FormatCount()).with_output_types(beam.typehints.KV[bytes, bytes])
        | 'Global' >> beam.WindowInto(window.GlobalWindows())
        | 'WriteCounts' >> WriteToKafka(
            producer_config={'bootstrap.servers': bootstrap},
            topic=output_topic,
            expansion_service=expansion))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--job_endpoint', required=True, help='the ksrunner job server (host:port)')
    ap.add_argument('--expansion_service', required=True, help="ksrunner's KafkaIO expansion service (host:port)")
    ap.add_argument('--bootstrap_servers', required=True, help='the Kafka cluster (the job server must use the same)')
    ap.add_argument('--input_topic', default='words')
    ap.add_argument('--output_topic', default='counts')
    ap.add_argument('--job_id_file', help='write the job id here once submitted')
    args, rest = ap.parse_known_args(argv)
    # The SDK's KafkaStreamsRunner submits to the job server at
    # --job_endpoint, LOOPBACK by default. --streaming: the pipeline is
    # unbounded; without it the Python SDK's portable runners also
    # pre-optimize the pipeline (pack_combiners, lift_combiners,
    # sort_stages), which drops the WriteToKafka leaf (a runner transform
    # with no outputs) from what they submit.
    opts = PipelineOptions(['--runner=KafkaStreamsRunner', '--job_endpoint=' + args.job_endpoint,
                            '--streaming',
                            '--bootstrap_servers=' + args.bootstrap_servers] + rest)
    p = beam.Pipeline(options=opts)
    pipeline(p, args.bootstrap_servers, args.input_topic, args.output_topic, args.expansion_service)
    result = p.run()
    job_id = result._job_id
    if args.job_id_file:
        with open(args.job_id_file + '.tmp', 'w') as f:
            f.write(job_id)
        os.rename(args.job_id_file + '.tmp', args.job_id_file)
    print('submitted job', job_id, flush=True)

    # The job's state stream blocks in gRPC, where Python delivers no
    # signal: it is awaited in a thread, and the main thread, waiting on an
    # event, turns Ctrl-C (or SIGTERM) into a Cancel.
    ended = threading.Event()

    def wait():
        try:
            result.wait_until_finish()
        except RuntimeError as e:
            print('wait_until_finish:', e, flush=True)
        finally:
            ended.set()

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupt)
    threading.Thread(target=wait, name='wait_until_finish', daemon=True).start()
    try:
        while not ended.wait(0.5):
            pass
    except KeyboardInterrupt:
        print('cancelling job', job_id, flush=True)
        result.cancel()
        if not ended.wait(60):
            print('job', job_id, 'not ended a minute after Cancel', flush=True)
            return 1
    state = result.state
    print('job ended', state, flush=True)
    return 0 if state in (PipelineState.CANCELLED, PipelineState.DONE) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
