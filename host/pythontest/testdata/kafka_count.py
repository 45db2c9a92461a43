"""Reads String keys and Long values from a Kafka topic through
ReadFromKafka (expanded by ksrunner's expansion service), sums the values
per key in fixed one-minute windows, and writes "key@window start" and the
sum (String, Long) to another topic through WriteToKafka.

The pipeline is unbounded: the script submits it, writes the job id to its
first argument, and waits for the job to end (its LOOPBACK workers live in
this process); the caller cancels the job through the Job API, and the
script exits 0 when the job ends CANCELLED; with KSRUNNER_EXPECT_END=DONE
the caller drains it instead, and the script exits 0 when wait_until_finish
returns (it raises for any other end) and the job is DONE.

Usage: kafka_count.py JOBID_FILE IN_TOPIC OUT_TOPIC BOOTSTRAP EXPANSION
         [pipeline options]
"""

import os
import struct
import sys

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka, WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import window

from submitted_job import run_and_await
from script_exit import exit_now


def decode(kv):
    k, v = kv
    if len(v) != 8:
        raise ValueError('record %r: the value is not a Long' % (kv,))
    return k.decode('utf-8'), struct.unpack('>q', v)[0]


class KeyByWindow(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam):
        k, n = kv
        yield '%s@%d' % (k, w.start.micros // 1000), n


def encode(kv):
    k, n = kv
    return k.encode('utf-8'), struct.pack('>q', n)


def main():
    jobid_file, in_topic, out_topic, bootstrap, expansion = sys.argv[1:6]
    p = beam.Pipeline(options=PipelineOptions(sys.argv[6:]))
    _ = (
        p
        | ReadFromKafka(
            consumer_config={'bootstrap.servers': bootstrap, 'auto.offset.reset': 'earliest'},
            topics=[in_topic],
            timestamp_policy=ReadFromKafka.create_time_policy,
            expansion_service=expansion)
        | 'Decode' >> beam.Map(decode)
        | 'Fixed' >> beam.WindowInto(window.FixedWindows(60))
        | beam.CombinePerKey(sum)
        | beam.ParDo(KeyByWindow())
        | 'Encode' >> beam.Map(encode).with_output_types(beam.typehints.KV[bytes, bytes])
        | 'Global' >> beam.WindowInto(window.GlobalWindows())
        | WriteToKafka(
            producer_config={'bootstrap.servers': bootstrap},
            topic=out_topic,
            expansion_service=expansion))
    run_and_await(p, jobid_file, os.environ.get('KSRUNNER_EXPECT_END', PipelineState.CANCELLED))


if __name__ == '__main__':
    main()
    exit_now(0)
