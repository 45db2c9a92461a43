package kafkaio

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// JSON rows (translate.JSONRowSchema, format JSON of the Kafka schema
// transforms): a read turns each record's value, a JSON object, into a
// row of the read's schema, as Beam's RowJson deserializer does: a
// property the schema does not name is ignored; a missing or null one is a
// null field, an error if the field is not nullable; INT64 takes integers
// only (no fraction, no exponent), DOUBLE any number, STRING strings,
// BOOLEAN true and false, ARRAY arrays (a null item an error), ROW
// objects. A write turns each input row into a JSON object of its fields
// in their encoding order, null fields as null, as Beam's RowJson
// serializer does (NaN and the infinities have no JSON: an error).

// NewJSONPayloadEncoder returns the encoder of records' values in coder
// cid of coders, the row of JSON schema jsonSchema, possibly
// length-prefixed. Its errors are about the record's value.
func NewJSONPayloadEncoder(coders map[string]*pipepb.Coder, cid, jsonSchema string) (PayloadEncoder, error) {
	s, err := readRowSchema(coders, cid, &translate.KafkaRead{PayloadRow: true, RowFormat: translate.KafkaRowJSON, RowSchema: jsonSchema})
	if err != nil {
		return nil, err
	}
	rw, err := newJSONRowWriter(s)
	if err != nil {
		return nil, err
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	var scratch []byte
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		if r.Value == nil {
			return nil, fmt.Errorf("the record has no value (a tombstone), and a JSON read's row needs a JSON object")
		}
		obj, err := parseJSONObject(r.Value)
		if err != nil {
			return nil, err
		}
		if !prefixed {
			return rw.append(dst, obj, "")
		}
		if scratch, err = rw.append(scratch[:0], obj, ""); err != nil {
			return nil, err
		}
		return appendBytes(dst, scratch), nil
	}, nil
}

// readRowSchema returns the row schema of coder cid of coders, which must
// be that of the structured read spec.
func readRowSchema(coders map[string]*pipepb.Coder, cid string, spec *translate.KafkaRead) (*pipepb.Schema, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	want, err := spec.PayloadSchema()
	if err != nil {
		return nil, err
	}
	if err := translate.SameRowLayout(s, want); err != nil {
		return nil, fmt.Errorf("coder %q is not the row of the %s read's schema: %w", cid, spec.RowFormat, err)
	}
	return s, nil
}

// parseJSONObject parses one JSON object, numbers kept as json.Number.
func parseJSONObject(b []byte) (map[string]any, error) {
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
		return nil, fmt.Errorf("a JSON %s, want an object", jsonKind(v))
	}
	return obj, nil
}

// jsonRowWriter writes JSON objects as rows of a schema.
type jsonRowWriter struct {
	fields []*pipepb.Field // in encoding order
	// nested are the writers of nested rows' schemas, made once and
	// shared by every writer of one encoder (a task's, one goroutine).
	nested map[*pipepb.Schema]*jsonRowWriter
}

func newJSONRowWriter(s *pipepb.Schema) (*jsonRowWriter, error) {
	return newNestedJSONRowWriter(s, map[*pipepb.Schema]*jsonRowWriter{})
}

func newNestedJSONRowWriter(s *pipepb.Schema, nested map[*pipepb.Schema]*jsonRowWriter) (*jsonRowWriter, error) {
	if w := nested[s]; w != nil {
		return w, nil
	}
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	w := &jsonRowWriter{fields: make([]*pipepb.Field, len(order)), nested: nested}
	for i, o := range order {
		w.fields[i] = s.GetFields()[o]
	}
	nested[s] = w
	return w, nil
}

// append appends obj as a row: the field count, the null bitmap (empty
// when no field is null, as the Go SDK writes it), the non-null fields.
func (w *jsonRowWriter) append(dst []byte, obj map[string]any, path string) ([]byte, error) {
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

func fieldPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// appendValue appends a non-null JSON value as a value of type t.
func (w *jsonRowWriter) appendValue(dst []byte, t *pipepb.FieldType, v any, path string) ([]byte, error) {
	mismatch := func(want string) error {
		return fmt.Errorf("property %q: a JSON %s, want %s", path, jsonKind(v), want)
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
		rw, err := newNestedJSONRowWriter(ti.RowType.GetSchema(), w.nested)
		if err != nil {
			return nil, err
		}
		return rw.append(dst, obj, path)
	}
	return nil, fmt.Errorf("property %q: a JSON read has no values of type %s", path, translate.FieldTypeString(t))
}

// jsonKind names a parsed JSON value's kind in messages.
func jsonKind(v any) string {
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

// NewJSONPayloadDecoder returns the decoder of JSON write rows in coder
// cid of coders (translate.CheckKafkaJSONWriteSchema), possibly
// length-prefixed: each row's JSON object, the record's value.
func NewJSONPayloadDecoder(coders map[string]*pipepb.Coder, cid string) (PayloadDecoder, error) {
	return newStructuredDecoder(coders, cid, translate.CheckKafkaJSONWriteSchema, appendRowJSON)
}

// newStructuredDecoder returns the decoder of a structured write's rows
// in coder cid of coders, whose schema check accepts, possibly
// length-prefixed: write turns a row into the record's value.
func newStructuredDecoder(coders map[string]*pipepb.Coder, cid string, check func(*pipepb.Schema) error,
	write func(dst []byte, s *pipepb.Schema, b []byte, path string) ([]byte, []byte, error)) (PayloadDecoder, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := check(s); err != nil {
		return nil, err
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	return func(b []byte) ([]byte, error) {
		if prefixed {
			var err error
			if b, err = stripLengthPrefix(b); err != nil {
				return nil, err
			}
		}
		out, rest, err := write(nil, s, b, "")
		if err != nil {
			return nil, err
		}
		if len(rest) != 0 {
			return nil, fmt.Errorf("row: %d bytes after it", len(rest))
		}
		return out, nil
	}, nil
}

// appendRowJSON appends the row at the start of b as a JSON object and
// returns what follows it.
func appendRowJSON(dst []byte, s *pipepb.Schema, b []byte, path string) ([]byte, []byte, error) {
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, nil, err
	}
	h, b, err := readRowHeader(b, len(order))
	if err != nil {
		return nil, nil, err
	}
	dst = append(dst, '{')
	for i, o := range order {
		f := s.GetFields()[o]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, f.GetName())
		dst = append(dst, ':')
		if h.null(i) {
			dst = append(dst, "null"...)
			continue
		}
		if dst, b, err = appendValueJSON(dst, f.GetType(), b, fieldPath(path, f.GetName())); err != nil {
			return nil, nil, err
		}
	}
	return append(dst, '}'), b, nil
}

// appendValueJSON appends the non-null value of type t at the start of b
// as JSON and returns what follows it.
func appendValueJSON(dst []byte, t *pipepb.FieldType, b []byte, path string) ([]byte, []byte, error) {
	fail := func(err error) ([]byte, []byte, error) {
		return nil, nil, fmt.Errorf("field %q: %w", path, err)
	}
	fixed := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, fmt.Errorf("short")
		}
		return b[:n], nil
	}
	float := func(f float64, bits int) ([]byte, []byte, error) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fail(fmt.Errorf("%v has no JSON number", f))
		}
		n := len(dst)
		dst = strconv.AppendFloat(dst, f, 'g', -1, bits)
		if !bytes.ContainsAny(dst[n:], ".e") {
			dst = append(dst, ".0"...) // a whole double stays a JSON double, as Java writes it
		}
		return dst, b[bits/8:], nil
	}
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		switch ti.AtomicType {
		case pipepb.AtomicType_STRING:
			v, rest, err := readBytes(b)
			if err != nil {
				return fail(err)
			}
			return appendJSONString(dst, string(v)), rest, nil
		case pipepb.AtomicType_BOOLEAN:
			v, err := fixed(1)
			if err != nil {
				return fail(err)
			}
			return strconv.AppendBool(dst, v[0] != 0), b[1:], nil
		case pipepb.AtomicType_INT32:
			v, rest, err := readVarint(b)
			if err != nil {
				return fail(err)
			}
			return strconv.AppendInt(dst, int64(int32(v)), 10), rest, nil
		case pipepb.AtomicType_INT64:
			v, rest, err := readVarint(b)
			if err != nil {
				return fail(err)
			}
			return strconv.AppendInt(dst, v, 10), rest, nil
		case pipepb.AtomicType_FLOAT:
			v, err := fixed(4)
			if err != nil {
				return fail(err)
			}
			return float(float64(math.Float32frombits(binary.BigEndian.Uint32(v))), 32)
		case pipepb.AtomicType_DOUBLE:
			v, err := fixed(8)
			if err != nil {
				return fail(err)
			}
			return float(math.Float64frombits(binary.BigEndian.Uint64(v)), 64)
		}
	case *pipepb.FieldType_ArrayType, *pipepb.FieldType_IterableType:
		et := t.GetArrayType().GetElementType()
		if et == nil {
			et = t.GetIterableType().GetElementType()
		}
		dst = append(dst, '[')
		first, i := true, 0
		item := func() {
			if !first {
				dst = append(dst, ',')
			}
			first = false
		}
		rest, err := readList(b, et.GetNullable(), func(b []byte) ([]byte, error) {
			item()
			var rest []byte
			var err error
			dst, rest, err = appendValueJSON(dst, et, b, path+"["+strconv.Itoa(i)+"]")
			i++
			return rest, err
		}, func() error {
			item()
			dst = append(dst, "null"...)
			i++
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		return append(dst, ']'), rest, nil
	case *pipepb.FieldType_RowType:
		return appendRowJSON(dst, ti.RowType.GetSchema(), b, path)
	}
	return fail(fmt.Errorf("values of type %s have no JSON", translate.FieldTypeString(t)))
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 as U+FFFD (as encoding/json
// writes it), everything else as it is.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
