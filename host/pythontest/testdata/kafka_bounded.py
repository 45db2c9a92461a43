"""Copies at most MAX_RECORDS records from one Kafka topic to another
through ReadFromKafka(max_num_records=...) and WriteToKafka (bytes keys and
values, expanded by ksrunner's expansion service). The read is bounded: the
script runs the job to its end and exits 0 when it ends DONE.

Usage: kafka_bounded.py IN_TOPIC OUT_TOPIC BOOTSTRAP EXPANSION MAX_RECORDS
         [pipeline options]
"""

import sys

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka, WriteToKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from script_exit import exit_now


def main():
    in_topic, out_topic, bootstrap, expansion, max_records = sys.argv[1:6]
    p = beam.Pipeline(options=PipelineOptions(sys.argv[6:]))
    _ = (
        p
        | ReadFromKafka(
            consumer_config={'bootstrap.servers': bootstrap, 'auto.offset.reset': 'earliest'},
            topics=[in_topic],
            max_num_records=int(max_records),
            expansion_service=expansion)
        | WriteToKafka(
            producer_config={'bootstrap.servers': bootstrap},
            topic=out_topic,
            expansion_service=expansion))
    result = p.run()
    result.wait_until_finish()
    print('job ended', result.state, flush=True)
    exit_now(0 if result.state == PipelineState.DONE else 1)


if __name__ == '__main__':
    main()
    exit_now(0)
