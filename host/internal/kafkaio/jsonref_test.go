package kafkaio

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// The JSON read as it was built on encoding/json (a whole map[string]any
// per value), kept as the oracle of FuzzJSONRead: the streaming reader
// must make the same rows of the same values and refuse the same ones.

// referenceJSONRow is the row the encoding/json reader made of value, or
// its error.
func referenceJSONRow(s *pipepb.Schema, value []byte) ([]byte, error) {
	obj, err := refParseJSONObject(value)
	if err != nil {
		return nil, err
	}
	w, err := refNestedJSONRowWriter(s, map[*pipepb.Schema]*refJSONRowWriter{})
	if err != nil {
		return nil, err
	}
	return w.append(nil, obj, "")
}

func refParseJSONObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not JSON: data after its value")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a JSON %s, want an object", refJSONKind(v))
	}
	return obj, nil
}

// refJSONRowWriter writes JSON objects as rows of a schema.
type refJSONRowWriter struct {
	fields []*pipepb.Field // in encoding order
	// nested are the writers of nested rows' schemas, made once and
	// shared by every writer of one encoder (a task's, one goroutine).
	nested map[*pipepb.Schema]*refJSONRowWriter
}

func refNestedJSONRowWriter(s *pipepb.Schema, nested map[*pipepb.Schema]*refJSONRowWriter) (*refJSONRowWriter, error) {
	if w := nested[s]; w != nil {
		return w, nil
	}
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	w := &refJSONRowWriter{fields: make([]*pipepb.Field, len(order)), nested: nested}
	for i, o := range order {
		w.fields[i] = s.GetFields()[o]
	}
	nested[s] = w
	return w, nil
}

// append appends obj as a row: the field count, the null bitmap (empty
// when no field is null, as the Go SDK writes it), the non-null fields.
func (w *refJSONRowWriter) append(dst []byte, obj map[string]any, path string) ([]byte, error) {
	n := len(w.fields)
	for _, f := range w.fields {
		if obj[f.GetName()] == nil && !f.GetType().GetNullable() {
			return nil, fmt.Errorf("property %q: missing or null, and the schema requires it", fieldPath(path, f.GetName()))
		}
	}
	dst = appendRowHeader(dst, n, func(i int) bool { return obj[w.fields[i].GetName()] == nil })
	for _, f := range w.fields {
		v := obj[f.GetName()]
		if v == nil {
			continue
		}
		var err error
		if dst, err = w.appendValue(dst, f.GetType(), v, fieldPath(path, f.GetName())); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// appendValue appends a non-null JSON value as a value of type t.
func (w *refJSONRowWriter) appendValue(dst []byte, t *pipepb.FieldType, v any, path string) ([]byte, error) {
	mismatch := func(want string) error {
		return fmt.Errorf("property %q: a JSON %s, want %s", path, refJSONKind(v), want)
	}
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		switch ti.AtomicType {
		case pipepb.AtomicType_STRING:
			s, ok := v.(string)
			if !ok {
				return nil, mismatch("a string")
			}
			return appendBytes(dst, s), nil
		case pipepb.AtomicType_BOOLEAN:
			b, ok := v.(bool)
			if !ok {
				return nil, mismatch("a boolean")
			}
			if b {
				return append(dst, 1), nil
			}
			return append(dst, 0), nil
		case pipepb.AtomicType_INT64:
			num, ok := v.(json.Number)
			if !ok {
				return nil, mismatch("an integer")
			}
			i, err := strconv.ParseInt(string(num), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("property %q: %s is not an integer of 64 bits", path, num)
			}
			return binary.AppendUvarint(dst, uint64(i)), nil
		case pipepb.AtomicType_DOUBLE:
			num, ok := v.(json.Number)
			if !ok {
				return nil, mismatch("a number")
			}
			f, err := strconv.ParseFloat(string(num), 64)
			if err != nil {
				return nil, fmt.Errorf("property %q: %s is out of a double's range", path, num)
			}
			return binary.BigEndian.AppendUint64(dst, math.Float64bits(f)), nil
		}
	case *pipepb.FieldType_ArrayType:
		items, ok := v.([]any)
		if !ok {
			return nil, mismatch("an array")
		}
		et := ti.ArrayType.GetElementType()
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(items)))
		for i, item := range items {
			ip := path + "[" + strconv.Itoa(i) + "]"
			if item == nil {
				if !et.GetNullable() {
					return nil, fmt.Errorf("property %q: null, and the schema's items are not nullable", ip)
				}
				dst = append(dst, 0)
				continue
			}
			if et.GetNullable() {
				dst = append(dst, 1)
			}
			var err error
			if dst, err = w.appendValue(dst, et, item, ip); err != nil {
				return nil, err
			}
		}
		return dst, nil
	case *pipepb.FieldType_RowType:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, mismatch("an object")
		}
		rw, err := refNestedJSONRowWriter(ti.RowType.GetSchema(), w.nested)
		if err != nil {
			return nil, err
		}
		return rw.append(dst, obj, path)
	}
	return nil, fmt.Errorf("property %q: a JSON read has no values of type %s", path, translate.FieldTypeString(t))
}

// refJSONKind names a parsed JSON value's kind in messages.
func refJSONKind(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string " + strconv.Quote(v)
	case json.Number:
		return "number " + string(v)
	case bool:
		return "boolean " + strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// FuzzJSONRead: the streaming JSON read makes exactly the row the
// encoding/json reader made of any value, and refuses exactly the values
// it refused, with the same message unless one of them found the value
// is not JSON.
func FuzzJSONRead(f *testing.F) {
	for _, v := range []string{
		`{"name":"a","count":1,"price":2.5,"paid":true,"tags":["x","y"],"scores":[1,null,-0.5],"address":{"city":"Oslo","zip":150}}`,
		`{"count":-9223372036854775808,"name":"\u00e9\n","other":[1,{}]}`,
		` {"name":"","count":0,"price":null,"tags":[],"address":{"city":""}} `,
		`{"name":"big","count":9007199254740993,"price":1e300}`,
		`{"name":1,"count":1,"name":"b"}`,
		`{"name":"a","count":1,"count":null}`,
		`{"name":"a","count":1,"tags":["x",2],"tags":["y"]}`,
		`{"name":"a","count":1,"address":{"zip":1},"address":{"city":"c"}}`,
		`{"name":"a","count":"1","paid":"x"}`,
		`{"paid":"x"}`,
		`{"name":"\ud800","count":1}`,
		"{\"name\":\"\xff\",\"count\":1}",
		`{"name":"a","count":1,"tags":["x",2] `,
		`{"name":"a","count":1} {}`,
		`[1]`, `null`, `"x"`, `not json`, ``,
		`{"name":"a","count":1e2,"price":1e999}`,
		`{"name":"a","count":1,"scores":[null,1,"x"]}`,
		`{"name":"a","count":1,"address":[]}`,
	} {
		f.Add([]byte(v))
	}
	s, err := translate.JSONRowSchema(orderSchema)
	if err != nil {
		f.Fatal(err)
	}
	enc, err := NewJSONPayloadEncoder(rowCoders(f, s), "row", orderSchema)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		got, err := enc(nil, &kgo.Record{Value: value})
		want, wantErr := referenceJSONRow(s, value)
		switch {
		case err == nil && wantErr == nil:
			if !bytes.Equal(got, want) {
				t.Fatalf("%q: row %x, encoding/json's %x", value, got, want)
			}
		case err == nil || wantErr == nil:
			t.Fatalf("%q: error %v, encoding/json's %v", value, err, wantErr)
		case strings.HasPrefix(wantErr.Error(), "not JSON") || strings.HasPrefix(err.Error(), "not JSON"):
			// Both refuse it; which fault each names first may differ
			// (encoding/json parsed the whole value first).
		case err.Error() != wantErr.Error():
			t.Fatalf("%q: error %v, encoding/json's %v", value, err, wantErr)
		}
	})
}

// fieldPath is the path of field name of the value at path.
func fieldPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
