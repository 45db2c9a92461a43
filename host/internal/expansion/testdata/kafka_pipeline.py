"""Constructs (never runs) Python pipelines with KafkaIO against an
expansion service, and writes what the Go test checks.

usage: kafka_pipeline.py OUT HOST:PORT MODE
  MODE pipeline: OUT is the serialized pipeline proto of a pipeline with
    ReadFromKafka (without and with metadata) and WriteToKafka (plain and
    with headers);
  MODE error: OUT is the error ReadFromKafka with an unsupported
    deserializer raises.
"""
import json
import sys
import typing

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka, WriteToKafka
from apache_beam.runners import pipeline_context


class Header(typing.NamedTuple):
  key: str
  value: bytes


class Record(typing.NamedTuple):
  key: bytes
  value: bytes
  headers: typing.List[Header]
  topic: typing.Optional[str]
  partition: typing.Optional[int]
  timestamp: typing.Optional[int]


# Rows, not pickled tuples: what a write with headers takes.
beam.coders.registry.register_coder(Header, beam.coders.RowCoder)
beam.coders.registry.register_coder(Record, beam.coders.RowCoder)


def main(out, service, mode):
  p = beam.Pipeline()
  if mode == 'error':
    try:
      _ = p | ReadFromKafka(
          consumer_config={'bootstrap.servers': 'b:9092'},
          topics=['in'],
          key_deserializer=
          'io.confluent.kafka.serializers.KafkaAvroDeserializer',
          expansion_service=service)
    except Exception as e:  # the expansion error, as the SDK raises it
      with open(out, 'w') as f:
        f.write(str(e))
      return
    raise SystemExit('no expansion error')
  records = p | 'Read' >> ReadFromKafka(
      consumer_config={
          'bootstrap.servers': 'b1:9092,b2:9092',
          'auto.offset.reset': 'earliest'
      },
      topics=['in1', 'in2'],
      key_deserializer='org.apache.kafka.common.serialization.LongDeserializer',
      value_deserializer=
      'org.apache.kafka.common.serialization.StringDeserializer',
      start_read_time=1700000000000,
      max_read_time=30,
      timestamp_policy=ReadFromKafka.create_time_policy,
      expansion_service=service)
  _ = (
      records
      | 'Bytes' >> beam.Map(lambda kv: (str(kv[0]).encode(), kv[1].encode())).
      with_output_types(typing.Tuple[bytes, bytes])
      | 'Write' >> WriteToKafka(
          producer_config={'bootstrap.servers': 'out:9092'},
          topic='out',
          expansion_service=service))
  meta = p | 'ReadMeta' >> ReadFromKafka(
      consumer_config={'bootstrap.servers': 'b1:9092'},
      topics=['in3'],
      with_metadata=True,
      expansion_service=service)
  _ = (
      meta
      | 'ToRecord' >> beam.Map(
          lambda r: Record(
              key=r.key or b'',
              value=r.value or b'',
              headers=[],
              topic=None,
              partition=None,
              timestamp=None)).with_output_types(Record)
      | 'WriteHeaders' >> WriteToKafka(
          producer_config={},
          topic='',
          with_headers=True,
          expansion_service=service))
  proto = p.to_runner_api()
  with open(out, 'wb') as f:
    f.write(proto.SerializeToString())
  with open(out + '.decoded', 'w') as f:
    json.dump(decode_outputs(proto), f)


def decode_outputs(proto):
  """Decodes elements with the reads' output coders, as Python DoFns
  downstream of them would receive them."""
  context = pipeline_context.PipelineContext(proto.components)
  decoded = {}
  for t in proto.components.transforms.values():
    if t.spec.urn != 'ksrunner:transform:kafka_read:v1':
      continue
    pcoll = proto.components.pcollections[list(t.outputs.values())[0]]
    coder = context.coders.get_by_id(pcoll.coder_id)
    if t.unique_name == 'Read':  # KV<nullable(Long), nullable(String)>
      # Nested, as in a windowed value on the data channel.
      impl = coder.get_impl()
      decoded[t.unique_name] = [
          list(impl.decode_nested(b'\x01\x05\x01\x01x')),
          list(impl.decode_nested(b'\x00\x01\x01y'))
      ]
    else:  # the with-metadata row, round trip
      row = beam.Row(
          topic='t',
          partition=1,
          offset=2,
          timestamp=3,
          key=None,
          value=b'v',
          headers=[beam.Row(key='h', value=b'x')],
          timestampTypeId=0,
          timestampTypeName='CreateTime')
      r = coder.decode(coder.encode(row))
      decoded[t.unique_name] = [
          r.topic,
          r.partition,
          r.offset,
          r.timestamp,
          r.key,
          r.value.decode(), [[h.key, h.value.decode()] for h in r.headers],
          r.timestampTypeId,
          r.timestampTypeName
      ]
  return decoded


if __name__ == '__main__':
  main(*sys.argv[1:])
