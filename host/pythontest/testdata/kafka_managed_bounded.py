"""Copies a Kafka topic's values to another through managed.Read(KAFKA)
(format RAW, max_read_time_seconds) and managed.Write(KAFKA) (format RAW),
prefixing each with "b:". The read is bounded: the script runs the job to
its end and exits 0 when it ends DONE.

Usage: kafka_managed_bounded.py IN_TOPIC OUT_TOPIC BOOTSTRAP EXPANSION
         MAX_READ_TIME_SECONDS [pipeline options]
"""

import sys
import typing

import apache_beam as beam
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import managed
from script_exit import exit_now


class Value(typing.NamedTuple):
    value: bytes


coders.registry.register_coder(Value, coders.RowCoder)


def main():
    in_topic, out_topic, bootstrap, expansion, secs = sys.argv[1:6]
    p = beam.Pipeline(options=PipelineOptions(sys.argv[6:]))
    _ = (
        p
        | managed.Read(
            managed.KAFKA,
            config={
                'bootstrap_servers': bootstrap, 'topic': in_topic,
                'format': 'RAW', 'auto_offset_reset_config': 'earliest',
                'max_read_time_seconds': int(secs)
            },
            expansion_service=expansion)
        | 'Prefix' >> beam.Map(lambda r: Value(b'b:' + r.payload)).with_output_types(Value)
        | managed.Write(
            managed.KAFKA,
            config={'bootstrap_servers': bootstrap, 'topic': out_topic, 'format': 'RAW'},
            expansion_service=expansion))
    result = p.run()
    result.wait_until_finish()
    print('job ended', result.state, flush=True)
    exit_now(0 if result.state == PipelineState.DONE else 1)


if __name__ == '__main__':
    main()
    exit_now(0)
