package translate

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Protobuf rows: the Kafka schema transforms' format PROTO, values being
// serialized messages of one type of a FileDescriptorSet (Java's
// file_descriptor_path and message_name; the expansion reads the file and
// the spec carries its bytes, base64, as RowSchema, and the message's full
// name as MessageName).
//
// ProtoRowSchema maps the message as Beam's ProtoSchemaTranslator does
// where Beam has the type: fields in declaration order; bool, int32,
// sint32, sfixed32, int64, sint64, sfixed64, float, double, string and
// bytes are BOOLEAN, INT32, INT32, INT32, INT64, INT64, INT64, FLOAT,
// DOUBLE, STRING and BYTES; messages are rows, repeated fields arrays, maps
// MAPs. Where Java makes a logical type, ksrunner gives a plain one that
// holds every value: uint32 and fixed32 are INT64, an enum is its value's
// name (STRING; a number the enum does not name, legal in proto3, as its
// decimal digits), the members of a oneof are fields of their own. A field
// with presence (a message, a oneof member, an optional field) is
// nullable, an implicit proto3 scalar is not (absent, it is its default).
// uint64 and fixed64 (beyond INT64), and recursive messages, are errors
// naming the field.

// ProtoMessage returns the descriptor of message name in the
// FileDescriptorSet whose serialized bytes set holds: a full name
// (shop.Order), or the name of a top-level message of one file (Order), as
// Java's ProtoByteUtils finds it.
func ProtoMessage(set []byte, name string) (protoreflect.MessageDescriptor, error) {
	fds := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(set, fds); err != nil {
		return nil, fmt.Errorf("protobuf descriptor: not a FileDescriptorSet: %w", err)
	}
	files, err := protodesc.NewFiles(fds)
	if err != nil {
		return nil, fmt.Errorf("protobuf descriptor: %w", err)
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		var found []protoreflect.MessageDescriptor
		files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
			if md := fd.Messages().ByName(protoreflect.Name(name)); md != nil {
				found = append(found, md)
			}
			return true
		})
		switch len(found) {
		case 0:
			return nil, fmt.Errorf("protobuf descriptor: no message %q", name)
		case 1:
			return found[0], nil
		}
		return nil, fmt.Errorf("protobuf descriptor: message %q: %d files have one (%s, %s): give its full name", name, len(found), found[0].FullName(), found[1].FullName())
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("protobuf descriptor: %q is not a message", name)
	}
	return md, nil
}

// DecodeProtoSchema returns the FileDescriptorSet bytes of a PROTO spec's
// RowSchema (base64).
func DecodeProtoSchema(rowSchema string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(rowSchema)
	if err != nil {
		return nil, fmt.Errorf("protobuf descriptor: not base64: %w", err)
	}
	return b, nil
}

// ProtoRowSchema returns the row schema of the messages of a PROTO read or
// write: message name of the FileDescriptorSet in rowSchema (base64).
func ProtoRowSchema(rowSchema, name string) (*pipepb.Schema, error) {
	set, err := DecodeProtoSchema(rowSchema)
	if err != nil {
		return nil, err
	}
	md, err := ProtoMessage(set, name)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append(set, name...))
	return protoMessageSchema(md, "", "ksrunner-kafka-proto-"+hex.EncodeToString(sum[:8]), map[protoreflect.FullName]bool{})
}

func protoMessageSchema(md protoreflect.MessageDescriptor, path, id string, visiting map[protoreflect.FullName]bool) (*pipepb.Schema, error) {
	if visiting[md.FullName()] {
		return nil, fmt.Errorf("protobuf descriptor: field %q: message %s contains itself: recursive messages have no row type", path, md.FullName())
	}
	visiting[md.FullName()] = true
	defer delete(visiting, md.FullName())
	s := &pipepb.Schema{Id: id}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		fp := string(fd.Name())
		if path != "" {
			fp = path + "." + fp
		}
		t, err := ProtoFieldType(fd, fp, fmt.Sprintf("%s-%d", id, i), visiting)
		if err != nil {
			return nil, err
		}
		s.Fields = append(s.Fields, &pipepb.Field{Name: string(fd.Name()), Type: t, Id: int32(i)})
	}
	return s, nil
}

// ProtoFieldType is the row type of a message's field (visiting: the
// messages being mapped, to refuse recursion).
func ProtoFieldType(fd protoreflect.FieldDescriptor, path, id string, visiting map[protoreflect.FullName]bool) (*pipepb.FieldType, error) {
	switch {
	case fd.IsMap():
		k, err := protoValueType(fd.MapKey(), path+"[key]", id, visiting)
		if err != nil {
			return nil, err
		}
		v, err := protoValueType(fd.MapValue(), path+"[]", id, visiting)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_MapType{MapType: &pipepb.MapType{KeyType: k, ValueType: v}}}, nil
	case fd.IsList():
		e, err := protoValueType(fd, path+"[]", id, visiting)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_ArrayType{ArrayType: &pipepb.ArrayType{ElementType: e}}}, nil
	}
	t, err := protoValueType(fd, path, id, visiting)
	if err != nil {
		return nil, err
	}
	t.Nullable = fd.HasPresence()
	return t, nil
}

// protoValueType is the row type of one value of a field (an element of a
// repeated one), not nullable.
func protoValueType(fd protoreflect.FieldDescriptor, path, id string, visiting map[protoreflect.FullName]bool) (*pipepb.FieldType, error) {
	atomic := func(a pipepb.AtomicType) (*pipepb.FieldType, error) {
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: a}}, nil
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return atomic(pipepb.AtomicType_BOOLEAN)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return atomic(pipepb.AtomicType_INT32)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return atomic(pipepb.AtomicType_INT64)
	case protoreflect.FloatKind:
		return atomic(pipepb.AtomicType_FLOAT)
	case protoreflect.DoubleKind:
		return atomic(pipepb.AtomicType_DOUBLE)
	case protoreflect.StringKind, protoreflect.EnumKind:
		return atomic(pipepb.AtomicType_STRING)
	case protoreflect.BytesKind:
		return atomic(pipepb.AtomicType_BYTES)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		s, err := protoMessageSchema(fd.Message(), path, id, visiting)
		if err != nil {
			return nil, err
		}
		return &pipepb.FieldType{TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{Schema: s}}}, nil
	}
	return nil, fmt.Errorf("protobuf descriptor: field %q: type %s has no row type that holds its values (uint64 and fixed64 exceed INT64)", path, fd.Kind())
}

// CheckProtoWriteSchema checks that rows of s can be written as messages
// of a PROTO write (message name of the descriptor set rowSchema): each
// row field names a field of the message and has its row type, its
// nullability aside (a null leaves the field unset). Nested rows must be
// their messages' rows as ProtoRowSchema gives them.
func CheckProtoWriteSchema(s *pipepb.Schema, rowSchema, name string) error {
	set, err := DecodeProtoSchema(rowSchema)
	if err != nil {
		return err
	}
	md, err := ProtoMessage(set, name)
	if err != nil {
		return err
	}
	for _, f := range s.GetFields() {
		fd := md.Fields().ByName(protoreflect.Name(f.GetName()))
		if fd == nil {
			return fmt.Errorf("a Kafka write of format PROTO cannot write field %q: message %s has no such field", f.GetName(), md.FullName())
		}
		want, err := ProtoFieldType(fd, f.GetName(), "w", map[protoreflect.FullName]bool{})
		if err != nil {
			return err
		}
		got := proto.Clone(f.GetType()).(*pipepb.FieldType)
		got.Nullable = want.GetNullable()
		one := func(t *pipepb.FieldType) *pipepb.Schema {
			return &pipepb.Schema{Fields: []*pipepb.Field{{Name: f.GetName(), Type: t}}}
		}
		if err := SameRowLayout(one(got), one(want)); err != nil {
			return fmt.Errorf("a Kafka write of format PROTO cannot write field %q as %s's field %s: %w", f.GetName(), md.FullName(), fd.Kind(), err)
		}
	}
	return nil
}
