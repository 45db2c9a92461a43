package kafkaio

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
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

// appendProtoMessage appends m as a row: a field with presence that m
// lacks is null.
func appendProtoMessage(dst []byte, m protoreflect.Message, path string) ([]byte, error) {
	fields := m.Descriptor().Fields()
	n := fields.Len()
	dst = appendRowHeader(dst, n, func(i int) bool { fd := fields.Get(i); return fd.HasPresence() && !m.Has(fd) })
	for i := range n {
		fd := fields.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		fp := fieldPath(path, string(fd.Name()))
		v := m.Get(fd)
		var err error
		switch {
		case fd.IsList():
			l := v.List()
			dst = binary.BigEndian.AppendUint32(dst, uint32(l.Len()))
			for j := range l.Len() {
				if dst, err = appendProtoValue(dst, fd, l.Get(j), fp+"["+strconv.Itoa(j)+"]"); err != nil {
					return nil, err
				}
			}
		case fd.IsMap():
			mp := v.Map()
			keys := make([]protoreflect.MapKey, 0, mp.Len())
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			slices.SortFunc(keys, compareMapKeys)
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(keys)))
			for _, k := range keys {
				kp := fp + "[" + k.String() + "]"
				if dst, err = appendProtoValue(dst, fd.MapKey(), k.Value(), kp); err != nil {
					return nil, err
				}
				if dst, err = appendProtoValue(dst, fd.MapValue(), mp.Get(k), kp); err != nil {
					return nil, err
				}
			}
		default:
			dst, err = appendProtoValue(dst, fd, v, fp)
		}
		if err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func compareMapKeys(a, b protoreflect.MapKey) int {
	switch x := a.Interface().(type) {
	case string:
		return cmp.Compare(x, b.Interface().(string))
	case bool:
		y := b.Interface().(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case int32, int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

// appendProtoValue appends one value of field fd (an element of a
// repeated one) as its row value.
func appendProtoValue(dst []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if v.Bool() {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return binary.AppendUvarint(dst, uint64(v.Int())), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return binary.AppendUvarint(dst, v.Uint()), nil
	case protoreflect.FloatKind:
		return binary.BigEndian.AppendUint32(dst, math.Float32bits(float32(v.Float()))), nil
	case protoreflect.DoubleKind:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(v.Float())), nil
	case protoreflect.StringKind:
		return appendBytes(dst, v.String()), nil
	case protoreflect.BytesKind:
		return appendBytes(dst, v.Bytes()), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendBytes(dst, string(ev.Name())), nil
		}
		return appendBytes(dst, strconv.Itoa(int(v.Enum()))), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendProtoMessage(dst, v.Message(), path)
	}
	return nil, fmt.Errorf("field %q: type %s has no row value", path, fd.Kind())
}
