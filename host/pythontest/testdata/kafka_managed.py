"""Reads a Kafka topic through managed.Read(KAFKA) (format FORMAT: RAW or
STRING) and writes each record's value, upper-cased and prefixed "m:", through
managed.Write(KAFKA) (format RAW), both expanded by ksrunner's expansion
service (beam:transform:managed:v1 of the Kafka schema transforms).

Like kafka_count.py, the script submits the unbounded job, writes its id to
its first argument and exits 0 when the job ends CANCELLED.

Usage: kafka_managed.py JOBID_FILE IN_TOPIC OUT_TOPIC BOOTSTRAP EXPANSION FORMAT
         [pipeline options]
"""

import sys
import typing

import apache_beam as beam
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import managed

from submitted_job import run_and_await
from script_exit import exit_now


class Value(typing.NamedTuple):
    value: bytes


# Rows, not pickled tuples: what a RAW write takes.
coders.registry.register_coder(Value, coders.RowCoder)


def main():
    jobid_file, in_topic, out_topic, bootstrap, expansion, fmt = sys.argv[1:7]
    p = beam.Pipeline(options=PipelineOptions(sys.argv[7:]))
    if fmt == 'STRING':
        upper = lambda r: Value(b'm:' + r.payload.upper().encode('utf-8'))
    else:
        upper = lambda r: Value(b'm:' + r.payload.upper())
    _ = (
        p
        | managed.Read(
            managed.KAFKA,
            config={
                'bootstrap_servers': bootstrap, 'topic': in_topic,
                'format': fmt, 'auto_offset_reset_config': 'earliest'
            },
            expansion_service=expansion)
        | 'Upper' >> beam.Map(upper).with_output_types(Value)
        | managed.Write(
            managed.KAFKA,
            config={'bootstrap_servers': bootstrap, 'topic': out_topic, 'format': 'RAW'},
            expansion_service=expansion))
    run_and_await(p, jobid_file)


if __name__ == '__main__':
    main()
    exit_now(0)
