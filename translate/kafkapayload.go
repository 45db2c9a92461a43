package translate

import (
	"fmt"
	"maps"
	"slices"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Payload rows: the elements of the Kafka schema transforms
// (beam:schematransform:org.apache.beam:kafka_read:v1 / kafka_write:v1,
// which managed.Read/Write(KAFKA) and Beam YAML's ReadFromKafka and
// WriteToKafka expand to) in their RAW and STRING formats, as Java's
// KafkaReadSchemaTransformProvider gives them:
//
//   - a read with KafkaRead.PayloadRow outputs, per record, a row of one
//     non-null field "payload": the record's value as BYTES (ValueFormat
//     ByteArray, format RAW) or as a STRING (ValueFormat String, format
//     STRING). The key and the record's metadata are not in the row.
//   - a write with KafkaWrite.PayloadRow takes rows of exactly one field,
//     of type BYTES (nullable or not), and produces its value as the
//     record's value, with a null key (format RAW).
//
// The structured formats JSON and AVRO (RowFormat, kafkajson.go,
// kafkaavro.go) are payload rows too: a read's row is its schema's, and a
// write takes rows of any schema its format can write.

// KafkaPayloadSchemaID is the schema id of KafkaPayloadSchema(KafkaByteArray);
// the STRING row's id has "-string" appended (the SDKs cache row types by
// id, so the two rows need their own).
const KafkaPayloadSchemaID = "ksrunner-kafka-payload-v1"

// KafkaPayloadSchema is the row of a payload read of a value format
// (KafkaByteArray or KafkaString).
func KafkaPayloadSchema(valueFormat string) *pipepb.Schema {
	t, id := pipepb.AtomicType_BYTES, KafkaPayloadSchemaID
	if valueFormat == KafkaString {
		t, id = pipepb.AtomicType_STRING, KafkaPayloadSchemaID+"-string"
	}
	return &pipepb.Schema{Id: id, Fields: []*pipepb.Field{{
		Name: "payload",
		Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: t}},
	}}}
}

// CheckKafkaPayloadWriteSchema checks the input row of a payload write:
// exactly one field, of type BYTES, as Java's RAW format requires.
func CheckKafkaPayloadWriteSchema(s *pipepb.Schema) error {
	if len(s.GetFields()) != 1 {
		return fmt.Errorf("a Kafka write of format RAW writes rows of exactly one BYTES field (the record's value), got %d fields (%s)", len(s.GetFields()), fieldNames(s))
	}
	f := s.GetFields()[0]
	if f.GetType().GetAtomicType() != pipepb.AtomicType_BYTES {
		return fmt.Errorf("a Kafka write of format RAW writes rows of exactly one BYTES field (the record's value), field %q is %s", f.GetName(), FieldTypeString(f.GetType()))
	}
	return nil
}

// KafkaErrorSchemaID is the schema id of KafkaErrorSchema.
const KafkaErrorSchemaID = "ksrunner-kafka-error-v1"

// KafkaErrorSchema is the row of a read's error output: the record's value
// and why it could not be read (Java's ErrorHandling.errorSchemaBytes).
func KafkaErrorSchema() *pipepb.Schema {
	field := func(name string, t pipepb.AtomicType) *pipepb.Field {
		return &pipepb.Field{Name: name, Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: t}}}
	}
	return &pipepb.Schema{Id: KafkaErrorSchemaID, Fields: []*pipepb.Field{
		field("failed_row", pipepb.AtomicType_BYTES), field("error_message", pipepb.AtomicType_STRING),
	}}
}

// KafkaWriteErrorSchema is the row of a write's error output for input
// rows of schema input: the row and why it could not be written (Java's
// ErrorHandling.errorSchema).
func KafkaWriteErrorSchema(input *pipepb.Schema) *pipepb.Schema {
	return &pipepb.Schema{Id: input.GetId() + "-kafka-write-error", Fields: []*pipepb.Field{
		{Name: "failed_row", Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{Schema: input}}}},
		{Name: "error_message", Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: pipepb.AtomicType_STRING}}, Id: 1},
	}}
}

// KafkaReadOutputs returns a Kafka read transform's main output and, for
// a read with an error output, that output's PCollection.
func KafkaReadOutputs(outputs map[string]string, r *KafkaRead) (main, errs string, err error) {
	want := 1
	if r.ErrorOutput != "" {
		want = 2
		if errs = outputs[r.ErrorOutput]; errs == "" {
			return "", "", fmt.Errorf("a Kafka read with error output %q has no output of that name (outputs %v)", r.ErrorOutput, slices.Sorted(maps.Keys(outputs)))
		}
	}
	if len(outputs) != want {
		return "", "", fmt.Errorf("a Kafka read needs %d outputs, has %d", want, len(outputs))
	}
	for tag, pc := range outputs {
		if tag != r.ErrorOutput {
			main = pc
		}
	}
	return main, errs, nil
}

// CheckKafkaRowWriteSchema checks the input rows of a payload write w
// (its row format; empty: RAW).
func CheckKafkaRowWriteSchema(w *KafkaWrite, s *pipepb.Schema) error {
	switch w.RowFormat {
	case KafkaRowJSON:
		return CheckKafkaJSONWriteSchema(s)
	case KafkaRowAvro:
		return CheckKafkaAvroWriteSchema(s)
	case KafkaRowProto:
		return CheckProtoWriteSchema(s, w.RowSchema, w.MessageName)
	}
	return CheckKafkaPayloadWriteSchema(s)
}

// validatePayload checks the payload-row parts of a read's spec.
func (r *KafkaRead) validatePayload() error {
	switch {
	case !r.PayloadRow && r.ErrorOutput != "":
		return fmt.Errorf("kafka read: an error output is a payload row read's")
	case !r.PayloadRow && (r.RowFormat != "" || r.SchemaRegistryURL != ""):
		return fmt.Errorf("kafka read: a %s read is a payload row read", r.RowFormat)
	case !r.PayloadRow:
		return nil
	case r.WithMetadata:
		return fmt.Errorf("kafka read: a payload row read has no metadata")
	case r.ValueFormat != KafkaByteArray && r.ValueFormat != KafkaString:
		return fmt.Errorf("kafka read: a payload row read reads ByteArray (RAW) or String (STRING) values, not %s", r.ValueFormat)
	case r.SchemaRegistryURL != "" && r.RowFormat != KafkaRowAvro:
		return fmt.Errorf("kafka read: a schema registry serves reads of format %s, not %q", KafkaRowAvro, r.RowFormat)
	case r.RowFormat != "" && r.ValueFormat != KafkaByteArray:
		return fmt.Errorf("kafka read: a %s read reads ByteArray values, not %s", r.RowFormat, r.ValueFormat)
	}
	_, err := r.PayloadSchema()
	return err
}

// PayloadSchema is the row schema of a payload row read's output: the
// row of its schema for a JSON or Avro read (JSONRowSchema,
// AvroRowSchema), else KafkaPayloadSchema of the value format.
func (r *KafkaRead) PayloadSchema() (*pipepb.Schema, error) {
	switch r.RowFormat {
	case "":
		return KafkaPayloadSchema(r.ValueFormat), nil
	case KafkaRowJSON:
		return JSONRowSchema(r.RowSchema)
	case KafkaRowAvro:
		return AvroRowSchema(r.RowSchema)
	case KafkaRowProto:
		return ProtoRowSchema(r.RowSchema, r.MessageName)
	}
	return nil, fmt.Errorf("kafka read: row format %q: want %s, %s or %s", r.RowFormat, KafkaRowJSON, KafkaRowAvro, KafkaRowProto)
}

// validatePayload checks the payload-row parts of a write's spec.
func (w *KafkaWrite) validatePayload() error {
	switch {
	case w.ErrorOutput != "" && (!w.PayloadRow || w.RowFormat == ""):
		return fmt.Errorf("kafka write: an error output is a JSON, Avro or PROTO write's")
	case !w.PayloadRow && w.RowFormat != "":
		return fmt.Errorf("kafka write: a %s write is a payload row write", w.RowFormat)
	case w.RowFormat != "" && w.RowFormat != KafkaRowJSON && w.RowFormat != KafkaRowAvro && w.RowFormat != KafkaRowProto:
		return fmt.Errorf("kafka write: row format %q: want %s, %s or %s", w.RowFormat, KafkaRowJSON, KafkaRowAvro, KafkaRowProto)
	case !w.PayloadRow:
		return nil
	case w.WithHeaders:
		return fmt.Errorf("kafka write: a payload row write has no headers")
	case w.ValueFormat != KafkaByteArray:
		return fmt.Errorf("kafka write: a payload row write writes ByteArray (RAW) values, not %s", w.ValueFormat)
	case w.RowFormat == KafkaRowProto:
		set, err := DecodeProtoSchema(w.RowSchema)
		if err == nil {
			_, err = ProtoMessage(set, w.MessageName)
		}
		if err != nil {
			return fmt.Errorf("kafka write: %w", err)
		}
	}
	return nil
}

// checkKafkaPayloadRead checks a payload read's output coder: the
// KafkaPayloadSchema row of its value format.
func (t *translator) checkKafkaPayloadRead(name, pc string, r *KafkaRead) error {
	s, err := t.kafkaRow(name, "output", pc)
	if err != nil {
		return err
	}
	want, err := r.PayloadSchema()
	if err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	if err := SameRowLayout(s, want); err != nil {
		if r.RowFormat != "" {
			return fmt.Errorf("transform %q: output %q: the row is not the row of the %s read's schema: %w", name, pc, r.RowFormat, err)
		}
		return fmt.Errorf("transform %q: output %q: the row is not the payload row of a Kafka schema transform read: %w", name, pc, err)
	}
	return nil
}

// checkKafkaPayloadWrite checks a payload write's input coder.
func (t *translator) checkKafkaPayloadWrite(name, pc string, w *KafkaWrite) error {
	s, err := t.kafkaRow(name, "input", pc)
	if err != nil {
		return err
	}
	if err := CheckKafkaRowWriteSchema(w, s); err != nil {
		return fmt.Errorf("transform %q: input %q: %w", name, pc, err)
	}
	return nil
}
