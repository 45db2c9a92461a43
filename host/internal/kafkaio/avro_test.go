package kafkaio

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx/schema"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// orderAvro has every type an Avro read maps: the primitives, a nullable
// string and record (null first and last), arrays (of nullable items), a
// map, an enum, a fixed, a logical type and a named type used twice.
const orderAvro = `{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "name", "type": "string"},
  {"name": "count", "type": "long"},
  {"name": "small", "type": "int"},
  {"name": "ratio", "type": "float"},
  {"name": "price", "type": "double"},
  {"name": "paid", "type": "boolean"},
  {"name": "blob", "type": "bytes"},
  {"name": "note", "type": ["null", "string"]},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "scores", "type": {"type": "array", "items": ["double", "null"]}},
  {"name": "stock", "type": {"type": "map", "values": "int"}},
  {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
  {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 2}},
  {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "home", "type": ["null", {"type": "record", "name": "Address", "fields": [
    {"name": "city", "type": "string"}, {"name": "zip", "type": ["int", "null"]}]}]},
  {"name": "work", "type": "Address"}
]}`

// orderDatum is a datum of orderAvro as hamba/avro takes it, and its row
// as plainValue gives the SDK's decoding of it.
func orderDatum(note *string, home map[string]any) (map[string]any, map[string]any) {
	in := map[string]any{"name": "a\x00é", "count": int64(math.MinInt64), "small": int32(-7), "ratio": float32(0.25),
		"price": 1e300, "paid": true, "blob": []byte{0, 0xff}, "note": note, "tags": []string{"x", ""},
		"scores": []any{1.5, nil}, "stock": map[string]any{"k": int32(3)}, "state": "PAID", "code": [2]byte{1, 2},
		"at": int64(1700000000000), "home": nil, "work": map[string]any{"city": "Rome", "zip": nil}}
	if home != nil {
		in["home"] = map[string]any{"shop.Address": home} // hamba/avro's union of a record
	}
	want := map[string]any{"name": "a\x00é", "count": int64(math.MinInt64), "small": int64(-7), "ratio": float32(0.25),
		"price": 1e300, "paid": true, "blob": []byte{0, 0xff}, "note": nil, "tags": []any{"x", ""},
		"scores": []any{1.5, nil}, "stock": map[string]int32{"k": 3}, "state": "PAID", "code": []byte{1, 2},
		"at": int64(1700000000000), "home": nil, "work": map[string]any{"city": "Rome", "zip": nil}}
	if note != nil {
		want["note"] = *note
	}
	if home != nil {
		want["home"] = map[string]any{"city": home["city"], "zip": nil}
		if z, ok := home["zip"].(map[string]any); ok {
			want["home"].(map[string]any)["zip"] = int64(z["int"].(int32))
		}
	}
	return in, want
}

// A datum hamba/avro encodes reads to a row the Beam Go SDK's row coder
// decodes to the datum's values; plain and length-prefixed.
func TestAvroRowDecodesWithSDK(t *testing.T) {
	s, err := translate.AvroRowSchema(orderAvro)
	if err != nil {
		t.Fatal(err)
	}
	dec := sdkRowDecoder(t, s)
	as := avro.MustParse(orderAvro)
	coders := rowCoders(t, s)
	note := "n"
	for _, c := range []struct {
		note *string
		home map[string]any
	}{
		{nil, nil},
		{&note, map[string]any{"city": "Oslo", "zip": map[string]any{"int": int32(150)}}},
		{&note, map[string]any{"city": "", "zip": nil}},
	} {
		in, want := orderDatum(c.note, c.home)
		datum, err := avro.Marshal(as, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, cid := range []string{"row", "lp"} {
			enc, err := NewAvroPayloadEncoder(coders, cid, orderAvro)
			if err != nil {
				t.Fatal(err)
			}
			b, err := enc([]byte("x"), &kgo.Record{Value: datum})
			if err != nil {
				t.Fatalf("%v (%s): %v", in, cid, err)
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
				t.Fatalf("%v (%s): the SDK cannot decode the row: %v", in, cid, err)
			}
			if r.Len() != 0 {
				t.Errorf("%d bytes after the row", r.Len())
			}
			got := plainValue(reflect.ValueOf(v)).(map[string]any)
			// The SDK's INT32 decodes as an int32, plainValue widens it.
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s:\n got %#v\nwant %#v", cid, got, want)
			}
		}
	}
}

// A value that is not a datum of the schema is an error naming the field.
func TestAvroReadErrors(t *testing.T) {
	const sch = `{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"u","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["X"]}},{"name":"l","type":{"type":"array","items":"int"}}]}`
	s, err := translate.AvroRowSchema(sch)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewAvroPayloadEncoder(rowCoders(t, s), "row", sch)
	if err != nil {
		t.Fatal(err)
	}
	good, err := avro.Marshal(avro.MustParse(sch), map[string]any{"a": int64(1), "u": nil, "e": "X", "l": []int32{5}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc(nil, &kgo.Record{Value: good}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		value []byte
		want  []string
	}{
		{"empty", []byte{}, []string{`field "a"`}},
		{"truncated", good[:len(good)-2], []string{`field "l`}},
		{"trailing", append(bytes.Clone(good), 0), []string{"1 bytes after"}},
		{"union branch", []byte{2, 4}, []string{`field "u"`, "union branch 2"}},
		{"enum index", []byte{2, 0, 2}, []string{`field "e"`, "enum index 1"}},
		{"string length", []byte{2, 2, 100, 'x'}, []string{`field "u"`, "bad length"}},
		{"block count", []byte{2, 0, 0, 0x7f}, []string{`field "l"`, "block"}},
		{"array item", []byte{2, 0, 0, 2, 0x80}, []string{`field "l[0]"`, "bad varint"}},
	} {
		_, err := enc(nil, &kgo.Record{Value: c.value})
		if err == nil {
			t.Errorf("%s: read", c.name)
			continue
		}
		errorSays(t, c.name, err, append(c.want, "Avro schema")...)
	}
	if _, err := enc(nil, &kgo.Record{}); err == nil || !strings.Contains(err.Error(), "tombstone") {
		t.Errorf("a tombstone: %v", err)
	}
}

// A row the Beam Go SDK encodes writes as a datum hamba/avro decodes, with
// translate.AvroWriteSchema of the row's schema, to the row's values.
func TestAvroWriteOfSDKRows(t *testing.T) {
	type inner struct {
		City string
		Zip  *int64
	}
	type row struct {
		Name    string
		Count   int64
		Small   int32
		Ratio   float32
		Price   *float64
		Paid    bool
		Blob    []byte
		Tags    []string
		Scores  []*float64
		Stock   map[string]int64
		Address *inner
		Homes   []inner
	}
	s, err := schema.FromType(reflect.TypeOf(row{}))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := translate.AvroWriteSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	as, err := avro.Parse(ws)
	if err != nil {
		t.Fatalf("the write's Avro schema %s: %v", ws, err)
	}
	enc, err := coder.RowEncoderForStruct(reflect.TypeOf(row{}))
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	in := row{Name: "a\x00é", Count: math.MinInt64, Small: -7, Ratio: 0.25, Price: f(2), Paid: true, Blob: []byte{0xff},
		Tags: []string{"x", ""}, Scores: []*float64{f(1.5), nil}, Stock: map[string]int64{"k": 3, "j": -1},
		Address: &inner{City: "Oslo", Zip: i(150)}, Homes: []inner{{City: "Rome"}}}
	var b bytes.Buffer
	if err := enc(in, &b); err != nil {
		t.Fatal(err)
	}
	for _, cid := range []string{"row", "lp"} {
		rowBytes := b.Bytes()
		if cid == "lp" {
			rowBytes = appendBytes(nil, rowBytes)
		}
		dec, err := NewAvroPayloadDecoder(rowCoders(t, s), cid)
		if err != nil {
			t.Fatal(err)
		}
		datum, err := dec(rowBytes)
		if err != nil {
			t.Fatalf("%s: %v", cid, err)
		}
		var got row
		if err := avro.Unmarshal(as, datum, &got); err != nil {
			t.Fatalf("%s: hamba/avro cannot decode the datum: %v", cid, err)
		}
		if !reflect.DeepEqual(got, in) {
			t.Errorf("%s:\n got %+v\nwant %+v", cid, got, in)
		}
	}
}

// An Avro write refuses, naming the field, rows it has no datum for.
func TestAvroWriteRefuses(t *testing.T) {
	atomic := func(a pipepb.AtomicType) *pipepb.FieldType {
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: a}}
	}
	for _, c := range []struct {
		name string
		t    *pipepb.FieldType
		want string
	}{
		{"bad", atomic(pipepb.AtomicType_INT16), "INT16"},
		{"bad", &pipepb.FieldType{TypeInfo: &pipepb.FieldType_MapType{MapType: &pipepb.MapType{KeyType: atomic(pipepb.AtomicType_INT64), ValueType: atomic(pipepb.AtomicType_STRING)}}}, "MAP<INT64"},
		{"bad", &pipepb.FieldType{TypeInfo: &pipepb.FieldType_LogicalType{LogicalType: &pipepb.LogicalType{Urn: "beam:logical_type:micros_instant:v1"}}}, "micros_instant"},
		{"user id", atomic(pipepb.AtomicType_STRING), "Avro field name"},
	} {
		s := &pipepb.Schema{Id: "s", Fields: []*pipepb.Field{{Name: "nested", Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{
			Schema: &pipepb.Schema{Id: "n", Fields: []*pipepb.Field{{Name: c.name, Type: c.t}}}}}}}}}
		_, err := NewAvroPayloadDecoder(rowCoders(t, s), "row")
		if err == nil || !strings.Contains(err.Error(), `"nested.`+c.name+`"`) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
}

// Property: a datum an Avro read takes comes back, through an Avro write
// of its row, as a datum that reads to the very same row.
func FuzzAvroRoundTrip(f *testing.F) {
	const sch = `{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"f","type":"float"},
	  {"name":"u","type":["null","string"]},{"name":"l","type":{"type":"array","items":["null","int"]}},
	  {"name":"m","type":{"type":"map","values":"bytes"}},{"name":"r","type":["null",{"type":"record","name":"In","fields":[{"name":"b","type":"boolean"},{"name":"d","type":"double"}]}]}]}`
	as := avro.MustParse(sch)
	for _, d := range []map[string]any{
		{"a": int64(1), "f": float32(1.5), "u": nil, "l": []any{nil, int32(3)}, "m": map[string]any{"k": []byte{1}}, "r": nil},
		{"a": int64(-1), "f": float32(math.NaN()), "u": map[string]any{"string": "é"}, "l": []any{}, "m": map[string]any{},
			"r": map[string]any{"In": map[string]any{"b": true, "d": math.Inf(-1)}}},
	} {
		b, err := avro.Marshal(as, d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s, err := translate.AvroRowSchema(sch)
	if err != nil {
		f.Fatal(err)
	}
	coders := rowCoders(f, s)
	enc, err := NewAvroPayloadEncoder(coders, "row", sch)
	if err != nil {
		f.Fatal(err)
	}
	dec, err := NewAvroPayloadDecoder(coders, "row")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(roundTrip(enc, dec))
}
