package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/hamba/avro/v2"
)

// Avro rows: the Kafka schema transforms' format AVRO without a schema
// registry, as Java's providers give it (Beam's AvroUtils): values are
// Avro binary datums of one schema, with no header.
//
//   - a read (KafkaRead.RowFormat AVRO, RowSchema the Avro schema, a
//     record) outputs each datum as a row of AvroRowSchema: each field of
//     the record a field of the row, in order; boolean, int, long, float,
//     double, string and bytes are BOOLEAN, INT32, INT64, FLOAT, DOUBLE,
//     STRING and BYTES; records are rows, arrays ARRAYs, maps
//     MAP<STRING, V>; a union of null and one type is that type, nullable.
//     Where Java gives a logical type, ksrunner gives its Avro
//     representation, as the Avro specification lets a reader: an enum is
//     its symbol (STRING), a fixed its bytes (BYTES), and logicalType
//     annotations (timestamp-millis, date, decimal, ...) are read as the
//     type they annotate. A union of other types, and a recursive record,
//     are errors naming the field.
//   - a write (KafkaWrite.RowFormat AVRO) writes each input row as a datum
//     of AvroWriteSchema(the row's schema), the schema Java's
//     AvroUtils.toAvroSchema derives: a nullable field is a union of null
//     (first) and its type.

// AvroRowSchema returns the row schema of the values an Avro read of
// schema text reads. Its ids derive from the text, as JSONRowSchema's.
func AvroRowSchema(text string) (*pipepb.Schema, error) {
	s, err := ParseAvroSchema(text)
	if err != nil {
		return nil, err
	}
	rec, ok := s.(*avro.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("Avro schema: a %s, want a record", s.Type())
	}
	sum := sha256.Sum256([]byte(text))
	c := &avroSchemaConv{visiting: map[string]bool{}}
	return c.record(rec, "", "ksrunner-kafka-avro-"+hex.EncodeToString(sum[:8]))
}

// ParseAvroSchema parses an Avro schema, its named types in a cache of its
// own (hamba/avro's Parse shares one cache per process, in which two
// jobs' schemas may name different records alike).
func ParseAvroSchema(text string) (avro.Schema, error) {
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("Avro schema: %w", err)
	}
	return s, nil
}

type avroSchemaConv struct {
	visiting map[string]bool // records being mapped: a cycle is an error
}

func (c *avroSchemaConv) record(rec *avro.RecordSchema, path, id string) (*pipepb.Schema, error) {
	if c.visiting[rec.FullName()] {
		return nil, fmt.Errorf("Avro schema: field %q: record %s contains itself: recursive records have no row type", path, rec.FullName())
	}
	c.visiting[rec.FullName()] = true
	defer delete(c.visiting, rec.FullName())
	s := &pipepb.Schema{Id: id}
	for i, f := range rec.Fields() {
		fp := f.Name()
		if path != "" {
			fp = path + "." + fp
		}
		t, err := c.fieldType(f.Type(), fp, fmt.Sprintf("%s-%d", id, i))
		if err != nil {
			return nil, err
		}
		s.Fields = append(s.Fields, &pipepb.Field{Name: f.Name(), Type: t, Id: int32(i)})
	}
	return s, nil
}

// AvroNullable returns the non-null branch of a union of null and one
// type, and that branch's index.
func AvroNullable(u *avro.UnionSchema) (avro.Schema, int, bool) {
	if !u.Nullable() {
		return nil, 0, false
	}
	_, typ := u.Indices()
	return u.Types()[typ], typ, true
}

func (c *avroSchemaConv) fieldType(s avro.Schema, path, id string) (*pipepb.FieldType, error) {
	atomic := func(a pipepb.AtomicType) *pipepb.FieldType {
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: a}}
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		return c.fieldType(s.Schema(), path, id)
	case *avro.UnionSchema:
		inner, _, ok := AvroNullable(s)
		if !ok {
			return nil, fmt.Errorf("Avro schema: field %q: union %s: only a union of null and one type is supported", path, s.String())
		}
		t, err := c.fieldType(inner, path, id)
		if err != nil {
			return nil, err
		}
		t.Nullable = true
		return t, nil
	case *avro.RecordSchema:
		r, err := c.record(s, path, id)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{Schema: r}}}, nil
	case *avro.ArraySchema:
		e, err := c.fieldType(s.Items(), path+"[]", id)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_ArrayType{ArrayType: &pipepb.ArrayType{ElementType: e}}}, nil
	case *avro.MapSchema:
		v, err := c.fieldType(s.Values(), path+"[]", id)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_MapType{MapType: &pipepb.MapType{KeyType: atomic(pipepb.AtomicType_STRING), ValueType: v}}}, nil
	case *avro.EnumSchema:
		return atomic(pipepb.AtomicType_STRING), nil
	case *avro.FixedSchema:
		return atomic(pipepb.AtomicType_BYTES), nil
	case *avro.PrimitiveSchema:
		if a, ok := avroAtomic[s.Type()]; ok {
			return atomic(a), nil
		}
	}
	return nil, fmt.Errorf("Avro schema: field %q: type %s is not supported", path, s.Type())
}

var avroAtomic = map[avro.Type]pipepb.AtomicType{
	avro.Boolean: pipepb.AtomicType_BOOLEAN, avro.Int: pipepb.AtomicType_INT32, avro.Long: pipepb.AtomicType_INT64,
	avro.Float: pipepb.AtomicType_FLOAT, avro.Double: pipepb.AtomicType_DOUBLE,
	avro.String: pipepb.AtomicType_STRING, avro.Bytes: pipepb.AtomicType_BYTES,
}

// CheckKafkaAvroWriteSchema checks that rows of s are ones an Avro write
// can write: fields of type BOOLEAN, INT32, INT64, FLOAT, DOUBLE, STRING,
// BYTES, and ARRAYs, ITERABLEs, MAP<STRING, V>s and ROWs of them,
// nullable or not. The error names the field.
func CheckKafkaAvroWriteSchema(s *pipepb.Schema) error {
	_, err := AvroWriteSchema(s)
	return err
}

// AvroWriteSchema is the Avro schema (JSON) of the datums an Avro write
// of rows of s writes: a record named topLevelRecord (nested records named
// by their field path), as Java's AvroUtils.toAvroSchema names it.
func AvroWriteSchema(s *pipepb.Schema) (string, error) {
	v, err := avroRecordJSON(s, "topLevelRecord", "")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

func avroRecordJSON(s *pipepb.Schema, name, path string) (map[string]any, error) {
	order, err := EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	fields := []any{}
	for _, i := range order {
		f := s.GetFields()[i]
		fp := f.GetName()
		if path != "" {
			fp = path + "." + fp
		}
		if avroName(f.GetName()) != f.GetName() || f.GetName() == "" {
			return nil, fmt.Errorf("a Kafka write of format AVRO cannot write field %q: an Avro field name is letters, digits and _, not starting with a digit", fp)
		}
		t, err := avroTypeJSON(f.GetType(), fp)
		if err != nil {
			return nil, err
		}
		fields = append(fields, map[string]any{"name": f.GetName(), "type": t})
	}
	return map[string]any{"type": "record", "name": name, "fields": fields}, nil
}

func avroTypeJSON(t *pipepb.FieldType, path string) (any, error) {
	var v any
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		for at, a := range avroAtomic {
			if a == ti.AtomicType {
				v = string(at)
			}
		}
	case *pipepb.FieldType_ArrayType, *pipepb.FieldType_IterableType:
		et := t.GetArrayType().GetElementType()
		if et == nil {
			et = t.GetIterableType().GetElementType()
		}
		items, err := avroTypeJSON(et, path+"[]")
		if err != nil {
			return nil, err
		}
		v = map[string]any{"type": "array", "items": items}
	case *pipepb.FieldType_MapType:
		if ti.MapType.GetKeyType().GetAtomicType() != pipepb.AtomicType_STRING || ti.MapType.GetKeyType().GetNullable() {
			break
		}
		values, err := avroTypeJSON(ti.MapType.GetValueType(), path+"[]")
		if err != nil {
			return nil, err
		}
		v = map[string]any{"type": "map", "values": values}
	case *pipepb.FieldType_RowType:
		name := "topLevelRecord_" + strings.NewReplacer(".", "_", "[]", "_item").Replace(path)
		r, err := avroRecordJSON(ti.RowType.GetSchema(), avroName(name), path)
		if err != nil {
			return nil, err
		}
		v = r
	}
	if v == nil {
		return nil, fmt.Errorf("a Kafka write of format AVRO cannot write field %q of type %s (it writes BOOLEAN, INT32, INT64, FLOAT, DOUBLE, STRING, BYTES, and arrays, maps with STRING keys and rows of them)", path, FieldTypeString(t))
	}
	if t.GetNullable() {
		return []any{"null", v}, nil
	}
	return v, nil
}

// avroName makes name an Avro name: letters, digits and _, not starting
// with a digit.
func avroName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}
