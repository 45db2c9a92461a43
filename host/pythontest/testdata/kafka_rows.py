"""Reads a Kafka topic through ReadFromKafka(with_metadata=True) and writes
each record through WriteToKafka(with_headers=True) (both expanded by
ksrunner's expansion service): its key, value and headers, plus a "meta"
header of what the read said of it (topic/partition/offset/timestamp/
timestamp type id/type name/headers count), to partition (p+1) mod 3 at its
timestamp + 1000; rows of odd offsets name the output topic themselves.

Like kafka_count.py, the script submits the unbounded job, writes its id to
its first argument and exits 0 when the job ends CANCELLED.

Usage: kafka_rows.py JOBID_FILE IN_TOPIC OUT_TOPIC BOOTSTRAP EXPANSION
         [pipeline options]
"""

import sys
import typing

import apache_beam as beam
from apache_beam import coders
from apache_beam.io.kafka import ReadFromKafka, WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions

from submitted_job import run_and_await
from script_exit import exit_now


class Header(typing.NamedTuple):
    key: str
    value: typing.Optional[bytes]


class WriteRow(typing.NamedTuple):
    key: typing.Optional[bytes]
    value: typing.Optional[bytes]
    headers: typing.List[Header]
    topic: typing.Optional[str]
    partition: typing.Optional[int]
    timestamp: typing.Optional[int]


coders.registry.register_coder(Header, coders.RowCoder)
coders.registry.register_coder(WriteRow, coders.RowCoder)


def to_write_row(out_topic):
    def f(r):
        headers = [Header(h.key, h.value) for h in (r.headers or [])]
        meta = '%s/%d/%d/%d/%d/%s/%d' % (
            r.topic, r.partition, r.offset, r.timestamp, r.timestampTypeId,
            r.timestampTypeName, len(headers))
        headers.append(Header('meta', meta.encode('utf-8')))
        return WriteRow(
            key=r.key, value=r.value, headers=headers,
            topic=out_topic if r.offset % 2 == 1 else None,
            partition=(r.partition + 1) % 3, timestamp=r.timestamp + 1000)
    return f


def main():
    jobid_file, in_topic, out_topic, bootstrap, expansion = sys.argv[1:6]
    p = beam.Pipeline(options=PipelineOptions(sys.argv[6:]))
    _ = (
        p
        | ReadFromKafka(
            consumer_config={'bootstrap.servers': bootstrap, 'auto.offset.reset': 'earliest'},
            topics=[in_topic],
            with_metadata=True,
            expansion_service=expansion)
        | 'ToWriteRow' >> beam.Map(to_write_row(out_topic)).with_output_types(WriteRow)
        | WriteToKafka(
            producer_config={'bootstrap.servers': bootstrap},
            topic=out_topic,
            with_headers=True,
            expansion_service=expansion))
    run_and_await(p, jobid_file)


if __name__ == '__main__':
    main()
    exit_now(0)
