package translate

import (
	"strings"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Two schemas' rows encode alike when their fields have the same names
// and types, nullability included, whatever the ids of the schemas they
// nest (in rows, arrays, iterables, maps' keys and values).
func TestSameRowLayout(t *testing.T) {
	atomic := func(a pipepb.AtomicType, nullable bool) *pipepb.FieldType {
		return &pipepb.FieldType{Nullable: nullable, TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: a}}
	}
	row := func(id string, fields ...*pipepb.Field) *pipepb.FieldType {
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{Schema: &pipepb.Schema{Id: id, Fields: fields}}}}
	}
	field := func(name string, t *pipepb.FieldType) *pipepb.Field { return &pipepb.Field{Name: name, Type: t} }
	inner := func(id string, nullable bool) *pipepb.FieldType {
		return row(id, field("id", atomic(pipepb.AtomicType_INT32, nullable)))
	}
	mapOf := func(k, v *pipepb.FieldType) *pipepb.FieldType {
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_MapType{MapType: &pipepb.MapType{KeyType: k, ValueType: v}}}
	}
	iterOf := func(e *pipepb.FieldType) *pipepb.FieldType {
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_IterableType{IterableType: &pipepb.IterableType{ElementType: e}}}
	}
	arrayOf := func(e *pipepb.FieldType) *pipepb.FieldType {
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_ArrayType{ArrayType: &pipepb.ArrayType{ElementType: e}}}
	}
	one := func(t *pipepb.FieldType) *pipepb.Schema {
		return &pipepb.Schema{Id: "s", Fields: []*pipepb.Field{field("f", t)}}
	}
	for _, c := range []struct {
		name      string
		got, want *pipepb.FieldType
		wantErr   string // "" for the same layout
	}{
		{"nested row, other id", inner("a", true), inner("b", true), ""},
		{"map of rows, other id", mapOf(atomic(pipepb.AtomicType_INT32, false), inner("a", true)), mapOf(atomic(pipepb.AtomicType_INT32, false), inner("b", true)), ""},
		{"iterable of rows, other id", iterOf(inner("a", false)), iterOf(inner("b", false)), ""},
		{"array of rows, other id", arrayOf(inner("a", false)), arrayOf(inner("b", false)), ""},
		{"map value's field nullability", mapOf(atomic(pipepb.AtomicType_STRING, false), inner("a", false)), mapOf(atomic(pipepb.AtomicType_STRING, false), inner("a", true)), "value"},
		{"map key type", mapOf(atomic(pipepb.AtomicType_INT64, false), inner("a", true)), mapOf(atomic(pipepb.AtomicType_INT32, false), inner("a", true)), "key"},
		{"iterable element type", iterOf(atomic(pipepb.AtomicType_INT64, false)), iterOf(atomic(pipepb.AtomicType_STRING, false)), "element"},
		{"map against array", arrayOf(inner("a", true)), mapOf(atomic(pipepb.AtomicType_INT32, false), inner("a", true)), "want MAP"},
	} {
		err := SameRowLayout(one(c.got), one(c.want))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want the same layout", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.wantErr)
		}
	}
}
