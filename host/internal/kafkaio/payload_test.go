package kafkaio

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx/schema"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// A payload row the encoder writes decodes with the Beam Go SDK's row
// coder (of the schema's Go type) to the record's value, for both
// formats, plain and length-prefixed; a tombstone is an error naming the
// record.
func TestPayloadRowDecodesWithSDK(t *testing.T) {
	for _, format := range []string{translate.KafkaByteArray, translate.KafkaString} {
		s := translate.KafkaPayloadSchema(format)
		dec := sdkRowDecoder(t, s)
		coders := rowCoders(t, s)
		for _, cid := range []string{"row", "lp"} {
			enc, err := NewPayloadEncoder(coders, cid, format)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range [][]byte{[]byte("hello"), {}, bytes.Repeat([]byte{0xff}, 300)} {
				b, err := enc([]byte("x"), &kgo.Record{Value: v})
				if err != nil {
					t.Fatal(err)
				}
				if b[0] != 'x' {
					t.Fatalf("%s %s: dst overwritten", format, cid)
				}
				b = b[1:]
				if cid == "lp" {
					l, n := binary.Uvarint(b)
					if n <= 0 || int(l) != len(b)-n {
						t.Fatalf("%s: length prefix %d of %d bytes", format, l, len(b)-n)
					}
					b = b[n:]
				}
				got, err := dec(bytes.NewReader(b))
				if err != nil {
					t.Fatalf("%s %s: %v", format, cid, err)
				}
				f := reflect.Indirect(reflect.ValueOf(got)).Field(0)
				var payload []byte
				if format == translate.KafkaString {
					payload = []byte(f.String())
				} else {
					payload = f.Bytes()
				}
				if !bytes.Equal(payload, v) {
					t.Errorf("%s %s: payload %q, want %q", format, cid, payload, v)
				}
			}
			_, err = enc(nil, &kgo.Record{Topic: "in", Partition: 1, Offset: 7})
			if err == nil || !strings.Contains(err.Error(), "topic in partition 1 offset 7") {
				t.Errorf("%s %s: tombstone: %v", format, cid, err)
			}
		}
	}
}

type rawRow struct {
	Data []byte `beam:"data"`
}

// A row of one BYTES field the Beam Go SDK encodes decodes to its value;
// a row of another shape is refused when the decoder is made.
func TestPayloadDecoderDecodesSDKRows(t *testing.T) {
	rt := reflect.TypeOf(rawRow{})
	s, err := schema.FromType(rt)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := coder.RowEncoderForStruct(rt)
	if err != nil {
		t.Fatal(err)
	}
	coders := rowCoders(t, s)
	for _, cid := range []string{"row", "lp"} {
		dec, err := NewPayloadDecoder(coders, cid)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range [][]byte{[]byte("abc"), {}, bytes.Repeat([]byte("v"), 200)} {
			var buf bytes.Buffer
			if err := enc(rawRow{Data: v}, &buf); err != nil {
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
			if got == nil || !bytes.Equal(got, v) {
				t.Errorf("%s: value %q, want %q", cid, got, v)
			}
			if _, err := dec(b[:len(b)-1]); err == nil {
				t.Errorf("%s: a row cut short decoded", cid)
			}
		}
	}
	for _, row := range []any{minimalRow{}, struct {
		S string `beam:"s"`
	}{}} {
		s, err := schema.FromType(reflect.TypeOf(row))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewPayloadDecoder(rowCoders(t, s), "row"); err == nil || !strings.Contains(err.Error(), "exactly one BYTES field") {
			t.Errorf("%T: %v", row, err)
		}
	}
}
