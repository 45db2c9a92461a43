package kafkaio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/go-json-experiment/json/jsontext"
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
	jr, err := newJSONReader(s)
	if err != nil {
		return nil, err
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	var scratch []byte
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		if r.Value == nil {
			return nil, fmt.Errorf("the record has no value (a tombstone), and a JSON read's row needs a JSON object")
		}
		if !prefixed {
			return jr.appendRow(dst, r.Value)
		}
		var err error
		if scratch, err = jr.appendRow(scratch[:0], r.Value); err != nil {
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

// jsonReader reads one encoder's JSON values into rows. It is not safe
// for concurrent use: an encoder serves one task's goroutine.
//
// A value is read as a stream of tokens (jsontext), never as a whole
// map: each property the schema names is encoded as it is read, into its
// row reader's buf, and the row is assembled from those encodings in the
// schema's encoding order when the object ends, because properties come
// in any order. Errors carry the property's path, built on the way out
// (pathError), so reading a good value builds no paths.
type jsonReader struct {
	dec  *jsontext.Decoder
	rd   bytes.Reader
	root *jsonRowReader
	str  []byte // an unquoted string or name
}

// jsonOptions are the reader's JSON rules, those of encoding/json's: a
// later duplicate property wins, invalid UTF-8 in a string becomes
// U+FFFD.
var jsonOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

func newJSONReader(s *pipepb.Schema) (*jsonReader, error) {
	root, err := newJSONRowReader(s, map[*pipepb.Schema]*jsonRowReader{})
	if err != nil {
		return nil, err
	}
	return &jsonReader{dec: jsontext.NewDecoder(bytes.NewReader(nil), jsonOptions...), root: root}, nil
}

// appendRow appends the row of value, which must be one JSON object.
func (r *jsonReader) appendRow(dst []byte, value []byte) ([]byte, error) {
	r.rd.Reset(value)
	r.dec.Reset(&r.rd, jsonOptions...)
	out, err := r.appendObjectRow(dst, r.root)
	if err == nil {
		if _, err = r.dec.ReadToken(); err == io.EOF {
			return out, nil
		}
		return nil, fmt.Errorf("not JSON: data after its value")
	}
	var pe *pathError
	if errors.As(err, &pe) && pe.path == "" { // the value itself
		return nil, errors.New(pe.msg)
	}
	return nil, err
}

// jsonRowReader reads JSON objects into rows of one schema.
type jsonRowReader struct {
	fields []*pipepb.Field // in encoding order
	index  map[string]int  // a field's place in fields, by name
	// nested are the readers of nested rows' schemas, made once and
	// shared by every reader of one encoder.
	nested map[*pipepb.Schema]*jsonRowReader

	// Of the object being read: each field's encoding in buf, or
	// {-1, -1} while it is missing, null or not the schema's (errs).
	// Errors wait for the object's end, as a later duplicate property
	// wins, and are reported as encoding/json's whole-value reader did:
	// a missing required field first, then the first field in order.
	spans []span
	errs  []error
	buf   []byte
}

type span struct{ start, end int }

func newJSONRowReader(s *pipepb.Schema, nested map[*pipepb.Schema]*jsonRowReader) (*jsonRowReader, error) {
	if rr := nested[s]; rr != nil {
		return rr, nil
	}
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	rr := &jsonRowReader{fields: make([]*pipepb.Field, len(order)), index: map[string]int{}, nested: nested,
		spans: make([]span, len(order)), errs: make([]error, len(order))}
	for i, o := range order {
		rr.fields[i] = s.GetFields()[o]
		rr.index[rr.fields[i].GetName()] = i
	}
	nested[s] = rr
	for _, f := range rr.fields {
		t := f.GetType()
		if at := t.GetArrayType(); at != nil {
			t = at.GetElementType()
		}
		if rt := t.GetRowType(); rt != nil {
			if _, err := newJSONRowReader(rt.GetSchema(), nested); err != nil {
				return nil, err
			}
		}
	}
	return rr, nil
}

// appendObjectRow reads the next value, which must be an object, and
// appends it as a row of rr's schema: the field count, the null bitmap
// (empty when no field is null, as the Go SDK writes it), the non-null
// fields.
func (r *jsonReader) appendObjectRow(dst []byte, rr *jsonRowReader) ([]byte, error) {
	if k := r.dec.PeekKind(); k != '{' {
		return nil, r.mismatch(k, "an object")
	}
	if _, err := r.dec.ReadToken(); err != nil {
		return nil, notJSON(err)
	}
	for i := range rr.spans {
		rr.spans[i], rr.errs[i] = span{-1, -1}, nil
	}
	rr.buf = rr.buf[:0]
	for r.dec.PeekKind() != '}' {
		name, err := r.dec.ReadValue()
		if err != nil {
			return nil, notJSON(err)
		}
		r.str, _ = jsontext.AppendUnquote(r.str[:0], name) // the decoder checked it; invalid UTF-8 is mangled
		i, ok := rr.index[string(r.str)]
		if !ok { // a property the schema does not name
			if err := r.dec.SkipValue(); err != nil {
				return nil, notJSON(err)
			}
			continue
		}
		if r.dec.PeekKind() == 'n' {
			if _, err := r.dec.ReadToken(); err != nil {
				return nil, notJSON(err)
			}
			rr.spans[i], rr.errs[i] = span{-1, -1}, nil
			continue
		}
		start, depth := len(rr.buf), r.dec.StackDepth()
		rr.spans[i], rr.errs[i] = span{-1, -1}, nil
		buf, err := r.appendValue(rr.buf, rr.fields[i].GetType())
		if err != nil {
			if _, ok := err.(*pathError); !ok {
				return nil, err
			}
			// Kept until the object ends, the rest of the value
			// skipped: a later property of the same name replaces it.
			rr.errs[i] = underName(err, rr.fields[i].GetName())
			if err := r.skipTo(depth); err != nil {
				return nil, err
			}
			continue
		}
		rr.buf, rr.spans[i] = buf, span{start, len(buf)}
	}
	if _, err := r.dec.ReadToken(); err != nil {
		return nil, notJSON(err)
	}
	for i, f := range rr.fields {
		if rr.spans[i].start < 0 && rr.errs[i] == nil && !f.GetType().GetNullable() {
			return nil, &pathError{noun: "property", path: f.GetName(), msg: "missing or null, and the schema requires it"}
		}
	}
	for _, err := range rr.errs {
		if err != nil {
			return nil, err
		}
	}
	dst = appendRowHeader(dst, len(rr.fields), func(i int) bool { return rr.spans[i].start < 0 })
	for _, sp := range rr.spans {
		if sp.start >= 0 {
			dst = append(dst, rr.buf[sp.start:sp.end]...)
		}
	}
	return dst, nil
}

// appendValue reads the next value, not null, as a value of type t.
func (r *jsonReader) appendValue(dst []byte, t *pipepb.FieldType) ([]byte, error) {
	k := r.dec.PeekKind()
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		switch ti.AtomicType {
		case pipepb.AtomicType_STRING:
			if k != '"' {
				return nil, r.mismatch(k, "a string")
			}
			v, err := r.dec.ReadValue()
			if err != nil {
				return nil, notJSON(err)
			}
			r.str, _ = jsontext.AppendUnquote(r.str[:0], v)
			return appendBytes(dst, r.str), nil
		case pipepb.AtomicType_BOOLEAN:
			if k != 't' && k != 'f' {
				return nil, r.mismatch(k, "a boolean")
			}
			if _, err := r.dec.ReadToken(); err != nil {
				return nil, notJSON(err)
			}
			if k == 't' {
				return append(dst, 1), nil
			}
			return append(dst, 0), nil
		case pipepb.AtomicType_INT64:
			if k != '0' {
				return nil, r.mismatch(k, "an integer")
			}
			v, err := r.dec.ReadValue()
			if err != nil {
				return nil, notJSON(err)
			}
			i, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return nil, &pathError{noun: "property", msg: string(v) + " is not an integer of 64 bits"}
			}
			return binary.AppendUvarint(dst, uint64(i)), nil
		case pipepb.AtomicType_DOUBLE:
			if k != '0' {
				return nil, r.mismatch(k, "a number")
			}
			v, err := r.dec.ReadValue()
			if err != nil {
				return nil, notJSON(err)
			}
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return nil, &pathError{noun: "property", msg: string(v) + " is out of a double's range"}
			}
			return binary.BigEndian.AppendUint64(dst, math.Float64bits(f)), nil
		}
	case *pipepb.FieldType_ArrayType:
		if k != '[' {
			return nil, r.mismatch(k, "an array")
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, notJSON(err)
		}
		et := ti.ArrayType.GetElementType()
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0) // the item count, once known
		n := 0
		for ; r.dec.PeekKind() != ']'; n++ {
			if r.dec.PeekKind() == 'n' {
				if !et.GetNullable() {
					return nil, &pathError{noun: "property", path: "[" + strconv.Itoa(n) + "]", msg: "null, and the schema's items are not nullable"}
				}
				if _, err := r.dec.ReadToken(); err != nil {
					return nil, notJSON(err)
				}
				dst = append(dst, 0)
				continue
			}
			if et.GetNullable() {
				dst = append(dst, 1)
			}
			var err error
			if dst, err = r.appendValue(dst, et); err != nil {
				return nil, underIndex(err, n)
			}
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, notJSON(err)
		}
		binary.BigEndian.PutUint32(dst[at:], uint32(n))
		return dst, nil
	case *pipepb.FieldType_RowType:
		return r.appendObjectRow(dst, r.root.nested[ti.RowType.GetSchema()])
	}
	return nil, &pathError{noun: "property", msg: "a JSON read has no values of type " + translate.FieldTypeString(t)}
}

// skipTo reads the rest of a value left at nesting depth below depth.
func (r *jsonReader) skipTo(depth int) error {
	for r.dec.StackDepth() > depth {
		if _, err := r.dec.ReadToken(); err != nil {
			return notJSON(err)
		}
	}
	return nil
}

// mismatch reads the next value, of kind k, and says that it is not what
// the schema wants.
func (r *jsonReader) mismatch(k jsontext.Kind, want string) error {
	v, err := r.dec.ReadValue()
	if err != nil {
		return notJSON(err)
	}
	var what string
	switch k {
	case '{':
		what = "object"
	case '[':
		what = "array"
	case '"':
		r.str, _ = jsontext.AppendUnquote(r.str[:0], v)
		what = "string " + strconv.Quote(string(r.str))
	case '0':
		what = "number " + string(v)
	case 't', 'f':
		what = "boolean " + string(v)
	case 'n':
		what = "null"
	}
	return &pathError{noun: "property", msg: "a JSON " + what + ", want " + want}
}

// notJSON is a syntax error of the value (which jsontext reports with its
// offset).
func notJSON(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("not JSON: unexpected end of the value")
	}
	return fmt.Errorf("not JSON: %w", err)
}

// NewJSONPayloadDecoder returns the decoder of JSON write rows in coder
// cid of coders (translate.CheckKafkaJSONWriteSchema), possibly
// length-prefixed: each row's JSON object, the record's value.
func NewJSONPayloadDecoder(coders map[string]*pipepb.Coder, cid string) (PayloadDecoder, error) {
	return newStructuredDecoder(coders, cid, translate.CheckKafkaJSONWriteSchema, func(s *pipepb.Schema) (rowWriter, error) {
		w, err := newJSONRowWriter(s, map[*pipepb.Schema]*jsonRowWriter{})
		if err != nil {
			return nil, err
		}
		return w.appendRow, nil
	})
}

// rowWriter appends the record value of the row at the start of b and
// returns what follows the row.
type rowWriter func(dst, b []byte) ([]byte, []byte, error)

// newStructuredDecoder returns the decoder of a structured write's rows
// in coder cid of coders, whose schema check accepts, possibly
// length-prefixed: build makes, once, the writer of rows of the schema
// into records' values.
func newStructuredDecoder(coders map[string]*pipepb.Coder, cid string, check func(*pipepb.Schema) error,
	build func(*pipepb.Schema) (rowWriter, error)) (PayloadDecoder, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := check(s); err != nil {
		return nil, err
	}
	write, err := build(s)
	if err != nil {
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
		out, rest, err := write(nil, b)
		if err != nil {
			return nil, err
		}
		if len(rest) != 0 {
			return nil, fmt.Errorf("row: %d bytes after it", len(rest))
		}
		return out, nil
	}, nil
}

// jsonRowWriter writes rows of one schema as JSON objects. Made once per
// decoder, so a row computes no encoding order and quotes no names.
type jsonRowWriter struct {
	fields []*pipepb.Field // in encoding order
	keys   [][]byte        // each field's quoted name and colon
	// nested are the writers of nested rows' schemas, shared by one
	// decoder's writers.
	nested map[*pipepb.Schema]*jsonRowWriter
}

func newJSONRowWriter(s *pipepb.Schema, nested map[*pipepb.Schema]*jsonRowWriter) (*jsonRowWriter, error) {
	return buildRowWriter(s, nested, func(fields []*pipepb.Field) *jsonRowWriter {
		w := &jsonRowWriter{fields: fields, nested: nested}
		for _, f := range fields {
			w.keys = append(w.keys, append(appendJSONString(nil, f.GetName()), ':'))
		}
		return w
	})
}

// buildRowWriter returns nested's writer of rows of s, making it with mk
// (from s's fields in encoding order) if there is none, and those of the
// rows its fields nest.
func buildRowWriter[W any](s *pipepb.Schema, nested map[*pipepb.Schema]*W, mk func(fields []*pipepb.Field) *W) (*W, error) {
	if w := nested[s]; w != nil {
		return w, nil
	}
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	fields := make([]*pipepb.Field, len(order))
	for i, o := range order {
		fields[i] = s.GetFields()[o]
	}
	w := mk(fields)
	nested[s] = w
	for _, f := range fields {
		if err := prepareNestedRows(f.GetType(), func(s *pipepb.Schema) error {
			_, err := buildRowWriter(s, nested, mk)
			return err
		}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// prepareNestedRows calls prepare with the schema of every row type that
// values of type t hold (in arrays, iterables, maps), not looking inside
// those rows.
func prepareNestedRows(t *pipepb.FieldType, prepare func(*pipepb.Schema) error) error {
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_RowType:
		return prepare(ti.RowType.GetSchema())
	case *pipepb.FieldType_ArrayType:
		return prepareNestedRows(ti.ArrayType.GetElementType(), prepare)
	case *pipepb.FieldType_IterableType:
		return prepareNestedRows(ti.IterableType.GetElementType(), prepare)
	case *pipepb.FieldType_MapType:
		if err := prepareNestedRows(ti.MapType.GetKeyType(), prepare); err != nil {
			return err
		}
		return prepareNestedRows(ti.MapType.GetValueType(), prepare)
	}
	return nil
}

// appendRow appends the row at the start of b as a JSON object and
// returns what follows it.
func (w *jsonRowWriter) appendRow(dst, b []byte) ([]byte, []byte, error) {
	h, b, err := readRowHeader(b, len(w.fields))
	if err != nil {
		return nil, nil, err
	}
	dst = append(dst, '{')
	for i, f := range w.fields {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, w.keys[i]...)
		if h.null(i) {
			dst = append(dst, "null"...)
			continue
		}
		if dst, b, err = w.appendValue(dst, f.GetType(), b); err != nil {
			return nil, nil, underName(err, f.GetName())
		}
	}
	return append(dst, '}'), b, nil
}

// appendValue appends the non-null value of type t at the start of b
// as JSON and returns what follows it.
func (w *jsonRowWriter) appendValue(dst []byte, t *pipepb.FieldType, b []byte) ([]byte, []byte, error) {
	fail := func(err error) ([]byte, []byte, error) {
		return nil, nil, &pathError{noun: "field", msg: err.Error()}
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
			if dst, rest, err = w.appendValue(dst, et, b); err != nil {
				return nil, underIndex(err, i)
			}
			i++
			return rest, nil
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
		return w.nested[ti.RowType.GetSchema()].appendRow(dst, b)
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
