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
package kafkaio
