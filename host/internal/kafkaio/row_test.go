package kafkaio

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx/schema"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate"
)

// rowCoders are a row coder of s, "row", and its length-prefixed form,
// "lp", as translate's wire coders wrap it.
func rowCoders(t testing.TB, s *pipepb.Schema) map[string]*pipepb.Coder {
	t.Helper()
	b, err := proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*pipepb.Coder{
		"row": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:row:v1", Payload: b}},
		"lp":  {Spec: &pipepb.FunctionSpec{Urn: URNLengthPrefix}, ComponentCoderIds: []string{"row"}},
	}
}

// sdkRowDecoder is the Beam Go SDK's row decoder of s (of the schema's Go
// type), the reference the tests check ksrunner's rows against.
func sdkRowDecoder(t testing.TB, s *pipepb.Schema) func(io.Reader) (any, error) {
	t.Helper()
	rt, err := schema.ToType(s)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := coder.RowDecoderForStruct(rt)
	if err != nil {
		t.Fatal(err)
	}
	return dec
}

// errorSays reports, as test errors, each of words that err (the error of
// case name) does not contain.
func errorSays(t testing.TB, name string, err error, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not say %q", name, err, w)
		}
	}
}

// plainValue turns a value the SDK's row decoder made into nil, scalars,
// []byte, []any (lists) and map[string]any (rows), for comparing.
func plainValue(v reflect.Value) any {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		m := map[string]any{}
		for i := range v.NumField() {
			name := v.Type().Field(i).Tag.Get("beam")
			if name == "" {
				name = v.Type().Field(i).Name
			}
			m[name] = plainValue(v.Field(i))
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Bytes()
		}
		l := []any{}
		for i := range v.Len() {
			l = append(l, plainValue(v.Index(i)))
		}
		return l
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.String:
		return v.String()
	}
	return v.Interface()
}

// The with-metadata record row, decoded by the Beam Go SDK's own row coder
// (the schema's Go type, schema.ToType): every field is the record's, for
// null and empty keys and values, headers with null values, none, many (a
// length prefix over 127 bytes) and both timestamp types; length-prefixed
// alike.
func TestRecordRowDecodesWithSDK(t *testing.T) {
	dec := sdkRowDecoder(t, translate.KafkaRecordSchema())
	coders := rowCoders(t, translate.KafkaRecordSchema())
	lp, err := NewRecordEncoder(coders, "lp")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewRecordEncoder(coders, "row")
	if err != nil {
		t.Fatal(err)
	}
	var many []kgo.RecordHeader
	for i := range 40 {
		many = append(many, kgo.RecordHeader{Key: fmt.Sprintf("h%d", i), Value: bytes.Repeat([]byte{byte(i)}, i)})
	}
	logAppend := kgo.RecordAttrs{}
	// kgo's attrs are unexported: a fetched record's, read back below.
	*(*uint8)(reflect.ValueOf(&logAppend).UnsafePointer()) = 0b1000
	for _, r := range []*kgo.Record{
		{Topic: "t", Partition: 3, Offset: 12345678901, Timestamp: time.UnixMilli(1700000000123), Key: []byte("k"), Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("x")}, {Key: "b"}, {Key: "c", Value: []byte{}}}},
		{Topic: "topic-2", Partition: 0, Offset: 0, Timestamp: time.UnixMilli(0), Attrs: logAppend},
		{Topic: "t", Partition: 1, Offset: 7, Timestamp: time.UnixMilli(5), Key: []byte{}, Value: bytes.Repeat([]byte("v"), 300), Headers: many},
	} {
		for name, enc := range map[string]RecordEncoder{"row": plain, "lp": lp} {
			b := enc([]byte("prefix"), r)
			if !bytes.HasPrefix(b, []byte("prefix")) {
				t.Fatalf("%s: the encoder overwrote dst", name)
			}
			b = b[len("prefix"):]
			if name == "lp" {
				l, n := binary.Uvarint(b)
				if n <= 0 || int(l) != len(b)-n {
					t.Fatalf("lp: length prefix %d (%d bytes) over %d bytes", l, n, len(b)-n)
				}
				b = b[n:]
			}
			v, err := dec(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: the SDK's row coder: %v", name, err)
			}
			headers := []any{}
			for _, h := range r.Headers {
				var hv any
				if h.Value != nil {
					hv = h.Value
				}
				headers = append(headers, map[string]any{"key": h.Key, "value": hv})
			}
			var key, value any
			if r.Key != nil {
				key = r.Key
			}
			if r.Value != nil {
				value = r.Value
			}
			typeID, typeName := int64(0), "CreateTime"
			if r.Attrs == logAppend {
				typeID, typeName = 1, "LogAppendTime"
			}
			want := map[string]any{
				"topic": r.Topic, "partition": int64(r.Partition), "offset": r.Offset, "timestamp": r.Timestamp.UnixMilli(),
				"key": key, "value": value, "headers": headers, "timestampTypeId": typeID, "timestampTypeName": typeName,
			}
			if got := plainValue(reflect.ValueOf(v)); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: the SDK decoded\n %v\nwant\n %v", name, got, want)
			}
		}
	}
	if _, err := NewRecordEncoder(rowCoders(t, &pipepb.Schema{Fields: translate.KafkaRecordSchema().Fields[:8]}), "row"); err == nil {
		t.Error("NewRecordEncoder accepted a row without timestampTypeName")
	}
}

type header struct {
	Key   string `beam:"key"`
	Value []byte `beam:"value"`
}

type nested struct {
	A float64 `beam:"a"`
	B []string
}

// writeRow is a write-with-headers row in a user's order, with fields the
// write ignores between its own.
type writeRow struct {
	Timestamp *int64           `beam:"timestamp"`
	Extra     map[string]int64 `beam:"extra"`
	Key       []byte           `beam:"key"`
	Nested    nested           `beam:"nested"`
	Headers   []header         `beam:"headers"`
	Value     []byte           `beam:"value"`
	Flag      bool             `beam:"flag"`
	Topic     *string          `beam:"topic"`
	Partition *int32           `beam:"partition"`
}

// minimalRow has key and value only.
type minimalRow struct {
	Key   []byte `beam:"key"`
	Value []byte `beam:"value"`
}

// Write-with-headers rows encoded by the Beam Go SDK's row coder decode to
// the record they describe: key, value, headers, and topic, partition and
// timestamp when set, whatever the fields' order and whatever other fields
// the row has.
func TestWriteRowDecodesSDKRows(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	i32 := func(v int32) *int32 { return &v }
	str := func(v string) *string { return &v }
	for _, tc := range []struct {
		name string
		row  any
		want WriteRow
	}{
		{"all", writeRow{Timestamp: i64(1700000000123), Extra: map[string]int64{"x": -1, "y": 300}, Key: []byte("k"),
			Nested: nested{A: 1.5, B: []string{"p", "q"}}, Headers: []header{{"a", []byte("x")}, {"b", nil}}, Value: []byte("v"),
			Flag: true, Topic: str("other"), Partition: i32(2)},
			WriteRow{Record: kgo.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(1700000000123),
				Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("x")}, {Key: "b"}}},
				Topic: "other", Partition: 2, HasPartition: true, HasTimestamp: true}},
		{"nulls", writeRow{}, WriteRow{}},
		{"empty", writeRow{Key: []byte{}, Value: []byte{}, Headers: []header{}}, WriteRow{Record: kgo.Record{Key: []byte{}, Value: []byte{}}}},
		{"minimal", minimalRow{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 200)},
			WriteRow{Record: kgo.Record{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 200)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := reflect.TypeOf(tc.row)
			s, err := schema.FromType(rt)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := coder.RowEncoderForStruct(rt)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := enc(tc.row, &buf); err != nil {
				t.Fatal(err)
			}
			coders := rowCoders(t, s)
			for _, cid := range []string{"row", "lp"} {
				dec, err := NewWriteRowDecoder(coders, cid)
				if err != nil {
					t.Fatal(err)
				}
				b := buf.Bytes()
				if cid == "lp" {
					b = append(binary.AppendUvarint(nil, uint64(len(b))), b...)
				}
				got, err := dec(b)
				if err != nil {
					t.Fatalf("%s: %v", cid, err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s: decoded\n %+v\nwant\n %+v", cid, got, tc.want)
				}
				if _, err := dec(b[:len(b)-1]); err == nil {
					t.Errorf("%s: a row cut short decoded", cid)
				}
			}
		})
	}
}

// A write row's partition out of range and a header without a key fail,
// naming the field; a schema without key or with a STRING value is
// refused when the decoder is made.
func TestWriteRowErrors(t *testing.T) {
	type badHeader struct {
		Key   *string `beam:"key"`
		Value []byte  `beam:"value"`
	}
	type row struct {
		Key       []byte      `beam:"key"`
		Value     []byte      `beam:"value"`
		Partition *int64      `beam:"partition"`
		Headers   []badHeader `beam:"headers"`
	}
	neg := int64(-1)
	for _, tc := range []struct {
		row  row
		want string
	}{
		{row{Partition: &neg}, `field "partition": partition -1`},
		{row{Headers: []badHeader{{Value: []byte("x")}}}, `field "headers": a header without a key`},
	} {
		s, err := schema.FromType(reflect.TypeOf(tc.row))
		if err != nil {
			t.Fatal(err)
		}
		enc, err := coder.RowEncoderForStruct(reflect.TypeOf(tc.row))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := enc(tc.row, &buf); err != nil {
			t.Fatal(err)
		}
		dec, err := NewWriteRowDecoder(rowCoders(t, s), "row")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dec(buf.Bytes()); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%+v: error %v, want one containing %q", tc.row, err, tc.want)
		}
	}
	for _, rt := range []reflect.Type{
		reflect.TypeOf(struct {
			Value []byte `beam:"value"`
		}{}),
		reflect.TypeOf(struct {
			Key   []byte `beam:"key"`
			Value string `beam:"value"`
		}{}),
	} {
		s, err := schema.FromType(rt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewWriteRowDecoder(rowCoders(t, s), "row"); err == nil {
			t.Errorf("%v: a write row decoder", rt)
		}
	}
}
