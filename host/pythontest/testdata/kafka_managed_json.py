"""Reads a Kafka topic of JSON objects through managed.Read(KAFKA) (format
JSON, with a JSON schema) and writes one JSON object per record through
managed.Write(KAFKA) (format JSON), both expanded by ksrunner's expansion
service.

Each input object is an order: name (string) and count (integer) required;
price (number), tags (array of strings) and address (an object of a
required city and an optional zip) optional. Each output object is Out:
the name upper-cased, twice the count, the price, the tags and the
address's city (null without an address).

Like kafka_count.py, the script submits the unbounded job, writes its id to
its first argument and exits 0 when the job ends CANCELLED.

Usage: kafka_managed_json.py JOBID_FILE IN_TOPIC OUT_TOPIC BOOTSTRAP EXPANSION
         [pipeline options]
"""

import json
import os
import sys
import typing

import apache_beam as beam
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import managed

SCHEMA = {
    'type': 'object',
    'properties': {
        'name': {'type': 'string'},
        'count': {'type': 'integer'},
        'price': {'type': 'number'},
        'tags': {'type': 'array', 'items': {'type': 'string'}},
        'address': {'$ref': '#/definitions/address'},
    },
    'required': ['name', 'count'],
    'definitions': {
        'address': {
            'type': 'object',
            'properties': {'city': {'type': 'string'}, 'zip': {'type': ['string', 'null']}},
            'required': ['city'],
        },
    },
}


class Out(typing.NamedTuple):
    name: str
    total: int
    price: typing.Optional[float]
    tags: typing.Optional[typing.Sequence[str]]
    city: typing.Optional[str]


# Rows, not pickled tuples: what a JSON write takes.
coders.registry.register_coder(Out, coders.RowCoder)


def to_out(r):
    # The read's rows have the schema's fields, nested rows included.
    return Out(
        name=r.name.upper(),
        total=r.count * 2,
        price=r.price,
        tags=None if r.tags is None else list(r.tags),
        city=None if r.address is None else r.address.city)


def main():
    jobid_file, in_topic, out_topic, bootstrap, expansion = sys.argv[1:6]
    p = beam.Pipeline(options=PipelineOptions(sys.argv[6:]))
    _ = (
        p
        | managed.Read(
            managed.KAFKA,
            config={
                'bootstrap_servers': bootstrap, 'topic': in_topic,
                'format': 'JSON', 'schema': json.dumps(SCHEMA),
                'auto_offset_reset_config': 'earliest'
            },
            expansion_service=expansion)
        | 'ToOut' >> beam.Map(to_out).with_output_types(Out)
        | managed.Write(
            managed.KAFKA,
            config={'bootstrap_servers': bootstrap, 'topic': out_topic, 'format': 'JSON'},
            expansion_service=expansion))
    result = p.run()
    with open(jobid_file + '.tmp', 'w') as f:
        f.write(result._job_id)
    os.rename(jobid_file + '.tmp', jobid_file)
    print('submitted job', result._job_id, flush=True)
    try:
        result.wait_until_finish()
    except RuntimeError as e:
        print('wait_until_finish:', e, flush=True)
    state = result.state
    print('job ended', state, flush=True)
    sys.exit(0 if state == PipelineState.CANCELLED else 1)


if __name__ == '__main__':
    main()
