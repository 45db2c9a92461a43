package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// JSON rows: the Kafka schema transforms' format JSON, as Java's
// KafkaReadSchemaTransformProvider and KafkaWriteSchemaTransformProvider
// give it (Beam's JsonUtils):
//
//   - a read (KafkaRead.RowFormat JSON, RowSchema the JSON Schema) parses each record's value as a JSON
//     object and outputs it as a row of the schema JSONRowSchema derives
//     from the read's JSON Schema;
//   - a write (KafkaWrite.RowFormat JSON) writes each input row as a JSON object
//     (null fields as null), with a null key; CheckKafkaJSONWriteSchema
//     says which rows it can.
//
// JSONRowSchema maps JSON Schema as JsonUtils.beamSchemaFromJsonSchema
// does: the root is an object schema; each property becomes a field, in
// the order the document declares them (everit's map gives Java no
// defined order); "string" is STRING, "integer" INT64, "number" DOUBLE,
// "boolean" BOOLEAN, "object" a ROW of its properties, "array" an ARRAY
// of its "items" schema (tuple-like arrays are refused, as in Java); a
// property not listed in its object's "required" is nullable. Local
// references ("$ref": "#/...") resolve as everit resolves them. Beyond
// Java, a type union of one type and "null" (["string", "null"]) is that
// type, nullable, where everit's combined schema makes Java fail. Every
// other construct (composite schemas, enum or const alone, remote
// references, a type of several non-null types) is an error naming the
// property.

// JSONRowSchema returns the row schema of the values a JSON read of
// JSON Schema text reads. Its id, and its nested rows' ids, derive from
// the text, so that one schema always gets the same ids (the SDKs cache
// row types by id).
func JSONRowSchema(text string) (*pipepb.Schema, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	doc, err := readOrdered(dec)
	if err == nil {
		if _, end := dec.Token(); end != io.EOF {
			err = fmt.Errorf("data after the schema's JSON value")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("JSON schema: %w", err)
	}
	root, ok := doc.(*orderedObject)
	if !ok {
		return nil, fmt.Errorf("JSON schema: not a JSON object")
	}
	sum := sha256.Sum256([]byte(text))
	c := &jsonSchemaConv{root: root, resolving: map[string]bool{}}
	return c.object(root, "", "ksrunner-kafka-json-"+hex.EncodeToString(sum[:8]))
}

// orderedObject is a JSON object that keeps its keys' order.
type orderedObject struct {
	keys []string
	vals map[string]any
}

func (o *orderedObject) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// readOrdered reads one JSON value: objects as *orderedObject, arrays as
// []any, numbers as json.Number.
func readOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch d {
	case '{':
		o := &orderedObject{vals: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string) // a key: the decoder checks the syntax
			v, err := readOrdered(dec)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[k]; !dup {
				o.keys = append(o.keys, k)
			}
			o.vals[k] = v
		}
		_, err := dec.Token() // '}'
		return o, err
	case '[':
		a := []any{}
		for dec.More() {
			v, err := readOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token() // ']'
		return a, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

type jsonSchemaConv struct {
	root      *orderedObject
	resolving map[string]bool // references being resolved: a cycle is an error
}

// jsonWhere names a property path in messages: "the schema" for the root.
func jsonWhere(path string) string {
	if path == "" {
		return "the schema"
	}
	return "property " + strconv.Quote(path)
}

// object maps an object schema to a row schema of id.
func (c *jsonSchemaConv) object(o *orderedObject, path, id string) (*pipepb.Schema, error) {
	if t, ok := o.get("type"); ok && t != "object" {
		return nil, fmt.Errorf("JSON schema: %s: type %v, want an object schema", jsonWhere(path), jsonText(t))
	}
	required := map[string]bool{}
	if r, ok := o.get("required"); ok {
		names, ok := r.([]any)
		if !ok {
			return nil, fmt.Errorf("JSON schema: %s: required is %s, want an array of property names", jsonWhere(path), jsonText(r))
		}
		for _, n := range names {
			s, ok := n.(string)
			if !ok {
				return nil, fmt.Errorf("JSON schema: %s: required lists %s, want property names", jsonWhere(path), jsonText(n))
			}
			required[s] = true
		}
	}
	s := &pipepb.Schema{Id: id}
	if p, ok := o.get("properties"); ok {
		props, ok := p.(*orderedObject)
		if !ok {
			return nil, fmt.Errorf("JSON schema: %s: properties is %s, want an object", jsonWhere(path), jsonText(p))
		}
		for i, name := range props.keys {
			fp := name
			if path != "" {
				fp = path + "." + name
			}
			t, err := c.fieldType(props.vals[name], fp, fmt.Sprintf("%s-%d", id, i))
			if err != nil {
				return nil, err
			}
			if !required[name] {
				t.Nullable = true
			}
			s.Fields = append(s.Fields, &pipepb.Field{Name: name, Type: t, Id: int32(i)})
		}
	}
	return s, nil
}

// fieldType maps a property's schema to a field type (nullable only when
// its type admits null; object decides for its required properties).
func (c *jsonSchemaConv) fieldType(v any, path, id string) (*pipepb.FieldType, error) {
	o, ok := v.(*orderedObject)
	if !ok {
		return nil, fmt.Errorf("JSON schema: %s: its schema is %s, want an object", jsonWhere(path), jsonText(v))
	}
	if ref, ok := o.get("$ref"); ok {
		return c.reference(ref, path, id)
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf", "not"} {
		if _, ok := o.get(k); ok {
			return nil, fmt.Errorf("JSON schema: %s: %s: composite schemas are not supported (nor are they by Beam's Java SDK)", jsonWhere(path), k)
		}
	}
	typ, nullable, err := schemaType(o, path)
	if err != nil {
		return nil, err
	}
	atomic := func(a pipepb.AtomicType) *pipepb.FieldType {
		return &pipepb.FieldType{Nullable: nullable, TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: a}}
	}
	switch typ {
	case "string":
		return atomic(pipepb.AtomicType_STRING), nil
	case "integer":
		return atomic(pipepb.AtomicType_INT64), nil
	case "number":
		return atomic(pipepb.AtomicType_DOUBLE), nil
	case "boolean":
		return atomic(pipepb.AtomicType_BOOLEAN), nil
	case "object":
		s, err := c.object(o, path, id)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{Nullable: nullable, TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{Schema: s}}}, nil
	case "array":
		items, ok := o.get("items")
		if _, tuple := items.([]any); tuple || !ok {
			return nil, fmt.Errorf("JSON schema: %s: an array needs one schema for all its items (tuple-like arrays are not supported, nor are they by Beam's Java SDK)", jsonWhere(path))
		}
		elem, err := c.fieldType(items, path+"[]", id)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{Nullable: nullable, TypeInfo: &pipepb.FieldType_ArrayType{ArrayType: &pipepb.ArrayType{ElementType: elem}}}, nil
	}
	return nil, fmt.Errorf("JSON schema: %s: type %q is not supported (string, integer, number, boolean, object and array are)", jsonWhere(path), typ)
}

// schemaType returns a schema's type: its "type" (one name, or one name
// and "null"), else "object" for a schema with properties and "array" for
// one with items.
func schemaType(o *orderedObject, path string) (typ string, nullable bool, err error) {
	t, ok := o.get("type")
	switch t := t.(type) {
	case string:
		return t, false, nil
	case []any:
		for _, e := range t {
			switch {
			case e == "null":
				nullable = true
			case typ == "":
				if typ, ok = e.(string); !ok {
					return "", false, fmt.Errorf("JSON schema: %s: type lists %s, want type names", jsonWhere(path), jsonText(e))
				}
			default:
				return "", false, fmt.Errorf("JSON schema: %s: type %s: a union of types is not supported (one type, or one type and \"null\", is)", jsonWhere(path), jsonText(t))
			}
		}
		if typ == "" {
			return "", false, fmt.Errorf("JSON schema: %s: type %s names no type but null", jsonWhere(path), jsonText(t))
		}
		return typ, nullable, nil
	}
	if ok {
		return "", false, fmt.Errorf("JSON schema: %s: type is %s, want a type name", jsonWhere(path), jsonText(t))
	}
	if _, ok := o.get("properties"); ok {
		return "object", false, nil
	}
	if _, ok := o.get("items"); ok {
		return "array", false, nil
	}
	return "", false, fmt.Errorf("JSON schema: %s: no type (string, integer, number, boolean, object or array)", jsonWhere(path))
}

// reference resolves a local reference ("#", "#/definitions/x", JSON
// Pointer escapes included) and maps the schema it names.
func (c *jsonSchemaConv) reference(ref any, path, id string) (*pipepb.FieldType, error) {
	r, ok := ref.(string)
	if !ok || (r != "#" && !strings.HasPrefix(r, "#/")) {
		return nil, fmt.Errorf("JSON schema: %s: $ref %s: only references within the schema (\"#/...\") are supported", jsonWhere(path), jsonText(ref))
	}
	if c.resolving[r] {
		return nil, fmt.Errorf("JSON schema: %s: $ref %q refers to itself: recursive schemas have no row type", jsonWhere(path), r)
	}
	var target any = c.root
	if r != "#" {
		for _, tok := range strings.Split(r[2:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			o, ok := target.(*orderedObject)
			if !ok {
				return nil, fmt.Errorf("JSON schema: %s: $ref %q: no such schema", jsonWhere(path), r)
			}
			if target, ok = o.get(tok); !ok {
				return nil, fmt.Errorf("JSON schema: %s: $ref %q: no such schema", jsonWhere(path), r)
			}
		}
	}
	c.resolving[r] = true
	defer delete(c.resolving, r)
	return c.fieldType(target, path, id)
}

// jsonText shows a parsed JSON value in messages.
func jsonText(v any) string {
	switch v := v.(type) {
	case *orderedObject:
		return "an object"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = jsonText(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		return strconv.Quote(v)
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}

// CheckKafkaJSONWriteSchema checks that rows of s are ones a JSON write
// can write: fields of type STRING, BOOLEAN, INT32, INT64, FLOAT, DOUBLE,
// and ARRAYs, ITERABLEs and ROWs of them, nullable or not (the types
// Beam's RowJson writes, less DECIMAL and the date-time logical types,
// which ksrunner does not write yet). The error names the field.
func CheckKafkaJSONWriteSchema(s *pipepb.Schema) error {
	return checkJSONRow(s, "")
}

func checkJSONRow(s *pipepb.Schema, path string) error {
	for _, f := range s.GetFields() {
		fp := f.GetName()
		if path != "" {
			fp = path + "." + fp
		}
		if err := checkJSONType(f.GetType(), fp); err != nil {
			return err
		}
	}
	return nil
}

func checkJSONType(t *pipepb.FieldType, path string) error {
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		switch ti.AtomicType {
		case pipepb.AtomicType_STRING, pipepb.AtomicType_BOOLEAN, pipepb.AtomicType_INT32,
			pipepb.AtomicType_INT64, pipepb.AtomicType_FLOAT, pipepb.AtomicType_DOUBLE:
			return nil
		}
	case *pipepb.FieldType_ArrayType:
		return checkJSONType(ti.ArrayType.GetElementType(), path+"[]")
	case *pipepb.FieldType_IterableType:
		return checkJSONType(ti.IterableType.GetElementType(), path+"[]")
	case *pipepb.FieldType_RowType:
		return checkJSONRow(ti.RowType.GetSchema(), path)
	}
	return fmt.Errorf("a Kafka write of format JSON cannot write field %q of type %s (it writes STRING, BOOLEAN, INT32, INT64, FLOAT, DOUBLE, and arrays and rows of them)", path, FieldTypeString(t))
}
