"""Reads a Kafka topic of orders through managed.Read(KAFKA) (format FORMAT:
JSON objects of a JSON schema, or AVRO datums of an Avro schema) and writes
one Out per record through managed.Write(KAFKA) (the same format), both
expanded by ksrunner's expansion service.

Each input value is an order: name (string) and count (integer) required;
price (number), tags (array of strings) and address (a record of a
required city and an optional zip) optional. Each output value is Out: the
name upper-cased, twice the count, the price, the tags and the address's
city (null without an address).

Like kafka_count.py, the script submits the unbounded job, writes its id to
its first argument and exits 0 when the job ends CANCELLED.

FORMAT PROTO@FILE reads messages shop.Order of the FileDescriptorSet FILE
and writes messages shop.Out (an order's home is its address). FORMAT AVRO@URL reads Avro through the schema registry at URL (subject
IN_TOPIC-value, the registry's latest schema) and writes JSON. FORMAT
JSON>ERRORS reads JSON with error_handling: the values it cannot read go,
as "error_message: failed_row" bytes, to topic ERRORS (format RAW).

Usage: kafka_managed_rows.py JOBID_FILE IN_TOPIC OUT_TOPIC BOOTSTRAP EXPANSION
         FORMAT [pipeline options]
"""

import json
import sys
import typing

import apache_beam as beam
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import managed

from submitted_job import run_and_await
from script_exit import exit_now

JSON_SCHEMA = {
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

AVRO_SCHEMA = {
    'type': 'record', 'name': 'Order', 'fields': [
        {'name': 'name', 'type': 'string'},
        {'name': 'count', 'type': 'long'},
        {'name': 'price', 'type': ['null', 'double']},
        {'name': 'tags', 'type': ['null', {'type': 'array', 'items': 'string'}]},
        {'name': 'address', 'type': ['null', {
            'type': 'record', 'name': 'Address', 'fields': [
                {'name': 'city', 'type': 'string'},
                {'name': 'zip', 'type': ['null', 'string']},
            ]}]},
    ]
}


class Out(typing.NamedTuple):
    name: str
    total: int
    price: typing.Optional[float]
    tags: typing.Optional[typing.Sequence[str]]
    city: typing.Optional[str]


class Value(typing.NamedTuple):
    value: bytes


# Rows, not pickled tuples: what a JSON or Avro (or RAW) write takes.
coders.registry.register_coder(Out, coders.RowCoder)
coders.registry.register_coder(Value, coders.RowCoder)


def to_out(r):
    # The read's rows have the schema's fields, nested rows included.
    return Out(
        name=r.name.upper(),
        total=r.count * 2,
        price=r.price,
        tags=None if r.tags is None else list(r.tags),
        city=None if address(r) is None else address(r).city)


def address(r):
    # shop.Order (PROTO) calls it home.
    return r.home if hasattr(r, 'home') else r.address


def main():
    jobid_file, in_topic, out_topic, bootstrap, expansion, fmt = sys.argv[1:7]
    p = beam.Pipeline(options=PipelineOptions(sys.argv[7:]))
    errors_topic = None
    if '>' in fmt:
        fmt, errors_topic = fmt.split('>')
    schema = JSON_SCHEMA if fmt == 'JSON' else AVRO_SCHEMA
    read_config = {
        'bootstrap_servers': bootstrap, 'topic': in_topic,
        'format': fmt, 'schema': json.dumps(schema),
        'auto_offset_reset_config': 'earliest'
    }
    write_format = fmt
    if errors_topic:
        read_config['error_handling'] = {'output': 'errors'}
    write_config = {}
    if fmt.startswith('PROTO@'):
        path = fmt[len('PROTO@'):]
        read_config = {
            'bootstrap_servers': bootstrap, 'topic': in_topic, 'format': 'PROTO',
            'file_descriptor_path': path, 'message_name': 'shop.Order',
            'auto_offset_reset_config': 'earliest'
        }
        write_format = 'PROTO'
        write_config = {'file_descriptor_path': path, 'message_name': 'shop.Out'}
    if fmt.startswith('AVRO@'):
        del read_config['schema']
        read_config['format'] = 'AVRO'
        read_config['confluent_schema_registry_url'] = fmt[len('AVRO@'):]
        read_config['confluent_schema_registry_subject'] = in_topic + '-value'
        write_format = 'JSON'

    read = p | managed.Read(managed.KAFKA, config=read_config, expansion_service=expansion)
    if errors_topic:
        # Several outputs: the transform gives them by name.
        _ = (
            read['errors']
            | 'Failed' >> beam.Map(lambda e: Value(e.error_message.encode('utf-8') + b': ' + e.failed_row)).with_output_types(Value)
            | 'WriteErrors' >> managed.Write(
                managed.KAFKA,
                config={'bootstrap_servers': bootstrap, 'topic': errors_topic, 'format': 'RAW'},
                expansion_service=expansion))
        read = read['output']
    _ = (
        read
        | 'ToOut' >> beam.Map(to_out).with_output_types(Out)
        | managed.Write(
            managed.KAFKA,
            config=dict({'bootstrap_servers': bootstrap, 'topic': out_topic, 'format': write_format}, **write_config),
            expansion_service=expansion))
    run_and_await(p, jobid_file)


if __name__ == '__main__':
    main()
    exit_now(0)
