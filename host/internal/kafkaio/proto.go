package kafkaio

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/ksrunner/ksrunner/translate"
)

// Protobuf rows (translate.ProtoRowSchema, format PROTO of the Kafka
// schema transforms): a read parses each record's value as a message of
// the read's type (dynamicpb) and appends its fields as a row; a write
// sets a message's fields from each row's, by name, and serializes it
// (deterministically: map entries in key order).

// NewProtoPayloadEncoder returns the encoder of records' values, messages
// name of the FileDescriptorSet rowSchema (base64), as rows in coder cid
// of coders, possibly length-prefixed.
func NewProtoPayloadEncoder(coders map[string]*pipepb.Coder, cid, rowSchema, name string) (PayloadEncoder, error) {
	if _, err := readRowSchema(coders, cid, &translate.KafkaRead{PayloadRow: true, RowFormat: translate.KafkaRowProto, RowSchema: rowSchema, MessageName: name}); err != nil {
		return nil, err
	}
	md, err := protoDescriptor(rowSchema, name)
	if err != nil {
		return nil, err
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	var scratch []byte
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		// A tombstone is the empty message, as protobuf reads no bytes.
		m := dynamicpb.NewMessage(md)
		if err := unmarshalProto(r.Value, m); err != nil {
			return nil, fmt.Errorf("not a %s message: %w", md.FullName(), err)
		}
		row, err := appendProtoMessage(scratch[:0], m, "")
		if err != nil {
			return nil, err
		}
		scratch = row
		return appendElement(dst, row, prefixed), nil
	}, nil
}

// unmarshalProto parses b into m. protobuf-go (v1.36) panics on some
// malformed input into a dynamicpb message (a map entry whose key is of
// the wrong wire type: "cannot convert nil to map key", found by
// FuzzProtoRoundTrip); that is an error about the record, not a crash.
func unmarshalProto(b []byte, m *dynamicpb.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("protobuf could not parse it: %v", p)
		}
	}()
	return proto.Unmarshal(b, m)
}

func protoDescriptor(rowSchema, name string) (protoreflect.MessageDescriptor, error) {
	set, err := translate.DecodeProtoSchema(rowSchema)
	if err != nil {
		return nil, err
	}
	return translate.ProtoMessage(set, name)
}

// appendProtoMessage appends m as a row: a field with presence that m
// lacks is null.
func appendProtoMessage(dst []byte, m protoreflect.Message, path string) ([]byte, error) {
	fields := m.Descriptor().Fields()
	n := fields.Len()
	dst = appendRowHeader(dst, n, func(i int) bool { fd := fields.Get(i); return fd.HasPresence() && !m.Has(fd) })
	for i := range n {
		fd := fields.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		fp := fieldPath(path, string(fd.Name()))
		v := m.Get(fd)
		var err error
		switch {
		case fd.IsList():
			l := v.List()
			dst = binary.BigEndian.AppendUint32(dst, uint32(l.Len()))
			for j := range l.Len() {
				if dst, err = appendProtoValue(dst, fd, l.Get(j), fp+"["+strconv.Itoa(j)+"]"); err != nil {
					return nil, err
				}
			}
		case fd.IsMap():
			mp := v.Map()
			keys := make([]protoreflect.MapKey, 0, mp.Len())
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			slices.SortFunc(keys, compareMapKeys)
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(keys)))
			for _, k := range keys {
				kp := fp + "[" + k.String() + "]"
				if dst, err = appendProtoValue(dst, fd.MapKey(), k.Value(), kp); err != nil {
					return nil, err
				}
				if dst, err = appendProtoValue(dst, fd.MapValue(), mp.Get(k), kp); err != nil {
					return nil, err
				}
			}
		default:
			dst, err = appendProtoValue(dst, fd, v, fp)
		}
		if err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func compareMapKeys(a, b protoreflect.MapKey) int {
	switch x := a.Interface().(type) {
	case string:
		return cmp.Compare(x, b.Interface().(string))
	case bool:
		y := b.Interface().(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case int32, int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

// appendProtoValue appends one value of field fd (an element of a
// repeated one) as its row value.
func appendProtoValue(dst []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if v.Bool() {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return binary.AppendUvarint(dst, uint64(v.Int())), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return binary.AppendUvarint(dst, v.Uint()), nil
	case protoreflect.FloatKind:
		return binary.BigEndian.AppendUint32(dst, math.Float32bits(float32(v.Float()))), nil
	case protoreflect.DoubleKind:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(v.Float())), nil
	case protoreflect.StringKind:
		return appendBytes(dst, v.String()), nil
	case protoreflect.BytesKind:
		return appendBytes(dst, v.Bytes()), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendBytes(dst, string(ev.Name())), nil
		}
		return appendBytes(dst, strconv.Itoa(int(v.Enum()))), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendProtoMessage(dst, v.Message(), path)
	}
	return nil, fmt.Errorf("field %q: type %s has no row value", path, fd.Kind())
}

// NewProtoPayloadDecoder returns the decoder of a PROTO write's rows in
// coder cid of coders (translate.CheckProtoWriteSchema), possibly
// length-prefixed: each row's message, serialized.
func NewProtoPayloadDecoder(coders map[string]*pipepb.Coder, cid, rowSchema, name string) (PayloadDecoder, error) {
	md, err := protoDescriptor(rowSchema, name)
	if err != nil {
		return nil, err
	}
	check := func(s *pipepb.Schema) error { return translate.CheckProtoWriteSchema(s, rowSchema, name) }
	marshal := proto.MarshalOptions{Deterministic: true}
	return newStructuredDecoder(coders, cid, check, func(dst []byte, s *pipepb.Schema, b []byte, path string) ([]byte, []byte, error) {
		m := dynamicpb.NewMessage(md)
		rest, err := setProtoRow(m, s, b, path)
		if err != nil {
			return nil, nil, err
		}
		out, err := marshal.MarshalAppend(dst, m)
		return out, rest, err
	})
}

// setProtoRow sets m's fields from the row at the start of b, by name (a
// null leaves the field unset), and returns what follows the row.
func setProtoRow(m protoreflect.Message, s *pipepb.Schema, b []byte, path string) ([]byte, error) {
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	h, b, err := readRowHeader(b, len(order))
	if err != nil {
		return nil, err
	}
	for i, o := range order {
		f := s.GetFields()[o]
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(f.GetName()))
		fp := fieldPath(path, f.GetName())
		if fd == nil { // CheckProtoWriteSchema refuses it
			return nil, fmt.Errorf("field %q: not in message %s", fp, m.Descriptor().FullName())
		}
		if h.null(i) {
			// Unset. A field without presence would read back as its
			// default, not null: the row is not writable as is. (A null
			// repeated field or map is empty, which protobuf cannot
			// tell from null.)
			if !fd.HasPresence() && !fd.IsList() && !fd.IsMap() {
				return nil, fmt.Errorf("field %q: null, but %s's field %s has no presence (it would read back as %v)", fp, m.Descriptor().FullName(), fd.Name(), fd.Default().Interface())
			}
			continue
		}
		if b, err = setProtoField(m, fd, f.GetType(), b, fp); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func setProtoField(m protoreflect.Message, fd protoreflect.FieldDescriptor, t *pipepb.FieldType, b []byte, path string) ([]byte, error) {
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		et := t.GetArrayType().GetElementType()
		i := 0
		return readList(b, et.GetNullable(), func(b []byte) ([]byte, error) {
			v, rest, err := readProtoValue(l.NewElement, fd, et, b, path+"["+strconv.Itoa(i)+"]")
			if err == nil {
				l.Append(v)
			}
			i++
			return rest, err
		}, func() error {
			return fmt.Errorf("field %q: item %d is null, which a repeated field cannot hold", path, i)
		})
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		kt, vt := t.GetMapType().GetKeyType(), t.GetMapType().GetValueType()
		if len(b) < 4 {
			return nil, fmt.Errorf("field %q: map: short", path)
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		for range max(n, 0) {
			var k, v protoreflect.Value
			var err error
			if k, b, err = readProtoNonNull(nil, fd.MapKey(), kt, b, path+"[key]"); err != nil {
				return nil, err
			}
			if v, b, err = readProtoNonNull(mp.NewValue, fd.MapValue(), vt, b, path+"["+fmt.Sprint(k.Interface())+"]"); err != nil {
				return nil, err
			}
			mp.Set(k.MapKey(), v)
		}
		return b, nil
	}
	v, rest, err := readProtoValue(func() protoreflect.Value { return m.NewField(fd) }, fd, t, b, path)
	if err != nil {
		return nil, err
	}
	m.Set(fd, v)
	return rest, nil
}

// readProtoNonNull reads a map key or value: one that may be null in the
// row (a nullable type) must not be.
func readProtoNonNull(newValue func() protoreflect.Value, fd protoreflect.FieldDescriptor, t *pipepb.FieldType, b []byte, path string) (protoreflect.Value, []byte, error) {
	if t.GetNullable() {
		if len(b) < 1 {
			return protoreflect.Value{}, nil, fmt.Errorf("field %q: short", path)
		}
		if b[0] == 0 {
			return protoreflect.Value{}, nil, fmt.Errorf("field %q: null, which a map cannot hold", path)
		}
		b = b[1:]
	}
	return readProtoValue(newValue, fd, t, b, path)
}

// readProtoValue reads the row value of type t at the start of b as a
// value of field fd (an element of a repeated one); newValue makes a
// message to fill.
func readProtoValue(newValue func() protoreflect.Value, fd protoreflect.FieldDescriptor, t *pipepb.FieldType, b []byte, path string) (protoreflect.Value, []byte, error) {
	fail := func(err error) (protoreflect.Value, []byte, error) {
		return protoreflect.Value{}, nil, fmt.Errorf("field %q: %w", path, err)
	}
	fixed := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, fmt.Errorf("short")
		}
		return b[:n], nil
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		v, err := fixed(1)
		if err != nil {
			return fail(err)
		}
		return protoreflect.ValueOfBool(v[0] != 0), b[1:], nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		v, rest, err := readVarint(b)
		if err != nil {
			return fail(err)
		}
		return protoreflect.ValueOfInt32(int32(v)), rest, nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		v, rest, err := readVarint(b)
		if err != nil {
			return fail(err)
		}
		return protoreflect.ValueOfInt64(v), rest, nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		v, rest, err := readVarint(b)
		if err != nil {
			return fail(err)
		}
		if v < 0 || v > math.MaxUint32 {
			return fail(fmt.Errorf("%d is out of a %s's range", v, fd.Kind()))
		}
		return protoreflect.ValueOfUint32(uint32(v)), rest, nil
	case protoreflect.FloatKind:
		v, err := fixed(4)
		if err != nil {
			return fail(err)
		}
		return protoreflect.ValueOfFloat32(math.Float32frombits(binary.BigEndian.Uint32(v))), b[4:], nil
	case protoreflect.DoubleKind:
		v, err := fixed(8)
		if err != nil {
			return fail(err)
		}
		return protoreflect.ValueOfFloat64(math.Float64frombits(binary.BigEndian.Uint64(v))), b[8:], nil
	case protoreflect.StringKind:
		v, rest, err := readBytes(b)
		if err != nil {
			return fail(err)
		}
		return protoreflect.ValueOfString(string(v)), rest, nil
	case protoreflect.BytesKind:
		v, rest, err := readBytes(b)
		if err != nil {
			return fail(err)
		}
		return protoreflect.ValueOfBytes(bytes.Clone(v)), rest, nil
	case protoreflect.EnumKind:
		v, rest, err := readBytes(b)
		if err != nil {
			return fail(err)
		}
		if ev := fd.Enum().Values().ByName(protoreflect.Name(v)); ev != nil {
			return protoreflect.ValueOfEnum(ev.Number()), rest, nil
		}
		if n, err := strconv.ParseInt(string(v), 10, 32); err == nil {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n)), rest, nil
		}
		return fail(fmt.Errorf("%q is not a value of enum %s", v, fd.Enum().FullName()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		v := newValue()
		rest, err := setProtoRow(v.Message(), t.GetRowType().GetSchema(), b, path)
		if err != nil {
			return protoreflect.Value{}, nil, err
		}
		return v, rest, nil
	}
	return fail(fmt.Errorf("type %s has no row value", fd.Kind()))
}
