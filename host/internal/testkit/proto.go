package testkit

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// OrderProto is shop.Order, a proto3 message of most kinds of field, as
// the FileDescriptorSet protoc would write for its file and as its
// descriptor:
//
//	syntax = "proto3";
//	package shop;
//	enum State { NEW = 0; PAID = 1; }
//	message Address { string city = 1; optional int32 zip = 2; }
//	message Order {
//	  string name = 1; int64 count = 2; sint32 small = 3; uint32 big = 4;
//	  float ratio = 5; optional double price = 6; bool paid = 7; bytes blob = 8;
//	  repeated string tags = 9; State state = 10; Address home = 11;
//	  repeated Address homes = 12; map<string, int32> stock = 13;
//	  oneof choice { string text = 14; int64 number = 15; }
//	}
//	message Out {
//	  string name = 1; int64 total = 2; optional double price = 3;
//	  repeated string tags = 4; optional string city = 5;
//	}
//
// (Order's descriptor's ParentFile has Out.)
func OrderProto(t testing.TB) ([]byte, protoreflect.MessageDescriptor) {
	t.Helper()
	typ := func(k descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto_Type { return &k }
	lbl := func(l descriptorpb.FieldDescriptorProto_Label) *descriptorpb.FieldDescriptorProto_Label { return &l }
	opt, rep := lbl(descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL), lbl(descriptorpb.FieldDescriptorProto_LABEL_REPEATED)
	field := func(name string, n int32, k descriptorpb.FieldDescriptorProto_Type, l *descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ(k), Label: l, JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	inOneof := func(f *descriptorpb.FieldDescriptorProto, i int32, synthetic bool) *descriptorpb.FieldDescriptorProto {
		f.OneofIndex = proto.Int32(i)
		if synthetic {
			f.Proto3Optional = proto.Bool(true)
		}
		return f
	}
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("shop/order.proto"), Package: proto.String("shop"), Syntax: proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("State"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("NEW"), Number: proto.Int32(0)}, {Name: proto.String("PAID"), Number: proto.Int32(1)}}}},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Address"), Field: []*descriptorpb.FieldDescriptorProto{
				field("city", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""),
				inOneof(field("zip", 2, descriptorpb.FieldDescriptorProto_TYPE_INT32, opt, ""), 0, true),
			}, OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("_zip")}}},
			{Name: proto.String("Order"), Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""),
				field("count", 2, descriptorpb.FieldDescriptorProto_TYPE_INT64, opt, ""),
				field("small", 3, descriptorpb.FieldDescriptorProto_TYPE_SINT32, opt, ""),
				field("big", 4, descriptorpb.FieldDescriptorProto_TYPE_UINT32, opt, ""),
				field("ratio", 5, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, opt, ""),
				inOneof(field("price", 6, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, opt, ""), 1, true),
				field("paid", 7, descriptorpb.FieldDescriptorProto_TYPE_BOOL, opt, ""),
				field("blob", 8, descriptorpb.FieldDescriptorProto_TYPE_BYTES, opt, ""),
				field("tags", 9, descriptorpb.FieldDescriptorProto_TYPE_STRING, rep, ""),
				field("state", 10, descriptorpb.FieldDescriptorProto_TYPE_ENUM, opt, ".shop.State"),
				field("home", 11, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt, ".shop.Address"),
				field("homes", 12, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".shop.Address"),
				field("stock", 13, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".shop.Order.StockEntry"),
				inOneof(field("text", 14, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""), 0, false),
				inOneof(field("number", 15, descriptorpb.FieldDescriptorProto_TYPE_INT64, opt, ""), 0, false),
			},
				OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("choice")}, {Name: proto.String("_price")}},
				NestedType: []*descriptorpb.DescriptorProto{{Name: proto.String("StockEntry"), Field: []*descriptorpb.FieldDescriptorProto{
					field("key", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""),
					field("value", 2, descriptorpb.FieldDescriptorProto_TYPE_INT32, opt, ""),
				}, Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)}}},
			},
			{Name: proto.String("Out"), Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""),
				field("total", 2, descriptorpb.FieldDescriptorProto_TYPE_INT64, opt, ""),
				inOneof(field("price", 3, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, opt, ""), 0, true),
				field("tags", 4, descriptorpb.FieldDescriptorProto_TYPE_STRING, rep, ""),
				inOneof(field("city", 5, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""), 1, true),
			}, OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("_price")}, {Name: proto.String("_city")}}},
		},
	}
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{file}})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	return set, fd.Messages().ByName("Order")
}
