package kafkaio

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx/schema"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// orderSchema has every type a JSON read makes: required and optional
// atomics, an array, an array of nullable items, a nested object (through
// a $ref) with its own required property.
const orderSchema = `{
  "type": "object",
  "required": ["name", "count"],
  "properties": {
    "name": {"type": "string"},
    "count": {"type": "integer"},
    "price": {"type": "number"},
    "paid": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "scores": {"type": "array", "items": {"type": ["number", "null"]}},
    "address": {"$ref": "#/definitions/address"}
  },
  "definitions": {
    "address": {"type": "object", "required": ["city"],
      "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}}
  }
}`

// A JSON read's row decodes with the Beam Go SDK's row coder (of the
// schema's Go type) to the object's values: missing and null optional
// properties are null, unknown ones ignored; plain and length-prefixed.
func TestJSONRowDecodesWithSDK(t *testing.T) {
	s, err := translate.JSONRowSchema(orderSchema)
	if err != nil {
		t.Fatal(err)
	}
	dec := sdkRowDecoder(t, s)
	coders := rowCoders(t, s)
	for _, c := range []struct {
		json string
		want map[string]any
	}{
		{`{"name":"a","count":1,"price":2.5,"paid":true,"tags":["x","y"],"scores":[1,null,-0.5],"address":{"city":"Oslo","zip":150}}`,
			map[string]any{"name": "a", "count": int64(1), "price": 2.5, "paid": true, "tags": []any{"x", "y"},
				"scores": []any{1.0, nil, -0.5}, "address": map[string]any{"city": "Oslo", "zip": int64(150)}}},
		{`{"count":-9223372036854775808,"name":"\u00e9\n","other":[1,{}]}`,
			map[string]any{"name": "é\n", "count": int64(math.MinInt64), "price": nil, "paid": nil, "tags": nil, "scores": nil, "address": nil}},
		{` {"name":"","count":0,"price":null,"tags":[],"address":{"city":""}} `,
			map[string]any{"name": "", "count": int64(0), "price": nil, "paid": nil, "tags": []any{}, "scores": nil,
				"address": map[string]any{"city": "", "zip": nil}}},
		{`{"name":"big","count":9007199254740993,"price":1e300}`,
			map[string]any{"name": "big", "count": int64(9007199254740993), "price": 1e300, "paid": nil, "tags": nil, "scores": nil, "address": nil}},
	} {
		for _, cid := range []string{"row", "lp"} {
			enc, err := NewJSONPayloadEncoder(coders, cid, orderSchema)
			if err != nil {
				t.Fatal(err)
			}
			b, err := enc([]byte("x"), &kgo.Record{Value: []byte(c.json)})
			if err != nil {
				t.Fatalf("%s (%s): %v", c.json, cid, err)
			}
			if b[0] != 'x' {
				t.Fatalf("%s: the encoder did not append to dst", c.json)
			}
			b = b[1:]
			if cid == "lp" {
				if b, err = stripLengthPrefix(b); err != nil {
					t.Fatalf("%s: %v", c.json, err)
				}
			}
			r := bytes.NewReader(b)
			v, err := dec(r)
			if err != nil {
				t.Fatalf("%s (%s): the SDK cannot decode the row: %v", c.json, cid, err)
			}
			if r.Len() != 0 {
				t.Errorf("%s (%s): %d bytes after the row", c.json, cid, r.Len())
			}
			if got := plainValue(reflect.ValueOf(v)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s (%s):\n got %#v\nwant %#v", c.json, cid, got, c.want)
			}
		}
	}
}

// A value that is not the schema's JSON is an error naming the property
// at fault and what it holds.
func TestJSONReadErrors(t *testing.T) {
	s, err := translate.JSONRowSchema(orderSchema)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewJSONPayloadEncoder(rowCoders(t, s), "row", orderSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value string
		want  []string
	}{
		{`not json`, []string{"not JSON"}},
		{`{"name":"a","count":1} {}`, []string{"data after"}},
		{`[1]`, []string{"array", "want an object"}},
		{`{"count":1}`, []string{`"name"`, "missing or null"}},
		{`{"name":null,"count":1}`, []string{`"name"`, "missing or null"}},
		{`{"name":1,"count":1}`, []string{`"name"`, "number 1", "string"}},
		{`{"name":"a","count":"1"}`, []string{`"count"`, `string "1"`, "integer"}},
		{`{"name":"a","count":1.0}`, []string{`"count"`, "1.0", "integer"}},
		{`{"name":"a","count":1e2}`, []string{`"count"`, "1e2"}},
		{`{"name":"a","count":9223372036854775808}`, []string{`"count"`, "64 bits"}},
		{`{"name":"a","count":1,"price":"2"}`, []string{`"price"`, "a number"}},
		{`{"name":"a","count":1,"price":1e999}`, []string{`"price"`, "range"}},
		{`{"name":"a","count":1,"paid":"yes"}`, []string{`"paid"`, "boolean"}},
		{`{"name":"a","count":1,"tags":"x"}`, []string{`"tags"`, "an array"}},
		{`{"name":"a","count":1,"tags":["x",null]}`, []string{`"tags[1]"`, "null"}},
		{`{"name":"a","count":1,"tags":["x",2]}`, []string{`"tags[1]"`, "number 2"}},
		{`{"name":"a","count":1,"address":[]}`, []string{`"address"`, "an object"}},
		{`{"name":"a","count":1,"address":{"zip":1}}`, []string{`"address.city"`, "missing"}},
		{`{"name":"a","count":1,"address":{"city":"c","zip":"1"}}`, []string{`"address.zip"`, "integer"}},
	} {
		_, err := enc(nil, &kgo.Record{Value: []byte(c.value)})
		if err == nil {
			t.Errorf("%s: encoded", c.value)
			continue
		}
		errorSays(t, c.value, err, c.want...)
	}
	if _, err := enc(nil, &kgo.Record{}); err == nil || !strings.Contains(err.Error(), "tombstone") {
		t.Errorf("a tombstone: %v", err)
	}
}

// A JSON write's value of a row the Beam Go SDK encodes is the row's
// JSON object: fields in order, nulls as null, every type it writes;
// plain and length-prefixed.
func TestJSONWriteOfSDKRows(t *testing.T) {
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
		Tags    []string
		Scores  []*float64
		Address *inner
		Homes   []inner
	}
	s, err := schema.FromType(reflect.TypeOf(row{}))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := coder.RowEncoderForStruct(reflect.TypeOf(row{}))
	if err != nil {
		t.Fatal(err)
	}
	coders := rowCoders(t, s)
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		row  row
		want string
	}{
		{row{Name: "a\"\\\n\x01é", Count: math.MinInt64, Small: -7, Ratio: 0.25, Price: f(2), Paid: true,
			Tags: []string{"x", ""}, Scores: []*float64{f(1.5), nil}, Address: &inner{City: "Oslo", Zip: i(150)},
			Homes: []inner{{City: "Rome"}}},
			`{"Name":"a\"\\\n\u0001é","Count":-9223372036854775808,"Small":-7,"Ratio":0.25,"Price":2.0,"Paid":true,` +
				`"Tags":["x",""],"Scores":[1.5,null],"Address":{"City":"Oslo","Zip":150},"Homes":[{"City":"Rome","Zip":null}]}`},
		// The SDK writes nil slices as null fields.
		{row{Price: f(1e21), Tags: []string{}},
			`{"Name":"","Count":0,"Small":0,"Ratio":0.0,"Price":1e+21,"Paid":false,"Tags":[],"Scores":null,"Address":null,"Homes":null}`},
	} {
		var b bytes.Buffer
		if err := enc(c.row, &b); err != nil {
			t.Fatal(err)
		}
		for _, cid := range []string{"row", "lp"} {
			in := b.Bytes()
			if cid == "lp" {
				in = appendBytes(nil, in)
			}
			dec, err := NewJSONPayloadDecoder(coders, cid)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dec(in)
			if err != nil {
				t.Fatalf("%+v (%s): %v", c.row, cid, err)
			}
			if string(got) != c.want {
				t.Errorf("%+v (%s):\n got %s\nwant %s", c.row, cid, got, c.want)
			}
			if !json.Valid(got) {
				t.Errorf("%s is not JSON", got)
			}
		}
	}
	var b bytes.Buffer
	if err := enc(row{Price: f(math.NaN())}, &b); err != nil {
		t.Fatal(err)
	}
	dec, err := NewJSONPayloadDecoder(coders, "row")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dec(b.Bytes()); err == nil || !strings.Contains(err.Error(), `"Price"`) || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("a NaN price: %v", err)
	}
}

// A JSON write refuses, naming the field, rows with a field JSON has no
// form for here.
func TestJSONWriteRefusesTypes(t *testing.T) {
	for _, c := range []struct {
		t    *pipepb.FieldType
		want string
	}{
		{&pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: pipepb.AtomicType_BYTES}}, "BYTES"},
		{&pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: pipepb.AtomicType_INT16}}, "INT16"},
		{&pipepb.FieldType{TypeInfo: &pipepb.FieldType_MapType{MapType: &pipepb.MapType{
			KeyType:   &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: pipepb.AtomicType_STRING}},
			ValueType: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: pipepb.AtomicType_STRING}}}}}, "MAP"},
		{&pipepb.FieldType{TypeInfo: &pipepb.FieldType_LogicalType{LogicalType: &pipepb.LogicalType{Urn: "beam:logical_type:millis_instant:v1"}}}, "millis_instant"},
	} {
		s := &pipepb.Schema{Id: "s", Fields: []*pipepb.Field{
			{Name: "ok", Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: pipepb.AtomicType_STRING}}},
			{Name: "nested", Type: &pipepb.FieldType{TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{Schema: &pipepb.Schema{Id: "n",
				Fields: []*pipepb.Field{{Name: "bad", Type: c.t}}}}}}},
		}}
		_, err := NewJSONPayloadDecoder(rowCoders(t, s), "row")
		if err == nil || !strings.Contains(err.Error(), `"nested.bad"`) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
}

// Property: a value a JSON read takes comes back, through a JSON write of
// its row, as JSON that reads to the very same row.
func FuzzJSONRoundTrip(f *testing.F) {
	for _, seed := range []string{
		`{"name":"a","count":1,"price":2.5,"paid":true,"tags":["x"],"scores":[null,1],"address":{"city":"c","zip":2}}`,
		`{"name":"\u0000\ud800","count":-1,"price":-0,"scores":[]}`,
		`{"name":"x","count":5,"price":1.7976931348623157e308,"address":{"city":"\"\\"}}`,
	} {
		f.Add([]byte(seed))
	}
	s, err := translate.JSONRowSchema(orderSchema)
	if err != nil {
		f.Fatal(err)
	}
	coders := rowCoders(f, s)
	enc, err := NewJSONPayloadEncoder(coders, "row", orderSchema)
	if err != nil {
		f.Fatal(err)
	}
	dec, err := NewJSONPayloadDecoder(coders, "row")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(roundTrip(enc, dec))
}

// roundTrip is the property of a format's read enc and write dec: a value
// enc reads to a row writes (dec) as a value enc reads to the same row.
func roundTrip(enc PayloadEncoder, dec PayloadDecoder) func(*testing.T, []byte) {
	return func(t *testing.T, value []byte) {
		row, err := enc(nil, &kgo.Record{Value: value})
		if err != nil {
			return
		}
		out, err := dec(row)
		if err != nil {
			t.Fatalf("%q: its row does not write: %v", value, err)
		}
		again, err := enc(nil, &kgo.Record{Value: out})
		if err != nil {
			t.Fatalf("%q: wrote %q, which does not read: %v", value, out, err)
		}
		if !bytes.Equal(row, again) {
			t.Fatalf("%q: wrote %q, which reads to another row", value, out)
		}
	}
}
