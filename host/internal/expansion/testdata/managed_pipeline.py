"""Constructs (never runs) Python pipelines with managed Kafka and the
Kafka schema transforms against an expansion service, and writes what the
Go test checks.

usage: managed_pipeline.py OUT HOST:PORT MODE
  MODE pipeline: OUT is the serialized pipeline proto of managed.Read(KAFKA)
    (RAW and STRING), a Map to rows of one bytes field, and
    managed.Write(KAFKA) (RAW), and of a read of the kafka_read schema
    transform named directly;
  MODE error: OUT is the error managed.Read(KAFKA) with format XML raises;
  MODE yaml: OUT is the serialized pipeline proto of a Beam YAML pipeline of
    ReadFromKafka → MapToFields → WriteToKafka (RAW), the Kafka transforms
    provided by the expansion service (a remote provider);
  MODE yaml-json: the same with format JSON: ReadFromKafka of a JSON schema
    → MapToFields of two of its fields → WriteToKafka (JSON), and the read's
    error_handling output → MapToFields → WriteToKafka (RAW).
"""
import sys
import typing

import apache_beam as beam
from apache_beam.transforms import managed
from apache_beam.transforms.external import SchemaAwareExternalTransform

YAML = '''
pipeline:
  transforms:
    - type: ReadFromKafka
      name: Read
      config:
        bootstrap_servers: b:9092
        topic: in
        format: RAW
        auto_offset_reset_config: earliest
    - type: MapToFields
      name: ToValue
      input: Read
      config:
        language: python
        fields:
          value: payload
    - type: WriteToKafka
      name: Write
      input: ToValue
      config:
        bootstrap_servers: b:9092
        topic: out
        format: RAW
providers:
  - type: remote
    config:
      address: %s
    transforms:
      ReadFromKafka: 'beam:schematransform:org.apache.beam:kafka_read:v1'
      WriteToKafka: 'beam:schematransform:org.apache.beam:kafka_write:v1'
'''

YAML_JSON = '''
pipeline:
  transforms:
    - type: ReadFromKafka
      name: Read
      config:
        bootstrap_servers: b:9092
        topic: in
        format: JSON
        schema: |
          {"type": "object", "required": ["name"],
           "properties": {"name": {"type": "string"}, "count": {"type": "integer"}}}
        error_handling:
          output: errors
    - type: MapToFields
      name: Failed
      input: Read.errors
      config:
        language: python
        fields:
          value: failed_row
    - type: WriteToKafka
      name: WriteErrors
      input: Failed
      config:
        bootstrap_servers: b:9092
        topic: errors
        format: RAW
    - type: MapToFields
      name: Pick
      input: Read
      config:
        language: python
        fields:
          who: name
          n: count
    - type: WriteToKafka
      name: Write
      input: Pick
      config:
        bootstrap_servers: b:9092
        topic: out
        format: JSON
providers:
  - type: remote
    config:
      address: %s
    transforms:
      ReadFromKafka: 'beam:schematransform:org.apache.beam:kafka_read:v1'
      WriteToKafka: 'beam:schematransform:org.apache.beam:kafka_write:v1'
'''


class Value(typing.NamedTuple):
  value: bytes


# Rows, not pickled tuples: what a RAW write takes.
beam.coders.registry.register_coder(Value, beam.coders.RowCoder)


def main(out, service, mode):
  p = beam.Pipeline()
  if mode == 'error':
    try:
      _ = p | managed.Read(
          managed.KAFKA,
          config={
              'bootstrap_servers': 'b:9092', 'topic': 'in', 'format': 'XML'
          },
          expansion_service=service)
    except Exception as e:  # the expansion error, as the SDK raises it
      with open(out, 'w') as f:
        f.write(str(e))
      return
    raise SystemExit('no expansion error')
  if mode in ('yaml', 'yaml-json'):
    try:
      from apache_beam.yaml.yaml_transform import expand_pipeline
    except ImportError as e:  # Beam YAML needs jinja2, not in every venv
      print('no Beam YAML:', e)
      sys.exit(3)
    expand_pipeline(p, (YAML if mode == 'yaml' else YAML_JSON) % service)
    with open(out, 'wb') as f:
      f.write(p.to_runner_api().SerializeToString())
    return
  rows = p | 'ReadRaw' >> managed.Read(
      managed.KAFKA,
      config={
          'bootstrap_servers': 'b1:9092', 'topic': 'in', 'format': 'RAW',
          'auto_offset_reset_config': 'earliest',
          'consumer_config_updates': {'max.poll.records': 500}
      },
      expansion_service=service)
  _ = (
      rows
      | 'Upper' >> beam.Map(lambda r: Value(r.payload.upper())).with_output_types(Value)
      | 'WriteRaw' >> managed.Write(
          managed.KAFKA,
          config={
              'bootstrap_servers': 'b2:9092', 'topic': 'out', 'format': 'RAW',
              'producer_config_updates': {'linger.ms': '5'}
          },
          expansion_service=service))
  _ = p | 'ReadString' >> managed.Read(
      managed.KAFKA,
      config={'bootstrap_servers': 'b1:9092', 'topic': 'in2', 'format': 'STRING'},
      expansion_service=service)
  _ = p | 'ReadDirect' >> SchemaAwareExternalTransform(
      identifier='beam:schematransform:org.apache.beam:kafka_read:v1',
      expansion_service=service,
      rearrange_based_on_discovery=True,
      bootstrap_servers='b3:9092',
      topic='in3',
      format='RAW')
  with open(out, 'wb') as f:
    f.write(p.to_runner_api().SerializeToString())


if __name__ == '__main__':
  main(*sys.argv[1:])
