package translate

import (
	"testing"
)

// A payload row read or write whose spec is not one (metadata, headers, a
// format the rows do not carry) fails validation naming it; one whose
// output or input is not a row is refused at submission naming the
// transform.
func TestKafkaPayloadRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"read with metadata", (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, TimestampPolicy: TimestampCreateTime, PayloadRow: true, WithMetadata: true}).Validate(),
			[]string{"payload row", "no metadata"}},
		{"read of longs", (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaLong, TimestampPolicy: TimestampCreateTime, PayloadRow: true}).Validate(),
			[]string{"payload row", "Long"}},
		{"write with headers", (&KafkaWrite{Topic: "out", KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, PayloadRow: true, WithHeaders: true}).Validate(),
			[]string{"payload row", "no headers"}},
		{"write of strings", (&KafkaWrite{Topic: "out", KeyFormat: KafkaByteArray, ValueFormat: KafkaString, PayloadRow: true}).Validate(),
			[]string{"payload row", "String"}},
		{"JSON read not a payload read", (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, TimestampPolicy: TimestampCreateTime,
			RowFormat: KafkaRowJSON, RowSchema: `{"type":"object"}`}).Validate(), []string{"JSON read", "payload row"}},
		{"JSON read of strings", (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaString, TimestampPolicy: TimestampCreateTime,
			PayloadRow: true, RowFormat: KafkaRowJSON, RowSchema: `{"type":"object"}`}).Validate(), []string{"JSON read", "String"}},
		{"JSON read through a registry", (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, TimestampPolicy: TimestampCreateTime,
			PayloadRow: true, RowFormat: KafkaRowJSON, RowSchema: `{"type":"object"}`, SchemaRegistryURL: "http://r"}).Validate(), []string{"registry", "AVRO", "JSON"}},
		{"Avro read of a bad schema", (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, TimestampPolicy: TimestampCreateTime,
			PayloadRow: true, RowFormat: KafkaRowAvro, RowSchema: `"long"`}).Validate(), []string{"Avro schema", "want a record"}},
		{"read of another row format", (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, TimestampPolicy: TimestampCreateTime,
			PayloadRow: true, RowFormat: "PROTO"}).Validate(), []string{"row format", "PROTO"}},
		{"write of another row format", (&KafkaWrite{Topic: "out", KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, PayloadRow: true, RowFormat: "PROTO"}).Validate(),
			[]string{"row format", "PROTO"}},
		{"JSON write not a payload write", (&KafkaWrite{Topic: "out", KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, RowFormat: KafkaRowJSON}).Validate(),
			[]string{"JSON write", "payload row"}},
	} {
		t.Run(tc.name, func(t *testing.T) { errContains(t, tc.err, tc.want...) })
	}
	for _, tc := range []struct {
		name  string
		read  func(*KafkaRead)
		write func(*KafkaWrite)
		want  []string
	}{
		{"read into KV", func(r *KafkaRead) { r.PayloadRow, r.ValueFormat = true, KafkaString }, nil, []string{"kafkaSourcePlaceholder", "output", "beam:coder:kv:v1", "want a row"}},
		{"write from KV", nil, func(w *KafkaWrite) { w.PayloadRow, w.KeyFormat, w.ValueFormat = true, KafkaByteArray, KafkaByteArray }, []string{"kafkaSinkPlaceholder", "input", "beam:coder:kv:v1", "want a row"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := okKafkaRead(), okKafkaWrite()
			if tc.read != nil {
				tc.read(r)
			}
			if tc.write != nil {
				tc.write(w)
			}
			_, err := Translate(kafkaPipeline(t, r, w), Options{})
			errContains(t, err, tc.want...)
		})
	}
}
