package kafkaio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/translate"
)

// Encoder encodes a Kafka key or value (nil: null) of one format in a
// coder, appending to dst.
type Encoder func(dst, b []byte) ([]byte, error)

// ErrNull is the error of an Encoder given a Kafka null under a coder that
// is not nullable.
var ErrNull = errors.New("null, and the coder is not nullable")

// NewEncoder returns the encoder of a format in coder cid of coders.
func NewEncoder(coders map[string]*pipepb.Coder, cid, format string) (Encoder, error) {
	c := coders[cid]
	if c == nil {
		return nil, fmt.Errorf("coder %q is not defined", cid)
	}
	urn := c.GetSpec().GetUrn()
	inner := func() (Encoder, error) {
		if len(c.GetComponentCoderIds()) != 1 {
			return nil, fmt.Errorf("coder %s needs one component", urn)
		}
		return NewEncoder(coders, c.GetComponentCoderIds()[0], format)
	}
	switch {
	case urn == URNLengthPrefix:
		in, err := inner()
		if err != nil {
			return nil, err
		}
		return func(dst, b []byte) ([]byte, error) {
			body, err := in(nil, b)
			if err != nil {
				return nil, err
			}
			return append(binary.AppendUvarint(dst, uint64(len(body))), body...), nil
		}, nil
	case urn == URNNullable:
		in, err := inner()
		if err != nil {
			return nil, err
		}
		return func(dst, b []byte) ([]byte, error) {
			if b == nil {
				return append(dst, 0), nil
			}
			return in(append(dst, 1), b)
		}, nil
	case urn == URNBytes && (format == translate.KafkaByteArray || format == translate.KafkaString),
		urn == URNStringUTF8 && format == translate.KafkaString:
		check := urn == URNStringUTF8 || format == translate.KafkaString
		return func(dst, b []byte) ([]byte, error) {
			if b == nil {
				return nil, ErrNull
			}
			if check && !utf8.Valid(b) {
				return nil, fmt.Errorf("%d bytes that are not UTF-8 (String deserializer)", len(b))
			}
			return append(binary.AppendUvarint(dst, uint64(len(b))), b...), nil
		}, nil
	case urn == URNVarInt && format == translate.KafkaLong:
		return func(dst, b []byte) ([]byte, error) {
			if b == nil {
				return nil, ErrNull
			}
			if len(b) != 8 {
				return nil, fmt.Errorf("%d bytes, the Long deserializer needs 8", len(b))
			}
			return binary.AppendUvarint(dst, binary.BigEndian.Uint64(b)), nil
		}, nil
	case urn == URNVarInt && format == translate.KafkaInteger:
		return func(dst, b []byte) ([]byte, error) {
			if b == nil {
				return nil, ErrNull
			}
			if len(b) != 4 {
				return nil, fmt.Errorf("%d bytes, the Integer deserializer needs 4", len(b))
			}
			return binary.AppendUvarint(dst, uint64(int64(int32(binary.BigEndian.Uint32(b))))), nil
		}, nil
	}
	return nil, fmt.Errorf("coder %s does not encode the Kafka format %s", urn, format)
}

// Decoder decodes an encoded key or value (its whole encoding) to a
// Kafka key or value of one format (nil: null).
type Decoder func(b []byte) ([]byte, error)

// NewDecoder returns the decoder of coder cid of coders to a format.
func NewDecoder(coders map[string]*pipepb.Coder, cid, format string) (Decoder, error) {
	c := coders[cid]
	if c == nil {
		return nil, fmt.Errorf("coder %q is not defined", cid)
	}
	urn := c.GetSpec().GetUrn()
	inner := func() (Decoder, error) {
		if len(c.GetComponentCoderIds()) != 1 {
			return nil, fmt.Errorf("coder %s needs one component", urn)
		}
		return NewDecoder(coders, c.GetComponentCoderIds()[0], format)
	}
	uvarint := func(b []byte) (uint64, []byte, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, nil, fmt.Errorf("bad varint")
		}
		return v, b[n:], nil
	}
	lengthPrefixed := func(b []byte) ([]byte, error) {
		l, rest, err := uvarint(b)
		if err != nil {
			return nil, err
		}
		if uint64(len(rest)) != l {
			return nil, fmt.Errorf("length %d, %d bytes follow", l, len(rest))
		}
		return rest, nil
	}
	switch {
	case urn == URNLengthPrefix:
		in, err := inner()
		if err != nil {
			return nil, err
		}
		return func(b []byte) ([]byte, error) {
			body, err := lengthPrefixed(b)
			if err != nil {
				return nil, err
			}
			return in(body)
		}, nil
	case urn == URNNullable:
		in, err := inner()
		if err != nil {
			return nil, err
		}
		return func(b []byte) ([]byte, error) {
			if len(b) == 0 {
				return nil, fmt.Errorf("empty nullable")
			}
			if b[0] == 0 {
				return nil, nil
			}
			return in(b[1:])
		}, nil
	case urn == URNBytes && (format == translate.KafkaByteArray || format == translate.KafkaString),
		urn == URNStringUTF8 && format == translate.KafkaString:
		return func(b []byte) ([]byte, error) {
			v, err := lengthPrefixed(b)
			if v == nil && err == nil {
				v = []byte{} // empty, not null
			}
			return v, err
		}, nil
	case urn == URNVarInt && format == translate.KafkaLong:
		return func(b []byte) ([]byte, error) {
			v, rest, err := uvarint(b)
			if err != nil || len(rest) != 0 {
				return nil, fmt.Errorf("bad varint")
			}
			return binary.BigEndian.AppendUint64(nil, v), nil
		}, nil
	case urn == URNVarInt && format == translate.KafkaInteger:
		return func(b []byte) ([]byte, error) {
			v, rest, err := uvarint(b)
			if err != nil || len(rest) != 0 {
				return nil, fmt.Errorf("bad varint")
			}
			// Sign-extended (Go, Python) or not (Java): either way the
			// low 32 bits are the int.
			if i := int64(v); i < -1<<31 || i >= 1<<32 {
				return nil, fmt.Errorf("%d does not fit the Integer serializer", i)
			}
			return binary.BigEndian.AppendUint32(nil, uint32(v)), nil
		}, nil
	}
	return nil, fmt.Errorf("coder %s does not encode the Kafka format %s", urn, format)
}

// The coders a Kafka format is encoded in.
const (
	URNLengthPrefix = "beam:coder:length_prefix:v1"
	URNNullable     = "beam:coder:nullable:v1"
	URNBytes        = "beam:coder:bytes:v1"
	URNStringUTF8   = "beam:coder:string_utf8:v1"
	URNVarInt       = "beam:coder:varint:v1"
)
