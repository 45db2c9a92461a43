// Package kafkaio owns the conversion between the records of a user's Kafka
// topics and the elements of a pipeline: the Kafka formats that ksrunner's
// deserializers and serializers implement (ByteArray, String, Long,
// Integer), encoded in the Beam coders the SDKs give a Kafka read's output
// or a Kafka write's input.
//
// The source and sink themselves are task roots and sinks
// (host/internal/task/kafka.go): this package knows nothing of tasks,
// transactions or topics' layout, only bytes.
//
// Formats and coders (translate.checkKafkaCoder allows the same pairs):
// ByteArray is the bytes coder; String is string_utf8 (or bytes), and a
// value that is not UTF-8 does not decode; Long is Kafka's LongSerializer
// (8 bytes, big-endian) as a varint; Integer is IntegerSerializer (4 bytes,
// big-endian) as a varint, sign-extended as the Go and Python SDKs decode
// it. A length_prefix wraps its component's encoding in a varint length; a
// nullable coder writes 0 for a Kafka null and 1 before the value, and a
// null under any other coder does not decode.
//
// Rows (row.go): a read with metadata's element is the record row
// (translate.KafkaRecordSchema, Java's ByteArrayKafkaRecord), written by a
// hand-coded encoder (AppendRecordRow: one pass, no reflection) whose
// output the tests decode with the Beam Go SDK's own row coder. Its
// timestamp and timestamp type are the record's own (CreateTime 0 or
// LogAppendTime 1, the topic's message.timestamp.type), whatever the
// read's timestamp policy, which sets only the element's event time. A
// write with headers takes the user's row, whose schema is in its coder:
// fields are found by name as Java's KafkaIO.WriteWithHeaders finds them
// (key, value, headers, topic, partition, timestamp; others skipped), in
// the schema's encoding order.
//
// Payload rows (payload.go): the Kafka schema transforms' RAW and STRING
// formats (managed Kafka, Beam YAML). A read's element is a row of one
// field, payload, the record's value (translate.KafkaPayloadSchema; a
// tombstone has none and fails the task, naming the record, as Java's
// non-nullable payload would); a write's input is a row of one BYTES
// field whose value becomes the record's value, with a null key.
//
// JSON rows (json.go): the schema transforms' JSON format. A read streams
// each record's value, a JSON object, into a row of the read's schema
// (translate.JSONRowSchema), as Beam's RowJson deserializer reads it; a
// value that is not the schema's JSON is an error naming the property, a
// bad record to the task. A write turns each input row, whatever its
// schema (translate.CheckKafkaJSONWriteSchema), into a JSON object.
//
// Avro rows (avro.go): the schema transforms' AVRO format without a
// registry, the same both ways with Avro binary datums of the read's
// record schema (translate.AvroRowSchema) and of the schema derived from a
// write's rows (translate.AvroWriteSchema); registry.go reads Confluent's
// wire format, fetching writers' schemas from a registry. Protobuf rows
// (proto.go): messages of a FileDescriptorSet's type, both ways, read
// (protoread.go) and written (protowrite.go) in the wire format directly,
// as protobuf-go's dynamicpb messages would be.
//
// Readers and writers are made once per schema and reused by one task's
// goroutine; an error about a value names its path (pathError, paths.go),
// built only when there is an error. The tests keep the readers and
// writers these replaced (encoding/json maps, dynamicpb messages) as the
// oracles of their fuzz tests (jsonref_test.go, protoref_test.go).
package kafkaio
