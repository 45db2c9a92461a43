package kafkaio

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ksrunner/ksrunner/translate"
)

// Protobuf rows (translate.ProtoRowSchema, format PROTO of the Kafka
// schema transforms): a read parses each record's value as a message of
// the read's type (dynamicpb) and appends its fields as a row; a write
// writes each row as the message whose fields it sets by name, in the
// wire format, deterministically (protowrite.go).

// NewProtoPayloadEncoder returns the encoder of records' values, messages
// name of the FileDescriptorSet rowSchema (base64), as rows in coder cid
// of coders, possibly length-prefixed.
func NewProtoPayloadEncoder(coders map[string]*pipepb.Coder, cid, rowSchema, name string) (PayloadEncoder, error) {
	if _, err := readRowSchema(coders, cid, &translate.KafkaRead{PayloadRow: true, RowFormat: translate.KafkaRowProto, RowSchema: rowSchema, MessageName: name}); err != nil {
		return nil, err
	}
	md, err := protoDescriptor(rowSchema, name)
	if err != nil {
		return nil, err
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	reader := newProtoRowReader(md, map[protoreflect.FullName]*protoRowReader{})
	var scratch []byte
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		// A tombstone is the empty message, as protobuf reads no bytes.
		row, err := reader.appendRow(scratch[:0], r.Value)
		if err != nil {
			return nil, fmt.Errorf("not a %s message: %w", md.FullName(), err)
		}
		scratch = row
		return appendElement(dst, row, prefixed), nil
	}, nil
}

func protoDescriptor(rowSchema, name string) (protoreflect.MessageDescriptor, error) {
	set, err := translate.DecodeProtoSchema(rowSchema)
	if err != nil {
		return nil, err
	}
	return translate.ProtoMessage(set, name)
}

// appendScalarValue appends one value of field fd, of a kind whose row
// value is a scalar (not a message; an enum as its name, or its number
// when it has none), as its row value.
func appendScalarValue(dst []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if v.Bool() {
			return append(dst, 1)
		}
		return append(dst, 0)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return binary.AppendUvarint(dst, uint64(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return binary.AppendUvarint(dst, v.Uint())
	case protoreflect.FloatKind:
		return binary.BigEndian.AppendUint32(dst, math.Float32bits(float32(v.Float())))
	case protoreflect.DoubleKind:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(v.Float()))
	case protoreflect.StringKind:
		return appendBytes(dst, v.String())
	case protoreflect.BytesKind:
		return appendBytes(dst, v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendBytes(dst, string(ev.Name()))
		}
		return appendBytes(dst, strconv.Itoa(int(v.Enum())))
	}
	panic(fmt.Sprintf("field %s: kind %s has no scalar row value", fd.FullName(), fd.Kind()))
}
