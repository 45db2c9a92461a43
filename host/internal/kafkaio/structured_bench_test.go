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

// The cost of reading one value of each structured format into a row,
// and of writing that row back as a value: go test -bench 'Read|Write'
// ./host/internal/kafkaio (one record of a dozen fields; the figures are
// in the design notes).
func BenchmarkReadJSON(b *testing.B)   { benchRead(b, jsonBenchCase(b)) }
func BenchmarkReadAvro(b *testing.B)   { benchRead(b, avroBenchCase(b)) }
func BenchmarkReadProto(b *testing.B)  { benchRead(b, protoBenchCase(b)) }
func BenchmarkWriteJSON(b *testing.B)  { benchWrite(b, jsonBenchCase(b)) }
func BenchmarkWriteAvro(b *testing.B)  { benchWrite(b, avroBenchCase(b)) }
func BenchmarkWriteProto(b *testing.B) { benchWrite(b, protoBenchCase(b)) }

// structuredBenchCase is one format's read and write of one order value.
type structuredBenchCase struct {
	enc   PayloadEncoder
	dec   PayloadDecoder
	value []byte
}

func jsonBenchCase(b *testing.B) structuredBenchCase {
	s, err := translate.JSONRowSchema(orderSchema)
	if err != nil {
		b.Fatal(err)
	}
	enc, err := NewJSONPayloadEncoder(rowCoders(b, s), "row", orderSchema)
	if err != nil {
		b.Fatal(err)
	}
	dec, err := NewJSONPayloadDecoder(rowCoders(b, s), "row")
	if err != nil {
		b.Fatal(err)
	}
	return structuredBenchCase{enc, dec, []byte(`{"name":"a","count":1,"price":2.5,"paid":true,"tags":["x","y"],"scores":[1,null,-0.5],"address":{"city":"Oslo","zip":150}}`)}
}

func avroBenchCase(b *testing.B) structuredBenchCase {
	s, err := translate.AvroRowSchema(orderAvro)
	if err != nil {
		b.Fatal(err)
	}
	enc, err := NewAvroPayloadEncoder(rowCoders(b, s), "row", orderAvro)
	if err != nil {
		b.Fatal(err)
	}
	dec, err := NewAvroPayloadDecoder(rowCoders(b, s), "row")
	if err != nil {
		b.Fatal(err)
	}
	note := "n"
	in, _ := orderDatum(&note, map[string]any{"city": "Oslo", "zip": map[string]any{"int": int32(150)}})
	datum, err := avro.Marshal(avro.MustParse(orderAvro), in)
	if err != nil {
		b.Fatal(err)
	}
	return structuredBenchCase{enc, dec, datum}
}

func protoBenchCase(b *testing.B) structuredBenchCase {
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
	dec, err := NewProtoPayloadDecoder(rowCoders(b, s), "row", rowSchema, "shop.Order")
	if err != nil {
		b.Fatal(err)
	}
	m, _ := orderMessage(nil, md)
	value, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return structuredBenchCase{enc, dec, value}
}

func benchRead(b *testing.B, c structuredBenchCase) {
	r := &kgo.Record{Value: c.value}
	var dst []byte
	b.SetBytes(int64(len(c.value)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = c.enc(dst[:0], r); err != nil {
			b.Fatal(err)
		}
	}
}

// benchWrite measures writing the row that c reads of its value.
func benchWrite(b *testing.B, c structuredBenchCase) {
	row, err := c.enc(nil, &kgo.Record{Value: c.value})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(row)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.dec(row); err != nil {
			b.Fatal(err)
		}
	}
}
