package kafkaio

import (
	"encoding/binary"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/translate"
)

// The Kafka encoders and decoders over nullable and length-prefixed coders
// and the Integer format.
func TestKafkaCoders(t *testing.T) {
	coders := map[string]*pipepb.Coder{
		"b":    {Spec: &pipepb.FunctionSpec{Urn: URNBytes}},
		"n":    {Spec: &pipepb.FunctionSpec{Urn: URNNullable}, ComponentCoderIds: []string{"b"}},
		"lpn":  {Spec: &pipepb.FunctionSpec{Urn: URNLengthPrefix}, ComponentCoderIds: []string{"n"}},
		"v":    {Spec: &pipepb.FunctionSpec{Urn: URNVarInt}},
		"real": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:double:v1"}},
	}
	for _, tc := range []struct {
		coder, format string
		in            []byte
		enc           []byte
	}{
		{"lpn", translate.KafkaByteArray, nil, []byte{1, 0}},
		{"lpn", translate.KafkaByteArray, []byte("xy"), []byte{4, 1, 2, 'x', 'y'}},
		{"lpn", translate.KafkaByteArray, []byte{}, []byte{2, 1, 0}},
		{"v", translate.KafkaInteger, []byte{0xff, 0xff, 0xff, 0xfe}, binary.AppendUvarint(nil, uint64(1<<64-2))},
		{"v", translate.KafkaInteger, []byte{0, 0, 1, 0}, []byte{0x80, 0x02}},
	} {
		enc, err := NewEncoder(coders, tc.coder, tc.format)
		if err != nil {
			t.Fatal(err)
		}
		got, err := enc(nil, tc.in)
		if err != nil || string(got) != string(tc.enc) {
			t.Errorf("%s %s encode %v = %v, %v; want %v", tc.coder, tc.format, tc.in, got, err, tc.enc)
		}
		dec, err := NewDecoder(coders, tc.coder, tc.format)
		if err != nil {
			t.Fatal(err)
		}
		back, err := dec(got)
		if err != nil || string(back) != string(tc.in) || (back == nil) != (tc.in == nil) {
			t.Errorf("%s %s decode %v = %v, %v; want %v", tc.coder, tc.format, got, back, err, tc.in)
		}
	}
	if _, err := NewEncoder(coders, "real", translate.KafkaLong); err == nil {
		t.Error("a double coder encodes Long")
	}
}
