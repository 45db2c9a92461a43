"""Writes rows made in the pipeline through managed.Write(KAFKA) (format
JSON) with error_handling: rows JSON cannot hold (a NaN or infinite price)
go to the write's error output, which is written, as "error_message |
name" bytes, to ERRORS (format RAW). A bounded job: it ends DONE.

Usage: kafka_write_errors.py OUT_TOPIC ERRORS BOOTSTRAP EXPANSION [pipeline options]
"""

import sys
import typing

import apache_beam as beam
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import managed
from script_exit import exit_now


class Out(typing.NamedTuple):
    name: str
    total: int
    price: typing.Optional[float]


class Value(typing.NamedTuple):
    value: bytes


coders.registry.register_coder(Out, coders.RowCoder)
coders.registry.register_coder(Value, coders.RowCoder)


def main():
    out_topic, errors_topic, bootstrap, expansion = sys.argv[1:5]
    with beam.Pipeline(options=PipelineOptions(sys.argv[5:])) as p:
        written = (
            p
            | beam.Create([
                Out('a', 1, 1.5), Out('b', 2, float('nan')), Out('c', 3, None), Out('d', 4, float('inf'))
            ]).with_output_types(Out)
            | managed.Write(
                managed.KAFKA,
                config={
                    'bootstrap_servers': bootstrap, 'topic': out_topic, 'format': 'JSON',
                    'error_handling': {'output': 'errors'}
                },
                expansion_service=expansion))
        # The write's one output (its errors) comes as the PCollection itself.
        errors = written['errors'] if isinstance(written, dict) else written
        _ = (
            errors
            | 'Failed' >> beam.Map(lambda e: Value((e.error_message + ' | ' + e.failed_row.name).encode('utf-8'))).with_output_types(Value)
            | 'WriteErrors' >> managed.Write(
                managed.KAFKA,
                config={'bootstrap_servers': bootstrap, 'topic': errors_topic, 'format': 'RAW'},
                expansion_service=expansion))


if __name__ == '__main__':
    main()
    exit_now(0)
