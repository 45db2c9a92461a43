package kafkaio

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/translate"
)

// The PROTO read and write as they were built on dynamicpb (a message per
// value: parsed, then walked into a row; set from a row field by field,
// then marshalled deterministically), kept as the oracles of FuzzProtoRead
// and FuzzProtoWrite: the wire reader and writer must make the same rows
// and bytes and refuse the same values and rows.

// referenceProtoDecoder is the dynamicpb write of rows in coder cid.
func referenceProtoDecoder(coders map[string]*pipepb.Coder, cid, rowSchema, name string) (PayloadDecoder, error) {
	md, err := protoDescriptor(rowSchema, name)
	if err != nil {
		return nil, err
	}
	check := func(s *pipepb.Schema) error { return translate.CheckProtoWriteSchema(s, rowSchema, name) }
	marshal := proto.MarshalOptions{Deterministic: true}
	return newStructuredDecoder(coders, cid, check, func(s *pipepb.Schema) (rowWriter, error) {
		return func(dst, b []byte) ([]byte, []byte, error) {
			m := dynamicpb.NewMessage(md)
			rest, err := refSetProtoRow(m, s, b, "")
			if err != nil {
				return nil, nil, err
			}
			out, err := marshal.MarshalAppend(dst, m)
			return out, rest, err
		}, nil
	})
}

// refSetProtoRow sets m's fields from the row at the start of b, by name (a
// null leaves the field unset), and returns what follows the row.
func refSetProtoRow(m protoreflect.Message, s *pipepb.Schema, b []byte, path string) ([]byte, error) {
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
		if b, err = refSetProtoField(m, fd, f.GetType(), b, fp); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func refSetProtoField(m protoreflect.Message, fd protoreflect.FieldDescriptor, t *pipepb.FieldType, b []byte, path string) ([]byte, error) {
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		et := t.GetArrayType().GetElementType()
		i := 0
		return readList(b, et.GetNullable(), func(b []byte) ([]byte, error) {
			v, rest, err := refReadProtoValue(l.NewElement, fd, et, b, path+"["+strconv.Itoa(i)+"]")
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
			if k, b, err = refReadProtoNonNull(nil, fd.MapKey(), kt, b, path+"[key]"); err != nil {
				return nil, err
			}
			if v, b, err = refReadProtoNonNull(mp.NewValue, fd.MapValue(), vt, b, path+"["+fmt.Sprint(k.Interface())+"]"); err != nil {
				return nil, err
			}
			mp.Set(k.MapKey(), v)
		}
		return b, nil
	}
	v, rest, err := refReadProtoValue(func() protoreflect.Value { return m.NewField(fd) }, fd, t, b, path)
	if err != nil {
		return nil, err
	}
	m.Set(fd, v)
	return rest, nil
}

// refReadProtoNonNull reads a map key or value: one that may be null in the
// row (a nullable type) must not be.
func refReadProtoNonNull(newValue func() protoreflect.Value, fd protoreflect.FieldDescriptor, t *pipepb.FieldType, b []byte, path string) (protoreflect.Value, []byte, error) {
	if t.GetNullable() {
		if len(b) < 1 {
			return protoreflect.Value{}, nil, fmt.Errorf("field %q: short", path)
		}
		if b[0] == 0 {
			return protoreflect.Value{}, nil, fmt.Errorf("field %q: null, which a map cannot hold", path)
		}
		b = b[1:]
	}
	return refReadProtoValue(newValue, fd, t, b, path)
}

// refReadProtoValue reads the row value of type t at the start of b as a
// value of field fd (an element of a repeated one); newValue makes a
// message to fill.
func refReadProtoValue(newValue func() protoreflect.Value, fd protoreflect.FieldDescriptor, t *pipepb.FieldType, b []byte, path string) (protoreflect.Value, []byte, error) {
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
		rest, err := refSetProtoRow(v.Message(), t.GetRowType().GetSchema(), b, path)
		if err != nil {
			return protoreflect.Value{}, nil, err
		}
		return v, rest, nil
	}
	return fail(fmt.Errorf("type %s has no row value", fd.Kind()))
}

// referenceProtoEncoder is the dynamicpb read of messages name into rows
// in coder cid (not length-prefixed).
func referenceProtoEncoder(rowSchema, name string) (PayloadEncoder, error) {
	md, err := protoDescriptor(rowSchema, name)
	if err != nil {
		return nil, err
	}
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		m := dynamicpb.NewMessage(md)
		if err := unmarshalProto(r.Value, m); err != nil {
			return nil, fmt.Errorf("not a %s message: %w", md.FullName(), err)
		}
		return refAppendProtoMessage(dst, m, "")
	}, nil
}

// unmarshalProto parses b into m. protobuf-go (v1.36) panics on some
// malformed input into a dynamicpb message: a map entry whose key occurs
// again with the wrong wire type (unmarshalMap keeps the failed read's
// nil key: "cannot convert nil to map key", found by FuzzProtoRoundTrip).
// The old reader made that an error about the record (protobufPanic);
// the wire reader skips the bad occurrence as an unknown field, as the
// format says, and FuzzProtoRead does not compare such values.
func unmarshalProto(b []byte, m *dynamicpb.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = protobufPanic{p}
		}
	}()
	return proto.Unmarshal(b, m)
}

type protobufPanic struct{ p any }

func (e protobufPanic) Error() string { return fmt.Sprintf("protobuf could not parse it: %v", e.p) }

// fuzzProtoSources are the message types of FuzzProtoWrite beside
// shop.Order: proto2 (required fields, groups, packed and unpacked
// repeated fields, maps of every key kind, a oneof of a message) and
// proto3 (packed by default, UTF-8 checked).
var fuzzProtoSources = map[string]string{
	"fz.All": `syntax = "proto2";
package fz;
enum Color { RED = 0; GREEN = 1; BLUE = 5; }
message Inner { required int32 id = 1; optional string note = 2; }
message All {
  required string name = 1;
  optional sint64 s64 = 2;
  optional fixed32 f32 = 3;
  optional sfixed64 sf64 = 4;
  repeated int32 unpacked = 5;
  repeated sint32 packed = 6 [packed = true];
  repeated Color colors = 7 [packed = true];
  optional Color color = 8 [default = BLUE];
  map<int32, Inner> inners = 9;
  map<bool, string> flags = 10;
  map<uint32, double> weights = 11;
  optional group G = 12 { optional int64 g = 13; }
  repeated Inner list = 14;
  oneof pick { float f = 15; bytes raw = 16; Inner in = 17; }
  repeated string strs = 20;
  map<sfixed32, bool> bits = 21;
}`,
	"fz3.P3": `syntax = "proto3";
package fz3;
message P3Inner { string x = 1; repeated uint32 u = 2; }
message P3 {
  repeated int64 nums = 1;
  repeated double ds = 2;
  map<string, string> kv = 3;
  optional string opt = 4;
  string s = 5;
  repeated bool bs = 6;
  map<sint64, P3Inner> m = 7;
  float f = 8;
  oneof either { string a = 9; int32 b = 10; }
}`,
}

// fuzzProtoSeeds are messages of each type, in text format, whose rows
// seed FuzzProtoWrite.
var fuzzProtoSeeds = map[string][]string{
	"fz.All": {
		`name: "n" s64: -3 f32: 7 sf64: -9 unpacked: [1, -1, 0] packed: [0, -2, 300] colors: [GREEN, RED]
		 color: RED inners: {key: -1 value: {id: 0}} inners: {key: 2 value: {id: 5 note: "x"}}
		 flags: {key: true value: "t"} flags: {key: false value: ""} weights: {key: 4000000000 value: -0.0}
		 G: {g: 1} list: [{id: 1}, {id: 2 note: ""}] in: {id: 3} strs: ["a", ""] bits: {key: -5 value: true}`,
		`name: "" raw: "\x00\xff"`,
		`name: "only" f: -0.0`,
	},
	"fz3.P3": {
		`nums: [0, -1, 1] ds: [0.5, -0.0] kv: {key: "b" value: "2"} kv: {key: "a" value: ""} opt: ""
		 s: "s" bs: [true, false] m: {key: -2 value: {x: "" u: [0, 4294967295]}} f: -0.0 a: ""`,
		`b: 0`,
		``,
	},
}

// fuzzProtoType is one message type of the PROTO fuzz tests, with the
// wire values of its seed messages.
type fuzzProtoType struct {
	name, rowSchema string
	coders          map[string]*pipepb.Coder
	values          [][]byte
}

// fuzzProtoTypes are shop.Order and the types of fuzzProtoSources with
// their seeds, each value also concatenated with each (one value whose
// fields occur twice: scalars replaced, messages merged, oneofs
// switched).
func fuzzProtoTypes(f *testing.F) []fuzzProtoType {
	set, md := testkit.OrderProto(f)
	full, _ := orderMessage(f, md)
	sets := map[string][]byte{"shop.Order": set}
	seeds := map[string][]string{"shop.Order": {prototext.Format(full), `name: "x" home: {zip: 7} text: "t"`, `home: {city: "c"} number: 3 homes: [{}]`}}
	for name, src := range fuzzProtoSources {
		sets[name], seeds[name] = compileTestProto(f, src), fuzzProtoSeeds[name]
	}
	var types []fuzzProtoType
	for _, name := range []string{"shop.Order", "fz.All", "fz3.P3"} {
		rowSchema := base64.StdEncoding.EncodeToString(sets[name])
		s, err := translate.ProtoRowSchema(rowSchema, name)
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		md, err := protoDescriptor(rowSchema, name)
		if err != nil {
			f.Fatal(err)
		}
		tp := fuzzProtoType{name: name, rowSchema: rowSchema, coders: rowCoders(f, s)}
		var values [][]byte
		for _, text := range seeds[name] {
			m := dynamicpb.NewMessage(md)
			if err := prototext.Unmarshal([]byte(text), m); err != nil {
				f.Fatalf("%s seed %q: %v", name, text, err)
			}
			value, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			values = append(values, value)
		}
		for _, a := range values {
			for _, b := range values {
				tp.values = append(tp.values, append(slices.Clip(a), b...))
			}
		}
		tp.values = append(tp.values, values...)
		types = append(types, tp)
	}
	return types
}

// FuzzProtoWrite: the wire writer writes exactly the bytes the dynamicpb
// writer wrote of any row, and refuses exactly the rows it refused. The
// inputs are rows (seeded with the rows of fuzzProtoTypes' values,
// mutated into nulls, bad enum names, invalid UTF-8, out-of-range
// numbers...).
func FuzzProtoWrite(f *testing.F) {
	type target struct {
		name      string
		got, want PayloadDecoder
	}
	var targets []target
	for _, tp := range fuzzProtoTypes(f) {
		got, err := NewProtoPayloadDecoder(tp.coders, "row", tp.rowSchema, tp.name)
		if err != nil {
			f.Fatal(err)
		}
		want, err := referenceProtoDecoder(tp.coders, "row", tp.rowSchema, tp.name)
		if err != nil {
			f.Fatal(err)
		}
		read, err := referenceProtoEncoder(tp.rowSchema, tp.name)
		if err != nil {
			f.Fatal(err)
		}
		for _, v := range tp.values {
			if row, err := read(nil, &kgo.Record{Value: v}); err == nil {
				f.Add(uint8(len(targets)), row)
			}
		}
		targets = append(targets, target{tp.name, got, want})
	}
	f.Fuzz(func(t *testing.T, which uint8, row []byte) {
		tg := targets[int(which)%len(targets)]
		got, err := tg.got(row)
		want, wantErr := tg.want(row)
		sameOutcome(t, tg.name+" row", row, got, err, want, wantErr)
	})
}

// compileTestProto compiles one .proto source, importing nothing, into a
// FileDescriptorSet.
func compileTestProto(t testing.TB, source string) []byte {
	t.Helper()
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"test.proto": source}),
	}}
	files, err := c.Compile(context.Background(), "test.proto")
	if err != nil {
		t.Fatal(err)
	}
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(files[0])}})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// FuzzProtoRead: the wire reader makes exactly the row the dynamicpb
// reader made of any value, and refuses exactly the values it refused,
// on fuzzProtoTypes.
func FuzzProtoRead(f *testing.F) {
	type target struct {
		name      string
		got, want PayloadEncoder
	}
	var targets []target
	for _, tp := range fuzzProtoTypes(f) {
		got, err := NewProtoPayloadEncoder(tp.coders, "row", tp.rowSchema, tp.name)
		if err != nil {
			f.Fatal(err)
		}
		want, err := referenceProtoEncoder(tp.rowSchema, tp.name)
		if err != nil {
			f.Fatal(err)
		}
		for _, v := range tp.values {
			f.Add(uint8(len(targets)), v)
		}
		targets = append(targets, target{tp.name, got, want})
	}
	f.Fuzz(func(t *testing.T, which uint8, value []byte) {
		tg := targets[int(which)%len(targets)]
		got, err := tg.got(nil, &kgo.Record{Value: value})
		want, wantErr := tg.want(nil, &kgo.Record{Value: value})
		if errors.As(wantErr, new(protobufPanic)) {
			return
		}
		sameOutcome(t, tg.name+" value", value, got, err, want, wantErr)
	})
}

// sameOutcome fails t unless the new code's output got (or err) of in is
// the oracle's want (or both failed).
func sameOutcome(t *testing.T, what string, in, got []byte, err error, want []byte, wantErr error) {
	t.Helper()
	switch {
	case err == nil && wantErr == nil:
		if !bytes.Equal(got, want) {
			t.Fatalf("%s %x: got %x, the oracle %x", what, in, got, want)
		}
	case err == nil || wantErr == nil:
		t.Fatalf("%s %x: error %v, the oracle's %v", what, in, err, wantErr)
	}
}

// refAppendProtoMessage appends m as a row: a field with presence that m
// lacks is null.
func refAppendProtoMessage(dst []byte, m protoreflect.Message, path string) ([]byte, error) {
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
				if dst, err = refAppendProtoValue(dst, fd, l.Get(j), fp+"["+strconv.Itoa(j)+"]"); err != nil {
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
			slices.SortFunc(keys, refCompareMapKeys)
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(keys)))
			for _, k := range keys {
				kp := fp + "[" + k.String() + "]"
				if dst, err = refAppendProtoValue(dst, fd.MapKey(), k.Value(), kp); err != nil {
					return nil, err
				}
				if dst, err = refAppendProtoValue(dst, fd.MapValue(), mp.Get(k), kp); err != nil {
					return nil, err
				}
			}
		default:
			dst, err = refAppendProtoValue(dst, fd, v, fp)
		}
		if err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func refCompareMapKeys(a, b protoreflect.MapKey) int {
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

// refAppendProtoValue appends one value of field fd (an element of a
// repeated one) as its row value.
func refAppendProtoValue(dst []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) ([]byte, error) {
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
		return refAppendProtoMessage(dst, v.Message(), path)
	}
	return nil, fmt.Errorf("field %q: type %s has no row value", path, fd.Kind())
}
