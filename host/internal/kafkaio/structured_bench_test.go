package kafkaio

import (
	"encoding/base64"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/translate"
)

// The cost of reading one value of each structured format into a row:
// go test -bench Read ./host/internal/kafkaio (one record of a dozen
// fields; the figures are in the design notes).
func BenchmarkReadJSON(b *testing.B) {
	s, err := translate.JSONRowSchema(orderSchema)
	if err != nil {
		b.Fatal(err)
	}
	enc, err := NewJSONPayloadEncoder(rowCoders(b, s), "row", orderSchema)
	if err != nil {
		b.Fatal(err)
	}
	benchRead(b, enc, []byte(`{"name":"a","count":1,"price":2.5,"paid":true,"tags":["x","y"],"scores":[1,null,-0.5],"address":{"city":"Oslo","zip":150}}`))
}

func BenchmarkReadAvro(b *testing.B) {
	s, err := translate.AvroRowSchema(orderAvro)
	if err != nil {
		b.Fatal(err)
	}
	enc, err := NewAvroPayloadEncoder(rowCoders(b, s), "row", orderAvro)
	if err != nil {
		b.Fatal(err)
	}
	note := "n"
	in, _ := orderDatum(&note, map[string]any{"city": "Oslo", "zip": map[string]any{"int": int32(150)}})
	datum, err := avro.Marshal(avro.MustParse(orderAvro), in)
	if err != nil {
		b.Fatal(err)
	}
	benchRead(b, enc, datum)
}

func BenchmarkReadProto(b *testing.B) {
	set, md := testkit.OrderProto(b)
	rowSchema := base64.StdEncoding.EncodeToString(set)
	s, err := translate.ProtoRowSchema(rowSchema, "shop.Order")
	if err != nil {
		b.Fatal(err)
	}
	enc, err := NewProtoPayloadEncoder(rowCoders(b, s), "row", rowSchema, "shop.Order")
	if err != nil {
		b.Fatal(err)
	}
	m, _ := orderMessage(nil, md)
	value, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	benchRead(b, enc, value)
}

func benchRead(b *testing.B, enc PayloadEncoder, value []byte) {
	r := &kgo.Record{Value: value}
	var dst []byte
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = enc(dst[:0], r); err != nil {
			b.Fatal(err)
		}
	}
}
