package kafkaio

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ksrunner/ksrunner/translate"
)

// A PROTO write writes each row straight to the wire format: the bytes
// that proto.MarshalOptions{Deterministic: true} writes of the message
// whose fields are set from the row's by name (a dynamicpb message per
// row cost 8 µs and 99 allocations). The rules it keeps, each as
// protobuf-go has it (v1.36):
//   - Field order: fields outside real oneofs by number, then each real
//     oneof's (by the oneof's declaration) by number (LegacyFieldOrder).
//   - A field without presence is not written when it holds its zero
//     value (a float's -0 is not zero); lists and maps are not written
//     empty; a message field is written when set, even empty.
//   - Setting a field of a oneof clears the oneof's others: of several
//     non-null ones in a row, the last in encoding order stays.
//   - Repeated scalars are packed where the field says so (proto3's
//     default); map entries are written in key order (false before true,
//     numbers ascending, strings bytewise), a key the row repeats keeps
//     its last value, and an entry writes its key and value even when
//     zero.
//   - A string of a proto3 field (or an editions field that validates
//     UTF-8) must be valid UTF-8; a required field must be set, in every
//     message written.
// FuzzProtoWrite checks all of it against the dynamicpb writer, kept in
// protoref_test.go.

// NewProtoPayloadDecoder returns the decoder of a PROTO write's rows in
// coder cid of coders (translate.CheckProtoWriteSchema), possibly
// length-prefixed: each row's message, serialized.
func NewProtoPayloadDecoder(coders map[string]*pipepb.Coder, cid, rowSchema, name string) (PayloadDecoder, error) {
	md, err := protoDescriptor(rowSchema, name)
	if err != nil {
		return nil, err
	}
	check := func(s *pipepb.Schema) error { return translate.CheckProtoWriteSchema(s, rowSchema, name) }
	return newStructuredDecoder(coders, cid, check, func(s *pipepb.Schema) (rowWriter, error) {
		w, err := newProtoRowWriter(md, s, map[protoWriterKey]*protoRowWriter{})
		if err != nil {
			return nil, err
		}
		return w.appendMessage, nil
	})
}

type protoWriterKey struct {
	md protoreflect.MessageDescriptor
	s  *pipepb.Schema
}

// protoRowWriter writes rows of one schema as messages of one type. It is
// not safe for concurrent use: a decoder serves one task's goroutine.
type protoRowWriter struct {
	md     protoreflect.MessageDescriptor
	fields []protoField // the row's, in encoding order
	order  []int        // fields, in the order the marshal writes them
	// required are md's required fields, each with its index in fields
	// (-1: the row has no such field, so no row can be written).
	required []protoRequired

	// Of the row being written: each field's wire bytes in buf, or
	// {-1, -1} while it is null or cleared by another of its oneof.
	spans []span
	buf   []byte
	// Of the map being written: its entries' wire bytes in entryBuf.
	entries  []protoMapEntry
	entryBuf []byte
}

type protoRequired struct {
	fd    protoreflect.FieldDescriptor
	field int
}

type protoField struct {
	name   string
	typ    *pipepb.FieldType
	fd     protoreflect.FieldDescriptor
	oneof  protoreflect.OneofDescriptor // nil outside a oneof
	nested *protoRowWriter              // a message value's writer (of the list's, the map value's)
}

// protoMapEntry is one entry of a map being written: its key for the
// order, and its wire bytes (key and value) in the writer's entryBuf.
type protoMapEntry struct {
	str  []byte // a string key (in the row)
	num  int64  // a bool, int or uint key
	wire span
}

func newProtoRowWriter(md protoreflect.MessageDescriptor, s *pipepb.Schema, writers map[protoWriterKey]*protoRowWriter) (*protoRowWriter, error) {
	key := protoWriterKey{md, s}
	if w := writers[key]; w != nil {
		return w, nil
	}
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	w := &protoRowWriter{md: md, fields: make([]protoField, len(order)), spans: make([]span, len(order))}
	writers[key] = w
	for i, o := range order {
		f := s.GetFields()[o]
		fd := md.Fields().ByName(protoreflect.Name(f.GetName()))
		if fd == nil { // CheckProtoWriteSchema refuses it
			return nil, fmt.Errorf("field %q: not in message %s", f.GetName(), md.FullName())
		}
		pf := protoField{name: f.GetName(), typ: f.GetType(), fd: fd, oneof: fd.ContainingOneof()}
		vfd, vt := fd, f.GetType()
		switch {
		case fd.IsMap():
			vfd, vt = fd.MapValue(), f.GetType().GetMapType().GetValueType()
		case fd.IsList():
			vt = f.GetType().GetArrayType().GetElementType()
		}
		if vfd.Message() != nil {
			if pf.nested, err = newProtoRowWriter(vfd.Message(), vt.GetRowType().GetSchema(), writers); err != nil {
				return nil, err
			}
		}
		w.fields[i] = pf
	}
	w.order = make([]int, len(w.fields))
	for i := range w.order {
		w.order[i] = i
	}
	inOneof := func(fd protoreflect.FieldDescriptor) bool {
		od := fd.ContainingOneof()
		return od != nil && !od.IsSynthetic()
	}
	slices.SortFunc(w.order, func(a, b int) int {
		x, y := w.fields[a].fd, w.fields[b].fd
		if inOneof(x) != inOneof(y) {
			if inOneof(y) {
				return -1
			}
			return 1
		}
		if inOneof(x) && x.ContainingOneof() != y.ContainingOneof() {
			return cmp.Compare(x.ContainingOneof().Index(), y.ContainingOneof().Index())
		}
		return cmp.Compare(x.Number(), y.Number())
	})
	nums := md.RequiredNumbers()
	for i := range nums.Len() {
		fd := md.Fields().ByNumber(nums.Get(i))
		w.required = append(w.required, protoRequired{fd, slices.IndexFunc(w.fields, func(f protoField) bool { return f.fd == fd })})
	}
	return w, nil
}

// appendMessage appends the message of the row at the start of b and
// returns what follows the row.
func (w *protoRowWriter) appendMessage(dst, b []byte) ([]byte, []byte, error) {
	h, b, err := readRowHeader(b, len(w.fields))
	if err != nil {
		return nil, nil, err
	}
	for i := range w.spans {
		w.spans[i] = span{-1, -1}
	}
	w.buf = w.buf[:0]
	for i := range w.fields {
		f := &w.fields[i]
		if h.null(i) {
			// Unset. A field without presence would read back as its
			// default, not null: the row is not writable as is. (A null
			// repeated field or map is empty, which protobuf cannot
			// tell from null.)
			if !f.fd.HasPresence() && !f.fd.IsList() && !f.fd.IsMap() {
				return nil, nil, &pathError{noun: "field", path: f.name, msg: fmt.Sprintf("null, but %s's field %s has no presence (it would read back as %v)", w.md.FullName(), f.fd.Name(), f.fd.Default().Interface())}
			}
			continue
		}
		start := len(w.buf)
		buf, rest, err := w.appendField(w.buf, f, b)
		if err != nil {
			return nil, nil, underName(err, f.name)
		}
		w.buf, b = buf, rest
		if f.oneof != nil {
			for j := range w.fields {
				if w.fields[j].oneof == f.oneof {
					w.spans[j] = span{-1, -1}
				}
			}
		}
		w.spans[i] = span{start, len(w.buf)}
	}
	for _, r := range w.required {
		if r.field < 0 || w.spans[r.field].start < 0 {
			return nil, nil, &pathError{noun: "field", path: string(r.fd.Name()), msg: fmt.Sprintf("null or missing, and %s requires it", w.md.FullName())}
		}
	}
	for _, i := range w.order {
		if sp := w.spans[i]; sp.start >= 0 {
			dst = append(dst, w.buf[sp.start:sp.end]...)
		}
	}
	return dst, b, nil
}

// appendField appends the wire bytes of field f, not null, from the row
// value at the start of b.
func (w *protoRowWriter) appendField(dst []byte, f *protoField, b []byte) ([]byte, []byte, error) {
	fd := f.fd
	switch {
	case fd.IsList():
		et := f.typ.GetArrayType().GetElementType()
		packed, start := fd.IsPacked(), len(dst)
		var at int
		if packed {
			dst = protowire.AppendTag(dst, fd.Number(), protowire.BytesType)
			dst, at = beginLength(dst)
		}
		i := 0
		rest, err := readList(b, et.GetNullable(), func(b []byte) ([]byte, error) {
			if !packed {
				dst = appendProtoTag(dst, fd)
			}
			var rest []byte
			var err error
			if dst, rest, _, err = w.appendValue(dst, f, fd, et, b); err != nil {
				return nil, underIndex(err, i)
			}
			i++
			return rest, nil
		}, func() error {
			return &pathError{noun: "field", msg: fmt.Sprintf("item %d is null, which a repeated field cannot hold", i)}
		})
		if err != nil {
			return nil, nil, err
		}
		switch {
		case packed && i == 0:
			dst = dst[:start] // as protobuf: no empty packed field
		case packed:
			dst = endLength(dst, at)
		}
		return dst, rest, nil
	case fd.IsMap():
		return w.appendMap(dst, f, b)
	}
	start := len(dst)
	dst = appendProtoTag(dst, fd)
	dst, rest, zero, err := w.appendValue(dst, f, fd, f.typ, b)
	if err != nil {
		return nil, nil, err
	}
	if zero && !fd.HasPresence() {
		dst = dst[:start] // as protobuf: a field without presence is not written at its zero value
	}
	return dst, rest, nil
}

// appendMap appends the entries of map field f from the row's map at
// the start of b, in key order, a repeated key's last value.
func (w *protoRowWriter) appendMap(dst []byte, f *protoField, b []byte) ([]byte, []byte, error) {
	kfd, vfd := f.fd.MapKey(), f.fd.MapValue()
	kt, vt := f.typ.GetMapType().GetKeyType(), f.typ.GetMapType().GetValueType()
	if len(b) < 4 {
		return nil, nil, &pathError{noun: "field", msg: "map: short"}
	}
	n := int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	w.entries, w.entryBuf = w.entries[:0], w.entryBuf[:0]
	for range max(n, 0) {
		e := protoMapEntry{wire: span{start: len(w.entryBuf)}}
		var err error
		if b, err = nonNullMapPart(kt, b); err != nil {
			return nil, nil, underBracket(err, "key")
		}
		kb := b
		w.entryBuf = appendProtoTag(w.entryBuf, kfd)
		if w.entryBuf, b, _, err = w.appendValue(w.entryBuf, f, kfd, kt, b); err != nil {
			return nil, nil, underBracket(err, "key")
		}
		e.str, e.num = mapKeyOrder(kfd, kb)
		if b, err = nonNullMapPart(vt, b); err != nil {
			return nil, nil, underBracket(err, mapKeyString(kfd, e))
		}
		w.entryBuf = appendProtoTag(w.entryBuf, vfd)
		if w.entryBuf, b, _, err = w.appendValue(w.entryBuf, f, vfd, vt, b); err != nil {
			return nil, nil, underBracket(err, mapKeyString(kfd, e))
		}
		e.wire.end = len(w.entryBuf)
		w.entries = append(w.entries, e)
	}
	slices.SortStableFunc(w.entries, func(x, y protoMapEntry) int {
		if c := bytes.Compare(x.str, y.str); c != 0 {
			return c
		}
		return cmp.Compare(x.num, y.num)
	})
	for i, e := range w.entries {
		if i+1 < len(w.entries) && bytes.Equal(e.str, w.entries[i+1].str) && e.num == w.entries[i+1].num {
			continue // a later value of the same key replaces it
		}
		dst = protowire.AppendTag(dst, f.fd.Number(), protowire.BytesType)
		dst = protowire.AppendBytes(dst, w.entryBuf[e.wire.start:e.wire.end])
	}
	return dst, b, nil
}

// nonNullMapPart reads past the presence byte of a map key or value of
// nullable type t, which must say present.
func nonNullMapPart(t *pipepb.FieldType, b []byte) ([]byte, error) {
	if !t.GetNullable() {
		return b, nil
	}
	if len(b) < 1 {
		return nil, &pathError{noun: "field", msg: "short"}
	}
	if b[0] == 0 {
		return nil, &pathError{noun: "field", msg: "null, which a map cannot hold"}
	}
	return b[1:], nil
}

// mapKeyOrder is what orders a map key of field kfd whose row value
// starts b: a string's bytes, or a number (false 0, true 1).
func mapKeyOrder(kfd protoreflect.FieldDescriptor, b []byte) ([]byte, int64) {
	switch kfd.Kind() {
	case protoreflect.StringKind:
		s, _, _ := readBytes(b)
		return s, 0
	case protoreflect.BoolKind:
		if b[0] != 0 {
			return nil, 1
		}
		return nil, 0
	}
	v, _, _ := readVarint(b)
	switch kfd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return nil, int64(int32(v))
	}
	return nil, v
}

// mapKeyString is a map key as an error's path shows it.
func mapKeyString(kfd protoreflect.FieldDescriptor, e protoMapEntry) string {
	switch kfd.Kind() {
	case protoreflect.StringKind:
		return string(e.str)
	case protoreflect.BoolKind:
		return strconv.FormatBool(e.num != 0)
	}
	return strconv.FormatInt(e.num, 10)
}

// appendValue appends one value of field fd (an element of a repeated
// one, a map's key or value) from the row value of type t at the start of
// b, without its tag, and says whether it is the zero value.
func (w *protoRowWriter) appendValue(dst []byte, f *protoField, fd protoreflect.FieldDescriptor, t *pipepb.FieldType, b []byte) ([]byte, []byte, bool, error) {
	fail := func(msg string) ([]byte, []byte, bool, error) {
		return nil, nil, false, &pathError{noun: "field", msg: msg}
	}
	varint := func() (int64, []byte, error) {
		v, rest, err := readVarint(b)
		if err != nil {
			return 0, nil, &pathError{noun: "field", msg: err.Error()}
		}
		return v, rest, nil
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if len(b) < 1 {
			return fail("short")
		}
		v := b[0] != 0
		return protowire.AppendVarint(dst, protowire.EncodeBool(v)), b[1:], !v, nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		v, rest, err := varint()
		if err != nil {
			return nil, nil, false, err
		}
		i := int32(v)
		switch fd.Kind() {
		case protoreflect.Int32Kind:
			dst = protowire.AppendVarint(dst, uint64(i))
		case protoreflect.Sint32Kind:
			dst = protowire.AppendVarint(dst, protowire.EncodeZigZag(int64(i)))
		default:
			dst = protowire.AppendFixed32(dst, uint32(i))
		}
		return dst, rest, i == 0, nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		v, rest, err := varint()
		if err != nil {
			return nil, nil, false, err
		}
		switch fd.Kind() {
		case protoreflect.Int64Kind:
			dst = protowire.AppendVarint(dst, uint64(v))
		case protoreflect.Sint64Kind:
			dst = protowire.AppendVarint(dst, protowire.EncodeZigZag(v))
		default:
			dst = protowire.AppendFixed64(dst, uint64(v))
		}
		return dst, rest, v == 0, nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		v, rest, err := varint()
		if err != nil {
			return nil, nil, false, err
		}
		if v < 0 || v > math.MaxUint32 {
			return fail(fmt.Sprintf("%d is out of a %s's range", v, fd.Kind()))
		}
		if fd.Kind() == protoreflect.Uint32Kind {
			dst = protowire.AppendVarint(dst, uint64(v))
		} else {
			dst = protowire.AppendFixed32(dst, uint32(v))
		}
		return dst, rest, v == 0, nil
	case protoreflect.FloatKind:
		if len(b) < 4 {
			return fail("short")
		}
		// Through float64 and back, as a protoreflect value goes.
		v := float32(float64(math.Float32frombits(binary.BigEndian.Uint32(b))))
		return protowire.AppendFixed32(dst, math.Float32bits(v)), b[4:], v == 0 && !math.Signbit(float64(v)), nil
	case protoreflect.DoubleKind:
		if len(b) < 8 {
			return fail("short")
		}
		v := math.Float64frombits(binary.BigEndian.Uint64(b))
		return protowire.AppendFixed64(dst, math.Float64bits(v)), b[8:], v == 0 && !math.Signbit(v), nil
	case protoreflect.StringKind, protoreflect.BytesKind:
		v, rest, err := readBytes(b)
		if err != nil {
			return fail(err.Error())
		}
		if fd.Kind() == protoreflect.StringKind && enforceUTF8(fd) && !utf8.Valid(v) {
			return fail(fmt.Sprintf("invalid UTF-8, which %s (%s) cannot hold", fd.FullName(), fd.Syntax()))
		}
		return protowire.AppendBytes(dst, v), rest, len(v) == 0, nil
	case protoreflect.EnumKind:
		v, rest, err := readBytes(b)
		if err != nil {
			return fail(err.Error())
		}
		var num protoreflect.EnumNumber
		if ev := fd.Enum().Values().ByName(protoreflect.Name(v)); ev != nil {
			num = ev.Number()
		} else if n, err := strconv.ParseInt(string(v), 10, 32); err == nil {
			num = protoreflect.EnumNumber(n)
		} else {
			return fail(fmt.Sprintf("%q is not a value of enum %s", v, fd.Enum().FullName()))
		}
		return protowire.AppendVarint(dst, uint64(num)), rest, num == 0, nil
	case protoreflect.MessageKind:
		dst, at := beginLength(dst)
		dst, rest, err := f.nested.appendMessage(dst, b)
		if err != nil {
			return nil, nil, false, err
		}
		return endLength(dst, at), rest, false, nil
	case protoreflect.GroupKind:
		dst, rest, err := f.nested.appendMessage(dst, b)
		if err != nil {
			return nil, nil, false, err
		}
		return protowire.AppendTag(dst, fd.Number(), protowire.EndGroupType), rest, false, nil
	}
	return fail(fmt.Sprintf("type %s has no row value", fd.Kind()))
}

// appendProtoTag appends the tag of one value of fd.
func appendProtoTag(dst []byte, fd protoreflect.FieldDescriptor) []byte {
	return protowire.AppendTag(dst, fd.Number(), wireType(fd.Kind()))
}

// enforceUTF8 reports whether fd's strings must be valid UTF-8, as
// protobuf-go decides it (internal/strs.EnforceUTF8).
func enforceUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if e, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return e.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}

// beginLength appends room for the length of what follows (one byte, as
// most are short) and returns where it is.
func beginLength(dst []byte) ([]byte, int) { return append(dst, 0), len(dst) }

// endLength writes the length of what follows at, moving it along when
// the length takes more than one byte.
func endLength(dst []byte, at int) []byte {
	n := len(dst) - at - 1
	if sz := protowire.SizeVarint(uint64(n)); sz > 1 {
		dst = append(dst, make([]byte, sz-1)...)
		copy(dst[at+sz:], dst[at+1:at+1+n])
	}
	protowire.AppendVarint(dst[:at], uint64(n))
	return dst
}
