package translate

import (
	"fmt"
	"slices"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// The rows of Kafka IO (beam:coder:row:v1), the contract between the
// expansion service, which gives them to the SDKs, and the host, which
// encodes and decodes them (host/internal/kafkaio):
//
//   - KafkaRecordSchema, the output of a read with metadata: Java's
//     KafkaIO.ByteArrayKafkaRecord, so Python's
//     ReadFromKafka(with_metadata=True) gets the rows it gets from Java.
//   - The input of a write with headers (CheckKafkaWriteSchema): the user's
//     own row, read by field name as Java's KafkaIO.WriteWithHeaders does.

// KafkaRecordSchemaID is the schema id of KafkaRecordSchema.
const KafkaRecordSchemaID = "ksrunner-kafka-record-v1"

// Java's KafkaTimestampType: a with-metadata row's timestampTypeId and
// timestampTypeName are the record's own type (the topic's
// message.timestamp.type), whatever the read's timestamp policy.
const (
	KafkaNoTimestampType   = "NoTimestampType" // id -1
	KafkaCreateTimeType    = "CreateTime"      // id 0
	KafkaLogAppendTimeType = "LogAppendTime"   // id 1
)

// KafkaRecordSchema is the row of a read with metadata: the fields of
// Java's KafkaIO.ByteArrayKafkaRecord, in its order (its
// @SchemaFieldNumber), with its nullability; headers are KafkaIO.KafkaHeader
// rows (key, nullable value). Java always gives a list of headers (empty
// when the record has none), never null.
func KafkaRecordSchema() *pipepb.Schema {
	atomic := func(t pipepb.AtomicType, nullable bool) *pipepb.FieldType {
		return &pipepb.FieldType{Nullable: nullable, TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: t}}
	}
	field := func(i int32, name string, t *pipepb.FieldType) *pipepb.Field {
		return &pipepb.Field{Name: name, Type: t, Id: i, EncodingPosition: i}
	}
	header := &pipepb.Schema{Id: KafkaRecordSchemaID + "-header", Fields: []*pipepb.Field{
		field(0, "key", atomic(pipepb.AtomicType_STRING, false)),
		field(1, "value", atomic(pipepb.AtomicType_BYTES, true)),
	}}
	headers := &pipepb.FieldType{Nullable: true, TypeInfo: &pipepb.FieldType_ArrayType{ArrayType: &pipepb.ArrayType{
		ElementType: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{Schema: header}}},
	}}}
	return &pipepb.Schema{Id: KafkaRecordSchemaID, Fields: []*pipepb.Field{
		field(0, "topic", atomic(pipepb.AtomicType_STRING, false)),
		field(1, "partition", atomic(pipepb.AtomicType_INT32, false)),
		field(2, "offset", atomic(pipepb.AtomicType_INT64, false)),
		field(3, "timestamp", atomic(pipepb.AtomicType_INT64, false)),
		field(4, "key", atomic(pipepb.AtomicType_BYTES, true)),
		field(5, "value", atomic(pipepb.AtomicType_BYTES, true)),
		field(6, "headers", headers),
		field(7, "timestampTypeId", atomic(pipepb.AtomicType_INT32, false)),
		field(8, "timestampTypeName", atomic(pipepb.AtomicType_STRING, false)),
	}}
}

// EncodingOrder is the order in which a row coder encodes the fields of
// s, as indexes into s.Fields: their order, or by encoding_position when
// the schema sets them.
func EncodingOrder(s *pipepb.Schema) ([]int, error) {
	order := make([]int, len(s.GetFields()))
	for i := range order {
		order[i] = i
	}
	if !s.GetEncodingPositionsSet() {
		return order, nil
	}
	slices.SortFunc(order, func(a, b int) int {
		return int(s.GetFields()[a].GetEncodingPosition() - s.GetFields()[b].GetEncodingPosition())
	})
	for i, f := range order {
		if p := s.GetFields()[f].GetEncodingPosition(); p != int32(i) {
			return nil, fmt.Errorf("schema %s: encoding positions are not 0..%d (field %q at %d)", s.GetId(), len(order)-1, s.GetFields()[f].GetName(), p)
		}
	}
	return order, nil
}

// SameRowLayout reports why two schemas' rows do not encode alike (the
// same field names and types, nullability included, in the same encoding
// order), or nil. Ids, descriptions and options do not matter.
func SameRowLayout(got, want *pipepb.Schema) error {
	go_, err := EncodingOrder(got)
	if err != nil {
		return err
	}
	wo, err := EncodingOrder(want)
	if err != nil {
		return err
	}
	if len(go_) != len(wo) {
		return fmt.Errorf("%d fields (%s), want %d (%s)", len(go_), fieldNames(got), len(wo), fieldNames(want))
	}
	for i := range go_ {
		g, w := got.GetFields()[go_[i]], want.GetFields()[wo[i]]
		if g.GetName() != w.GetName() {
			return fmt.Errorf("field %d is %q, want %q (fields %s, want %s)", i, g.GetName(), w.GetName(), fieldNames(got), fieldNames(want))
		}
		if err := sameFieldType(g.GetType(), w.GetType()); err != nil {
			return fmt.Errorf("field %q: %w", g.GetName(), err)
		}
	}
	return nil
}

func sameFieldType(g, w *pipepb.FieldType) error {
	if g.GetNullable() != w.GetNullable() {
		return fmt.Errorf("nullable %v, want %v", g.GetNullable(), w.GetNullable())
	}
	switch wt := w.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		if g.GetAtomicType() != wt.AtomicType || g.GetTypeInfo() == nil {
			return fmt.Errorf("type %s, want %s", FieldTypeString(g), FieldTypeString(w))
		}
	case *pipepb.FieldType_ArrayType:
		ga, ok := g.GetTypeInfo().(*pipepb.FieldType_ArrayType)
		if !ok {
			return fmt.Errorf("type %s, want %s", FieldTypeString(g), FieldTypeString(w))
		}
		if err := sameFieldType(ga.ArrayType.GetElementType(), wt.ArrayType.GetElementType()); err != nil {
			return fmt.Errorf("element: %w", err)
		}
	case *pipepb.FieldType_IterableType:
		gi, ok := g.GetTypeInfo().(*pipepb.FieldType_IterableType)
		if !ok {
			return fmt.Errorf("type %s, want %s", FieldTypeString(g), FieldTypeString(w))
		}
		if err := sameFieldType(gi.IterableType.GetElementType(), wt.IterableType.GetElementType()); err != nil {
			return fmt.Errorf("element: %w", err)
		}
	case *pipepb.FieldType_MapType:
		gm, ok := g.GetTypeInfo().(*pipepb.FieldType_MapType)
		if !ok {
			return fmt.Errorf("type %s, want %s", FieldTypeString(g), FieldTypeString(w))
		}
		if err := sameFieldType(gm.MapType.GetKeyType(), wt.MapType.GetKeyType()); err != nil {
			return fmt.Errorf("key: %w", err)
		}
		if err := sameFieldType(gm.MapType.GetValueType(), wt.MapType.GetValueType()); err != nil {
			return fmt.Errorf("value: %w", err)
		}
	case *pipepb.FieldType_RowType:
		gr, ok := g.GetTypeInfo().(*pipepb.FieldType_RowType)
		if !ok {
			return fmt.Errorf("type %s, want %s", FieldTypeString(g), FieldTypeString(w))
		}
		return SameRowLayout(gr.RowType.GetSchema(), wt.RowType.GetSchema())
	default:
		if !proto.Equal(g, w) {
			return fmt.Errorf("type %s, want %s", FieldTypeString(g), FieldTypeString(w))
		}
	}
	return nil
}

func fieldNames(s *pipepb.Schema) string {
	var names []string
	for _, f := range s.GetFields() {
		names = append(names, f.GetName())
	}
	return strings.Join(names, ", ")
}

// FieldTypeString names a field type for messages: INT64, nullable BYTES,
// ARRAY<ROW(key, value)>.
func FieldTypeString(t *pipepb.FieldType) string {
	s := ""
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		s = ti.AtomicType.String()
	case *pipepb.FieldType_ArrayType:
		s = "ARRAY<" + FieldTypeString(ti.ArrayType.GetElementType()) + ">"
	case *pipepb.FieldType_IterableType:
		s = "ITERABLE<" + FieldTypeString(ti.IterableType.GetElementType()) + ">"
	case *pipepb.FieldType_MapType:
		s = "MAP<" + FieldTypeString(ti.MapType.GetKeyType()) + ", " + FieldTypeString(ti.MapType.GetValueType()) + ">"
	case *pipepb.FieldType_RowType:
		s = "ROW(" + fieldNames(ti.RowType.GetSchema()) + ")"
	case *pipepb.FieldType_LogicalType:
		s = "LOGICAL " + ti.LogicalType.GetUrn()
	default:
		s = "unknown type"
	}
	if t.GetNullable() {
		s = "nullable " + s
	}
	return s
}

// The fields of a write-with-headers row, as Java's KafkaIO.WriteWithHeaders
// reads them, by name: key and value (bytes, possibly null), and optionally
// headers (a list of rows of a string key and bytes value), topic (the
// row's topic; null: the write's), partition (null: the producer's
// partitioner) and timestamp (milliseconds; null: the producer's clock).
// Other fields are ignored, as Java ignores them.
const (
	KafkaWriteKey       = "key"
	KafkaWriteValue     = "value"
	KafkaWriteHeaders   = "headers"
	KafkaWriteTopic     = "topic"
	KafkaWritePartition = "partition"
	KafkaWriteTimestamp = "timestamp"
)

// CheckKafkaWriteSchema checks that rows of s are ones a write with
// headers can write: key and value BYTES; headers, when present, an
// ARRAY or ITERABLE of rows with a STRING key and a BYTES value; topic
// STRING; partition INT32 (Java's getInt32), or INT16 or INT64 (Python's
// int), checked in range when written; timestamp INT64. Any may be
// nullable.
func CheckKafkaWriteSchema(s *pipepb.Schema) error {
	byName := map[string]*pipepb.FieldType{}
	for _, f := range s.GetFields() {
		byName[f.GetName()] = f.GetType()
	}
	atomic := func(name string, required bool, want ...pipepb.AtomicType) error {
		t, ok := byName[name]
		if !ok {
			if required {
				return fmt.Errorf("the row has no field %q (fields %s): a write with headers needs key and value", name, fieldNames(s))
			}
			return nil
		}
		if _, isAtomic := t.GetTypeInfo().(*pipepb.FieldType_AtomicType); !isAtomic || !slices.Contains(want, t.GetAtomicType()) {
			var ws []string
			for _, w := range want {
				ws = append(ws, w.String())
			}
			return fmt.Errorf("field %q is %s, want %s", name, FieldTypeString(t), strings.Join(ws, " or "))
		}
		return nil
	}
	for _, err := range []error{
		atomic(KafkaWriteKey, true, pipepb.AtomicType_BYTES),
		atomic(KafkaWriteValue, true, pipepb.AtomicType_BYTES),
		atomic(KafkaWriteTopic, false, pipepb.AtomicType_STRING),
		atomic(KafkaWritePartition, false, pipepb.AtomicType_INT32, pipepb.AtomicType_INT16, pipepb.AtomicType_INT64),
		atomic(KafkaWriteTimestamp, false, pipepb.AtomicType_INT64),
	} {
		if err != nil {
			return err
		}
	}
	if t, ok := byName[KafkaWriteHeaders]; ok {
		var elem *pipepb.FieldType
		switch ti := t.GetTypeInfo().(type) {
		case *pipepb.FieldType_ArrayType:
			elem = ti.ArrayType.GetElementType()
		case *pipepb.FieldType_IterableType:
			elem = ti.IterableType.GetElementType()
		}
		hs := elem.GetRowType().GetSchema()
		if hs == nil {
			return fmt.Errorf("field %q is %s, want a list of rows (key STRING, value BYTES)", KafkaWriteHeaders, FieldTypeString(t))
		}
		hb := map[string]*pipepb.FieldType{}
		for _, f := range hs.GetFields() {
			hb[f.GetName()] = f.GetType()
		}
		if k := hb["key"]; k.GetAtomicType() != pipepb.AtomicType_STRING {
			return fmt.Errorf("field %q: its rows' key is %s, want STRING", KafkaWriteHeaders, typeOrMissing(k))
		}
		if v := hb["value"]; v.GetAtomicType() != pipepb.AtomicType_BYTES {
			return fmt.Errorf("field %q: its rows' value is %s, want BYTES", KafkaWriteHeaders, typeOrMissing(v))
		}
	}
	return nil
}

func typeOrMissing(t *pipepb.FieldType) string {
	if t == nil {
		return "missing"
	}
	return FieldTypeString(t)
}

// rowSchema returns the schema of a beam:coder:row:v1 coder.
func rowSchema(c *pipepb.Coder) (*pipepb.Schema, error) {
	s := &pipepb.Schema{}
	if err := proto.Unmarshal(c.GetSpec().GetPayload(), s); err != nil {
		return nil, fmt.Errorf("row coder: its schema: %w", err)
	}
	return s, nil
}

// RowCoderSchema returns the schema of a row coder, possibly length
// prefixed (as translate's wire coders wrap it), or fails naming the coder
// it found.
func RowCoderSchema(coders map[string]*pipepb.Coder, cid string) (*pipepb.Schema, error) {
	c := coders[cid]
	if c == nil {
		return nil, fmt.Errorf("coder %q is not defined", cid)
	}
	if c.GetSpec().GetUrn() == urnCoderLengthPrefix && len(c.GetComponentCoderIds()) == 1 {
		c = coders[c.GetComponentCoderIds()[0]]
	}
	if urn := c.GetSpec().GetUrn(); urn != urnCoderRow {
		return nil, fmt.Errorf("coder %s, want a row (%s)", urn, urnCoderRow)
	}
	return rowSchema(c)
}

const urnCoderRow = "beam:coder:row:v1"
