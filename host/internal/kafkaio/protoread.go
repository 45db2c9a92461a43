package kafkaio

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A PROTO read reads each value's wire format straight into the row of
// its message type (ProtoRowSchema: every field, in declaration order),
// as proto.Unmarshal into a dynamicpb message and a walk of its fields
// would (a dynamicpb message per value cost 5 µs and 66 allocations). It
// keeps protobuf-go's (v1.36) rules for a message without fast-path
// methods:
//   - A field of a known number whose wire type is not its kind's is an
//     unknown field, skipped; so are unknown numbers. A tag of number 0 or
//     beyond the largest, or a value that does not parse, fails the
//     value.
//   - A singular scalar's last occurrence wins; the occurrences of a
//     singular message merge (as their concatenation parses); a oneof's
//     member clears the oneof's others.
//   - A repeated scalar takes packed and unpacked occurrences alike.
//   - A map entry's key and value default when missing, a value message
//     merges within its entry, and a repeated key's last entry wins; keys
//     go into the row in order (false before true, numbers ascending,
//     strings bytewise).
//   - Strings of proto3 fields (and editions fields that validate UTF-8)
//     must be valid UTF-8, in every occurrence, even one a later one
//     replaces; every nested message parses, even one a later oneof
//     member clears; required fields must be set in every message read.
//   - Enum values are kept whatever their number (the row holds the name,
//     or the number when it has none).
// FuzzProtoRead checks all of it against the dynamicpb reader, kept in
// protoref_test.go.

// errUnknownField marks an occurrence read as an unknown field.
var errUnknownField = errors.New("unknown field")

// protoRowReader reads messages of one type into rows. It is not safe for
// concurrent use: an encoder serves one task's goroutine.
type protoRowReader struct {
	md     protoreflect.MessageDescriptor
	fields []protoReadField // md's, in declaration order
	// byNumber finds a field by number: dense for the small numbers
	// most messages use (-1: none), a map beyond.
	byNumber []int
	bySparse map[protowire.Number]int
	required []int

	// Of the message being read: what each field's occurrences left.
	seen []protoSeen
	// merged holds a singular message's occurrences, concatenated, and
	// a map's entries' merged values (by span).
	merged  []byte
	entries []protoReadEntry
}

type protoReadField struct {
	fd     protoreflect.FieldDescriptor
	nested *protoRowReader // the reader of its message values
	// oneof is the field's oneof's index in the message, -1 outside
	// one (what scanField compares, cheaper than descriptors).
	oneof int
}

// protoSeen is what a field's occurrences left: a scalar's last value, a
// message's parts to merge, a list's occurrences (packed or single
// values), a map's entries.
type protoSeen struct {
	set   bool
	last  []byte
	parts [][]byte
	types []protowire.Type // of parts, for lists
}

// protoReadEntry is one map entry: its key and value as consumeValue
// returns them (when it has them), a message value merged into merged.
type protoReadEntry struct {
	key      []byte
	hasKey   bool
	value    []byte
	hasValue bool
	msg      span // a message value's bytes in merged
}

func newProtoRowReader(md protoreflect.MessageDescriptor, readers map[protoreflect.FullName]*protoRowReader) *protoRowReader {
	if r := readers[md.FullName()]; r != nil {
		return r
	}
	fds := md.Fields()
	r := &protoRowReader{md: md, bySparse: map[protowire.Number]int{}, seen: make([]protoSeen, fds.Len())}
	readers[md.FullName()] = r
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := protoReadField{fd: fd, oneof: -1}
		if od := fd.ContainingOneof(); od != nil {
			f.oneof = od.Index()
		}
		vfd := fd
		if fd.IsMap() {
			vfd = fd.MapValue()
		}
		if vfd.Message() != nil {
			f.nested = newProtoRowReader(vfd.Message(), readers)
		}
		r.fields = append(r.fields, f)
		if n := int(fd.Number()); n < maxDenseFieldNumber {
			for len(r.byNumber) <= n {
				r.byNumber = append(r.byNumber, -1)
			}
			r.byNumber[n] = i
		} else {
			r.bySparse[fd.Number()] = i
		}
		if fd.Cardinality() == protoreflect.Required {
			r.required = append(r.required, i)
		}
	}
	return r
}

// maxDenseFieldNumber bounds the field numbers byNumber holds.
const maxDenseFieldNumber = 1024

// field is the index of the field numbered num, or -1.
func (r *protoRowReader) field(num protowire.Number) int {
	if int(num) < len(r.byNumber) {
		return r.byNumber[num]
	}
	if i, ok := r.bySparse[num]; ok {
		return i
	}
	return -1
}

// appendRow reads the message b and appends its row.
func (r *protoRowReader) appendRow(dst, b []byte) ([]byte, error) {
	if err := r.scan(b); err != nil {
		return nil, err
	}
	return r.emit(dst)
}

// scan reads the occurrences of message b into r.seen, checking all of
// them.
func (r *protoRowReader) scan(b []byte) error {
	for i := range r.seen {
		s := &r.seen[i]
		s.set, s.last, s.parts, s.types = false, nil, s.parts[:0], s.types[:0]
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("protobuf could not parse it: %w", protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("protobuf could not parse it: field number %d", num)
		}
		b = b[n:]
		if i := r.field(num); i >= 0 {
			n, err := r.scanField(i, typ, b)
			if err == nil {
				b = b[n:]
				continue
			}
			if err != errUnknownField {
				return err
			}
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("protobuf could not parse it: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// scanField reads one occurrence of field i, of wire type typ, at the
// start of b and returns its length.
func (r *protoRowReader) scanField(i int, typ protowire.Type, b []byte) (int, error) {
	f, s := &r.fields[i], &r.seen[i]
	fd := f.fd
	switch {
	case fd.IsList():
		if typ == protowire.BytesType && packable(fd.Kind()) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, parseError(n)
			}
			for rest := v; len(rest) > 0; {
				m := consumeScalar(fd.Kind(), rest)
				if m < 0 {
					return 0, parseError(m)
				}
				rest = rest[m:]
			}
			s.parts, s.types = append(s.parts, v), append(s.types, typ)
			return n, nil
		}
		v, n, err := r.consumeValue(f, fd, typ, b)
		if err != nil {
			return 0, err
		}
		s.parts, s.types = append(s.parts, v), append(s.types, typ)
		return n, nil
	case fd.IsMap():
		if typ != protowire.BytesType {
			return 0, errUnknownField
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, parseError(n)
		}
		if _, err := r.readEntry(f, v, false); err != nil {
			return 0, err
		}
		s.parts = append(s.parts, v)
		return n, nil
	}
	v, n, err := r.consumeValue(f, fd, typ, b)
	if err != nil {
		return 0, err
	}
	if f.oneof >= 0 {
		for j := range r.fields {
			if j != i && r.fields[j].oneof == f.oneof {
				o := &r.seen[j]
				o.set, o.last, o.parts = false, nil, o.parts[:0]
			}
		}
	}
	s.set = true
	if fd.Message() != nil {
		s.parts = append(s.parts, v)
	} else {
		s.last = v
	}
	return n, nil
}

// consumeValue reads one value of fd (a list's element, a map entry's
// key or value) of wire type typ at the start of b, checks it, and
// returns it (a message's or group's content) and its length.
func (r *protoRowReader) consumeValue(f *protoReadField, fd protoreflect.FieldDescriptor, typ protowire.Type, b []byte) ([]byte, int, error) {
	if typ != wireType(fd.Kind()) {
		return nil, 0, errUnknownField
	}
	var v []byte
	n := 0
	switch typ {
	case protowire.BytesType:
		v, n = protowire.ConsumeBytes(b)
	case protowire.StartGroupType:
		v, n = protowire.ConsumeGroup(fd.Number(), b)
	default:
		n = consumeScalar(fd.Kind(), b)
		if n >= 0 {
			v = b[:n]
		}
	}
	if n < 0 {
		return nil, 0, parseError(n)
	}
	switch {
	case fd.Kind() == protoreflect.StringKind && enforceUTF8(fd) && !utf8.Valid(v):
		return nil, 0, fmt.Errorf("protobuf could not parse it: field %s: invalid UTF-8", fd.FullName())
	case fd.Message() != nil:
		// Parsed now, as protobuf does: a bad message fails the value even
		// if a later occurrence would replace it.
		if err := f.nested.scan(v); err != nil {
			return nil, 0, err
		}
	}
	return v, n, nil
}

// readEntry reads map entry b of field f: its key, and its value
// (a message's parts merged into r.merged when merge is set).
func (r *protoRowReader) readEntry(f *protoReadField, b []byte, merge bool) (protoReadEntry, error) {
	kfd, vfd := f.fd.MapKey(), f.fd.MapValue()
	e := protoReadEntry{msg: span{len(r.merged), len(r.merged)}}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, parseError(n)
		}
		if num > protowire.MaxValidNumber {
			return e, fmt.Errorf("protobuf could not parse it: field number %d", num)
		}
		b = b[n:]
		var err error = errUnknownField
		switch num {
		case 1:
			var v []byte
			if v, n, err = r.consumeValue(f, kfd, typ, b); err == nil {
				e.key, e.hasKey = v, true
			}
		case 2:
			var v []byte
			if v, n, err = r.consumeValue(f, vfd, typ, b); err == nil {
				e.hasValue = true
				if vfd.Message() == nil {
					e.value = v
				} else if merge {
					r.merged = append(r.merged, v...)
					e.msg.end = len(r.merged)
				}
			}
		}
		if err == errUnknownField {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return e, parseError(n)
			}
		} else if err != nil {
			return e, err
		}
		b = b[n:]
	}
	return e, nil
}

// emit appends the row of the message scanned last.
func (r *protoRowReader) emit(dst []byte) ([]byte, error) {
	for _, i := range r.required {
		if !r.seen[i].set {
			return nil, fmt.Errorf("protobuf could not parse it: required field %s not set", r.fields[i].fd.FullName())
		}
	}
	dst = appendRowHeader(dst, len(r.fields), func(i int) bool {
		return r.fields[i].fd.HasPresence() && !r.seen[i].set
	})
	for i := range r.fields {
		f, s := &r.fields[i], &r.seen[i]
		fd := f.fd
		var err error
		switch {
		case fd.IsList():
			dst, err = r.emitList(dst, f, s)
		case fd.IsMap():
			dst, err = r.emitMap(dst, f, s)
		case fd.HasPresence() && !s.set:
		case fd.Message() != nil:
			dst, err = r.emitMessage(dst, f, s.parts)
		case !s.set:
			dst = appendDefaultRow(dst, fd)
		default:
			dst = appendScalarRow(dst, fd, s.last)
		}
		if err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// emitMessage appends the row of the message whose occurrences are
// parts, merged: read as their concatenation.
func (r *protoRowReader) emitMessage(dst []byte, f *protoReadField, parts [][]byte) ([]byte, error) {
	if len(parts) <= 1 {
		var b []byte
		if len(parts) == 1 {
			b = parts[0]
		}
		return r.emitNested(dst, f, b)
	}
	start := len(r.merged)
	for _, p := range parts {
		r.merged = append(r.merged, p...)
	}
	dst, err := r.emitNested(dst, f, r.merged[start:])
	r.merged = r.merged[:start]
	return dst, err
}

// emitNested appends the row of message b of field f's message type.
func (r *protoRowReader) emitNested(dst []byte, f *protoReadField, b []byte) ([]byte, error) {
	if err := f.nested.scan(b); err != nil {
		return nil, err
	}
	return f.nested.emit(dst)
}

func (r *protoRowReader) emitList(dst []byte, f *protoReadField, s *protoSeen) ([]byte, error) {
	fd := f.fd
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0) // the element count, once known
	count := 0
	for k, p := range s.parts {
		if s.types[k] == protowire.BytesType && packable(fd.Kind()) {
			for len(p) > 0 {
				n := consumeScalar(fd.Kind(), p)
				dst = appendScalarRow(dst, fd, p[:n])
				p = p[n:]
				count++
			}
			continue
		}
		var err error
		if fd.Message() != nil {
			if dst, err = r.emitNested(dst, f, p); err != nil {
				return nil, err
			}
		} else {
			dst = appendScalarRow(dst, fd, p)
		}
		count++
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(count))
	return dst, nil
}

func (r *protoRowReader) emitMap(dst []byte, f *protoReadField, s *protoSeen) ([]byte, error) {
	kfd, vfd := f.fd.MapKey(), f.fd.MapValue()
	start, first := len(r.merged), len(r.entries)
	defer func() { r.merged, r.entries = r.merged[:start], r.entries[:first] }()
	for _, p := range s.parts {
		e, err := r.readEntry(f, p, true)
		if err != nil {
			return nil, err
		}
		r.entries = append(r.entries, e)
	}
	entries := r.entries[first:]
	// A missing key is the default: "", false or 0.
	compareKeys := func(x, y protoReadEntry) int {
		if kfd.Kind() == protoreflect.StringKind {
			return bytes.Compare(x.key, y.key)
		}
		return cmp.Compare(mapKeyNumber(kfd, x), mapKeyNumber(kfd, y))
	}
	slices.SortStableFunc(entries, compareKeys)
	n := 0
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for k, e := range entries {
		if k+1 < len(entries) && compareKeys(e, entries[k+1]) == 0 {
			continue // a later entry of the key replaces it
		}
		if !e.hasKey {
			dst = appendDefaultRow(dst, kfd)
		} else {
			dst = appendScalarRow(dst, kfd, e.key)
		}
		var err error
		switch {
		case vfd.Message() != nil:
			if dst, err = r.emitNested(dst, f, r.merged[e.msg.start:e.msg.end]); err != nil {
				return nil, err
			}
		case !e.hasValue:
			dst = appendDefaultRow(dst, vfd)
		default:
			dst = appendScalarRow(dst, vfd, e.value)
		}
		n++
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	return dst, nil
}

// mapKeyNumber orders a map entry's key of a kind other than string:
// false before true, numbers ascending (uint32 keys fit in an int64).
func mapKeyNumber(kfd protoreflect.FieldDescriptor, e protoReadEntry) int64 {
	if !e.hasKey {
		return 0
	}
	v := scalarValue(kfd, e.key)
	switch kfd.Kind() {
	case protoreflect.BoolKind:
		if v.Bool() {
			return 1
		}
		return 0
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return int64(v.Uint())
	}
	return v.Int()
}

// appendDefaultRow appends the row value of fd's default, which a field
// without presence reads as when absent.
func appendDefaultRow(dst []byte, fd protoreflect.FieldDescriptor) []byte {
	return appendScalarValue(dst, fd, fd.Default())
}

// appendScalarRow appends the row value of fd's wire value v: a varint's
// or fixed value's bytes, a string's or bytes' content.
func appendScalarRow(dst []byte, fd protoreflect.FieldDescriptor, v []byte) []byte {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return appendBytes(dst, v)
	case protoreflect.EnumKind:
		u, _ := protowire.ConsumeVarint(v)
		n := protoreflect.EnumNumber(u)
		if ev := fd.Enum().Values().ByNumber(n); ev != nil {
			return appendBytes(dst, string(ev.Name()))
		}
		return appendBytes(dst, strconv.Itoa(int(n)))
	}
	return appendScalarValue(dst, fd, scalarValue(fd, v))
}

// scalarValue decodes fd's raw wire value v (not a string, bytes or
// message).
func scalarValue(fd protoreflect.FieldDescriptor, v []byte) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.Sfixed32Kind:
		u, _ := protowire.ConsumeFixed32(v)
		return protoreflect.ValueOfInt32(int32(u))
	case protoreflect.Fixed32Kind:
		u, _ := protowire.ConsumeFixed32(v)
		return protoreflect.ValueOfUint32(u)
	case protoreflect.FloatKind:
		u, _ := protowire.ConsumeFixed32(v)
		return protoreflect.ValueOfFloat32(math.Float32frombits(u))
	case protoreflect.Sfixed64Kind:
		u, _ := protowire.ConsumeFixed64(v)
		return protoreflect.ValueOfInt64(int64(u))
	case protoreflect.Fixed64Kind:
		u, _ := protowire.ConsumeFixed64(v)
		return protoreflect.ValueOfUint64(u)
	case protoreflect.DoubleKind:
		u, _ := protowire.ConsumeFixed64(v)
		return protoreflect.ValueOfFloat64(math.Float64frombits(u))
	}
	u, _ := protowire.ConsumeVarint(v)
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(protowire.DecodeBool(u))
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(u))
	case protoreflect.Sint32Kind:
		return protoreflect.ValueOfInt32(int32(protowire.DecodeZigZag(u & math.MaxUint32)))
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(u))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(u))
	case protoreflect.Sint64Kind:
		return protoreflect.ValueOfInt64(protowire.DecodeZigZag(u))
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(u)
	}
	return protoreflect.ValueOfEnum(protoreflect.EnumNumber(u))
}

// packable reports whether a repeated field of kind k may be packed.
func packable(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		return false
	}
	return true
}

// wireType is the wire type of one value of kind k.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.VarintType
}

// consumeScalar is the length of the value of kind k (varint or fixed)
// at the start of b, or a protowire error.
func consumeScalar(k protoreflect.Kind, b []byte) int {
	switch wireType(k) {
	case protowire.Fixed32Type:
		_, n := protowire.ConsumeFixed32(b)
		return n
	case protowire.Fixed64Type:
		_, n := protowire.ConsumeFixed64(b)
		return n
	}
	_, n := protowire.ConsumeVarint(b)
	return n
}

func parseError(n int) error {
	return fmt.Errorf("protobuf could not parse it: %w", protowire.ParseError(n))
}
