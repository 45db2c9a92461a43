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
