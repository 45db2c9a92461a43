package translate

import (
	"strings"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// JSONRowSchema maps JSON Schema as Beam's JsonUtils does (fields in the
// document's order, required ones non-null, the rest nullable), resolves
// local references, takes a type and null as a nullable type, and gives
// equal texts equal ids.
func TestJSONRowSchema(t *testing.T) {
	for _, c := range []struct {
		name, schema, want string
	}{
		{"atomics", `{"type":"object","required":["s","i"],"properties":{"s":{"type":"string"},"i":{"type":"integer"},"n":{"type":"number"},"b":{"type":"boolean"}}}`,
			"s STRING, i INT64, n nullable DOUBLE, b nullable BOOLEAN"},
		{"no type, properties", `{"properties":{"z":{"type":"string"},"a":{"type":"string"}},"required":["a","z"]}`,
			"z STRING, a STRING"},
		{"arrays", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"aa":{"items":{"type":"array","items":{"type":["string","null"]}}}},"required":["a"]}`,
			"a ARRAY<INT64>, aa nullable ARRAY<ARRAY<nullable STRING>>"},
		{"nested", `{"type":"object","properties":{"o":{"type":"object","required":["x"],"properties":{"x":{"type":"number"},"y":{"type":"string"}}}}}`,
			"o nullable ROW(x DOUBLE, y nullable STRING)"},
		{"refs", `{"type":"object","required":["p"],"properties":{"p":{"$ref":"#/definitions/pt"},"q":{"$ref":"#/$defs/a~1b"}},"definitions":{"pt":{"type":"object","properties":{"x":{"type":"integer"}}}},"$defs":{"a/b":{"type":"string"}}}`,
			"p ROW(x nullable INT64), q nullable STRING"},
		{"null union required", `{"type":"object","required":["u"],"properties":{"u":{"type":["null","integer"]}}}`,
			"u nullable INT64"},
		{"empty", `{"type":"object"}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := JSONRowSchema(c.schema)
			if err != nil {
				t.Fatal(err)
			}
			if got := describeRow(s); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			again, _ := JSONRowSchema(c.schema)
			if s.GetId() == "" || again.GetId() != s.GetId() {
				t.Errorf("ids %q and %q for one text", s.GetId(), again.GetId())
			}
			for _, f := range s.GetFields() {
				if r := f.GetType().GetRowType().GetSchema(); r != nil && (r.GetId() == "" || r.GetId() == s.GetId()) {
					t.Errorf("nested row %q has id %q", f.GetName(), r.GetId())
				}
			}
		})
	}
	a, _ := JSONRowSchema(`{"properties":{"a":{"type":"string"}}}`)
	b, _ := JSONRowSchema(`{"properties":{"a":{"type":"integer"}}}`)
	if a.GetId() == b.GetId() {
		t.Errorf("two schemas share the id %q", a.GetId())
	}
}

// describeRow is s as "name TYPE, ...", nested rows with their fields.
func describeRow(s *pipepb.Schema) string {
	var parts []string
	for _, f := range s.GetFields() {
		parts = append(parts, f.GetName()+" "+describeType(f.GetType()))
	}
	return strings.Join(parts, ", ")
}

func describeType(t *pipepb.FieldType) string {
	s := ""
	switch {
	case t.GetArrayType() != nil:
		s = "ARRAY<" + describeType(t.GetArrayType().GetElementType()) + ">"
	case t.GetRowType() != nil:
		s = "ROW(" + describeRow(t.GetRowType().GetSchema()) + ")"
	default:
		s = FieldTypeString(t)
	}
	if t.GetNullable() && !strings.HasPrefix(s, "nullable ") {
		s = "nullable " + s
	}
	return s
}

// What JSONRowSchema cannot map is an error naming the property and the
// construct.
func TestJSONRowSchemaErrors(t *testing.T) {
	for _, c := range []struct {
		schema string
		want   []string
	}{
		{`{"type":`, []string{"JSON schema"}},
		{`{} {}`, []string{"after"}},
		{`[]`, []string{"not a JSON object"}},
		{`{"type":"array","items":{"type":"string"}}`, []string{"the schema", `"array"`, "object schema"}},
		{`{"properties":{"a":{"type":"array","items":[{"type":"string"}]}}}`, []string{`property "a"`, "tuple-like"}},
		{`{"properties":{"a":{"type":"array"}}}`, []string{`property "a"`, "one schema for all its items"}},
		{`{"properties":{"a":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`, []string{`property "a"`, "anyOf", "composite"}},
		{`{"properties":{"a":{"type":["string","integer"]}}}`, []string{`property "a"`, "union"}},
		{`{"properties":{"a":{"type":["null"]}}}`, []string{`property "a"`, "no type but null"}},
		{`{"properties":{"a":{"type":"null"}}}`, []string{`property "a"`, `"null"`, "not supported"}},
		{`{"properties":{"a":{"enum":["x"]}}}`, []string{`property "a"`, "no type"}},
		{`{"properties":{"a":{"type":"object","properties":{"b":{"type":"date"}}}}}`, []string{`property "a.b"`, `"date"`}},
		{`{"properties":{"a":{"$ref":"http://x/s.json"}}}`, []string{`property "a"`, "within the schema"}},
		{`{"properties":{"a":{"$ref":"#/definitions/none"}}}`, []string{`property "a"`, "no such schema"}},
		{`{"properties":{"a":{"$ref":"#/definitions/n"}},"definitions":{"n":{"type":"object","properties":{"next":{"$ref":"#/definitions/n"}}}}}`,
			[]string{`property "a.next"`, "refers to itself"}},
		{`{"properties":{"a":"string"}}`, []string{`property "a"`, "want an object"}},
		{`{"properties":{"a":{"type":"string"}},"required":"a"}`, []string{"required", "array"}},
	} {
		_, err := JSONRowSchema(c.schema)
		if err == nil {
			t.Errorf("%s: mapped", c.schema)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.schema, err, w)
			}
		}
	}
}
