package kafkaio

import (
	"bytes"
	"encoding/base64"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx/schema"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/translate"
)

// orderMessage is a shop.Order with every field set, and its row as
// plainValue gives the SDK's decoding of it.
func orderMessage(_ testing.TB, md protoreflect.MessageDescriptor) (*dynamicpb.Message, map[string]any) {
	m := dynamicpb.NewMessage(md)
	f := md.Fields().ByName
	m.Set(f("name"), protoreflect.ValueOfString("a\x00é"))
	m.Set(f("count"), protoreflect.ValueOfInt64(math.MinInt64))
	m.Set(f("small"), protoreflect.ValueOfInt32(-7))
	m.Set(f("big"), protoreflect.ValueOfUint32(math.MaxUint32))
	m.Set(f("ratio"), protoreflect.ValueOfFloat32(0.25))
	m.Set(f("price"), protoreflect.ValueOfFloat64(0)) // set, though the default: present
	m.Set(f("paid"), protoreflect.ValueOfBool(true))
	m.Set(f("blob"), protoreflect.ValueOfBytes([]byte{0, 0xff}))
	tags := m.Mutable(f("tags")).List()
	tags.Append(protoreflect.ValueOfString("x"))
	tags.Append(protoreflect.ValueOfString(""))
	m.Set(f("state"), protoreflect.ValueOfEnum(1))
	home := m.Mutable(f("home")).Message()
	home.Set(home.Descriptor().Fields().ByName("city"), protoreflect.ValueOfString("Oslo"))
	home.Set(home.Descriptor().Fields().ByName("zip"), protoreflect.ValueOfInt32(150))
	homes := m.Mutable(f("homes")).List()
	h := homes.NewElement()
	h.Message().Set(h.Message().Descriptor().Fields().ByName("city"), protoreflect.ValueOfString("Rome"))
	homes.Append(h)
	stock := m.Mutable(f("stock")).Map()
	stock.Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfInt32(3))
	stock.Set(protoreflect.ValueOfString("j").MapKey(), protoreflect.ValueOfInt32(-1))
	m.Set(f("number"), protoreflect.ValueOfInt64(42))
	want := map[string]any{"name": "a\x00é", "count": int64(math.MinInt64), "small": int64(-7), "big": int64(math.MaxUint32),
		"ratio": float32(0.25), "price": 0.0, "paid": true, "blob": []byte{0, 0xff}, "tags": []any{"x", ""}, "state": "PAID",
		"home": map[string]any{"city": "Oslo", "zip": int64(150)}, "homes": []any{map[string]any{"city": "Rome", "zip": nil}},
		"stock": map[string]int32{"k": 3, "j": -1}, "text": nil, "number": int64(42)}
	return m, want
}

// A message read to a row the Beam Go SDK's row coder decodes to its
// fields: presence gives nulls, an implicit scalar its default, an enum its
// name; plain and length-prefixed.
func TestProtoRowDecodesWithSDK(t *testing.T) {
	set, md := testkit.OrderProto(t)
	rowSchema := base64.StdEncoding.EncodeToString(set)
	s, err := translate.ProtoRowSchema(rowSchema, "shop.Order")
	if err != nil {
		t.Fatal(err)
	}
	dec := sdkRowDecoder(t, s)
	full, fullWant := orderMessage(t, md)
	empty := dynamicpb.NewMessage(md)
	emptyWant := map[string]any{"name": "", "count": int64(0), "small": int64(0), "big": int64(0), "ratio": float32(0), "price": nil,
		"paid": false, "blob": []byte{}, "tags": []any{}, "state": "NEW", "home": nil, "homes": []any{}, "stock": map[string]int32{},
		"text": nil, "number": nil}
	unknownEnum := dynamicpb.NewMessage(md)
	unknownEnum.Set(md.Fields().ByName("state"), protoreflect.ValueOfEnum(7))
	unknownWant := map[string]any{}
	for k, v := range emptyWant {
		unknownWant[k] = v
	}
	unknownWant["state"] = "7"
	for _, c := range []struct {
		name string
		m    *dynamicpb.Message
		want map[string]any
	}{{"every field", full, fullWant}, {"empty", empty, emptyWant}, {"an enum number without a name", unknownEnum, unknownWant}} {
		value, err := proto.Marshal(c.m)
		if err != nil {
			t.Fatal(err)
		}
		for _, cid := range []string{"row", "lp"} {
			enc, err := NewProtoPayloadEncoder(rowCoders(t, s), cid, rowSchema, "shop.Order")
			if err != nil {
				t.Fatal(err)
			}
			b, err := enc([]byte("x"), &kgo.Record{Value: value})
			if err != nil {
				t.Fatalf("%s (%s): %v", c.name, cid, err)
			}
			b = b[1:]
			if cid == "lp" {
				if b, err = stripLengthPrefix(b); err != nil {
					t.Fatal(err)
				}
			}
			r := bytes.NewReader(b)
			v, err := dec(r)
			if err != nil {
				t.Fatalf("%s (%s): the SDK cannot decode the row: %v", c.name, cid, err)
			}
			if r.Len() != 0 {
				t.Errorf("%s: %d bytes after the row", c.name, r.Len())
			}
			if got := plainValue(reflect.ValueOf(v)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s (%s):\n got %#v\nwant %#v", c.name, cid, got, c.want)
			}
		}
	}
	enc, err := NewProtoPayloadEncoder(rowCoders(t, s), "row", rowSchema, "shop.Order")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc(nil, &kgo.Record{Value: []byte{0x0a, 0x05, 'a'}}); err == nil || !strings.Contains(err.Error(), "shop.Order") {
		t.Errorf("a truncated message: %v", err)
	}
}

// A row written as a message reads back (protobuf's own decoding) to the
// message the row came from: fields by name, nulls unset, enum names to
// numbers; the SDK's encoding of the row read from a message is the input.
func TestProtoWriteRoundTrip(t *testing.T) {
	set, md := testkit.OrderProto(t)
	rowSchema := base64.StdEncoding.EncodeToString(set)
	s, err := translate.ProtoRowSchema(rowSchema, "shop.Order")
	if err != nil {
		t.Fatal(err)
	}
	coders := rowCoders(t, s)
	enc, err := NewProtoPayloadEncoder(coders, "row", rowSchema, "shop.Order")
	if err != nil {
		t.Fatal(err)
	}
	full, _ := orderMessage(t, md)
	for _, m := range []*dynamicpb.Message{full, dynamicpb.NewMessage(md)} {
		value, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		row, err := enc(nil, &kgo.Record{Value: value})
		if err != nil {
			t.Fatal(err)
		}
		for _, cid := range []string{"row", "lp"} {
			dec, err := NewProtoPayloadDecoder(coders, cid, rowSchema, "shop.Order")
			if err != nil {
				t.Fatal(err)
			}
			in := row
			if cid == "lp" {
				in = appendBytes(nil, row)
			}
			out, err := dec(in)
			if err != nil {
				t.Fatalf("%s: %v", cid, err)
			}
			got := dynamicpb.NewMessage(md)
			if err := proto.Unmarshal(out, got); err != nil {
				t.Fatalf("%s: protobuf cannot read the written message: %v", cid, err)
			}
			if !proto.Equal(got, m) {
				t.Errorf("%s:\n got %v\nwant %v", cid, got, m)
			}
		}
	}
}

// A null in a row field whose message field has no presence cannot be
// written (it would read back as the default): an error naming the field,
// which makes the row a bad element; a null with presence is unset.
func TestProtoWriteNullWithoutPresence(t *testing.T) {
	set, _ := testkit.OrderProto(t)
	rowSchema := base64.StdEncoding.EncodeToString(set)
	type row struct {
		Name  string   `beam:"name"`
		Count *int64   `beam:"count"`
		Price *float64 `beam:"price"`
	}
	s, err := schema.FromType(reflect.TypeOf(row{}))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := coder.RowEncoderForStruct(reflect.TypeOf(row{}))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := NewProtoPayloadDecoder(rowCoders(t, s), "row", rowSchema, "shop.Order")
	if err != nil {
		t.Fatal(err)
	}
	one := int64(1)
	for _, c := range []struct {
		row  row
		want string // "": written
	}{
		{row{Name: "a", Count: &one}, ""},
		{row{Name: "b", Count: nil}, `field "count": null, but shop.Order's field count has no presence (it would read back as 0)`},
	} {
		var b bytes.Buffer
		if err := enc(c.row, &b); err != nil {
			t.Fatal(err)
		}
		_, err := dec(b.Bytes())
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.row, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%+v: %v, want %q", c.row, err, c.want)
		}
	}
}

// A PROTO write's rows must name the message's fields with their types;
// a uint64 field and a recursive message have no row type.
func TestProtoSchemaErrors(t *testing.T) {
	set, _ := testkit.OrderProto(t)
	rowSchema := base64.StdEncoding.EncodeToString(set)
	type wrongName struct{ Nom string }
	type wrongType struct {
		Count string `beam:"count"`
	}
	for _, c := range []struct {
		row  any
		want []string
	}{
		{wrongName{}, []string{`"Nom"`, "no such field"}},
		{wrongType{}, []string{`"count"`, "INT64", "STRING"}},
	} {
		s, err := schema.FromType(reflect.TypeOf(c.row))
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewProtoPayloadDecoder(rowCoders(t, s), "row", rowSchema, "shop.Order")
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%T: %v, want an error saying %q", c.row, err, w)
			}
		}
	}
	if _, err := translate.ProtoRowSchema(rowSchema, "shop.Nope"); err == nil || !strings.Contains(err.Error(), "shop.Nope") {
		t.Errorf("a missing message: %v", err)
	}
}

// Property: a message a PROTO read takes comes back, through a PROTO
// write of its row, as a message that reads to the very same row.
func FuzzProtoRoundTrip(f *testing.F) {
	set, md := testkit.OrderProto(f)
	full, _ := orderMessage(f, md)
	for _, m := range []proto.Message{full, dynamicpb.NewMessage(md)} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	rowSchema := base64.StdEncoding.EncodeToString(set)
	s, err := translate.ProtoRowSchema(rowSchema, "shop.Order")
	if err != nil {
		f.Fatal(err)
	}
	coders := rowCoders(f, s)
	enc, err := NewProtoPayloadEncoder(coders, "row", rowSchema, "shop.Order")
	if err != nil {
		f.Fatal(err)
	}
	dec, err := NewProtoPayloadDecoder(coders, "row", rowSchema, "shop.Order")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(roundTrip(enc, dec))
}
