package translate

import (
	"strings"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
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
			PayloadRow: true, RowFormat: "THRIFT"}).Validate(), []string{"row format", "THRIFT"}},
		{"write of another row format", (&KafkaWrite{Topic: "out", KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, PayloadRow: true, RowFormat: "THRIFT"}).Validate(),
			[]string{"row format", "THRIFT"}},
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

// A read's outputs: one, or, with an error output, two of which one has
// the error output's name; anything else is an error naming what is
// missing.
func TestKafkaReadOutputs(t *testing.T) {
	plain, withErrs := &KafkaRead{}, &KafkaRead{ErrorOutput: "errors"}
	if main, errs, err := KafkaReadOutputs(map[string]string{"out": "p1"}, plain); err != nil || main != "p1" || errs != "" {
		t.Errorf("one output: %q %q %v", main, errs, err)
	}
	if main, errs, err := KafkaReadOutputs(map[string]string{"output": "p1", "errors": "p2"}, withErrs); err != nil || main != "p1" || errs != "p2" {
		t.Errorf("with errors: %q %q %v", main, errs, err)
	}
	for _, c := range []struct {
		name    string
		outputs map[string]string
		r       *KafkaRead
		want    string
	}{
		{"two without an error output", map[string]string{"a": "p1", "b": "p2"}, plain, "needs 1 outputs, has 2"},
		{"error output missing", map[string]string{"output": "p1", "bad": "p2"}, withErrs, `error output "errors" has no output of that name`},
		{"error output alone", map[string]string{"errors": "p2"}, withErrs, "needs 2 outputs, has 1"},
	} {
		if _, _, err := KafkaReadOutputs(c.outputs, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	errContains(t, (&KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, TimestampPolicy: TimestampCreateTime,
		ErrorOutput: "errors"}).Validate(), "error output", "payload row")
}

// A write's error output is a structured format's, and its rows are the
// input's row and a message.
func TestKafkaWriteErrorOutput(t *testing.T) {
	errContains(t, (&KafkaWrite{Topic: "out", KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, PayloadRow: true, ErrorOutput: "errors"}).Validate(),
		"error output", "JSON, Avro or PROTO")
	in := &pipepb.Schema{Id: "in", Fields: []*pipepb.Field{{Name: "a", Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: pipepb.AtomicType_INT64}}}}}
	s := KafkaWriteErrorSchema(in)
	if got := fieldNames(s); got != "failed_row, error_message" {
		t.Errorf("fields %s", got)
	}
	if err := SameRowLayout(s.GetFields()[0].GetType().GetRowType().GetSchema(), in); err != nil {
		t.Errorf("failed_row: %v", err)
	}
}
