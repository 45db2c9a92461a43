package kafkaio

import (
	"encoding/binary"
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// Payload rows (translate.KafkaPayloadSchema): the elements of the Kafka
// schema transforms' RAW and STRING formats. A payload row is one
// non-null field: the varint field count 1, an empty null bitmap (0),
// then the value's varint length and bytes (BYTES and STRING encode
// alike).

// PayloadEncoder appends the payload row of a record's value to dst. A
// record without a value (a tombstone) has no payload row (its field is
// not nullable, as in Java's RAW and STRING rows): an error.
type PayloadEncoder func(dst []byte, r *kgo.Record) ([]byte, error)

// NewPayloadEncoder returns the encoder of records' values in coder cid of
// coders: the payload row of valueFormat, possibly length-prefixed.
func NewPayloadEncoder(coders map[string]*pipepb.Coder, cid, valueFormat string) (PayloadEncoder, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := translate.SameRowLayout(s, translate.KafkaPayloadSchema(valueFormat)); err != nil {
		return nil, fmt.Errorf("coder %q is not the Kafka payload row: %w", cid, err)
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		if r.Value == nil {
			return nil, fmt.Errorf("topic %s partition %d offset %d: the record has no value (a tombstone), and a payload row's payload is not nullable", r.Topic, r.Partition, r.Offset)
		}
		if prefixed {
			// The row's length: field count, null bitmap, the value's
			// varint length and the value.
			n := 2 + uvarintLen(uint64(len(r.Value))) + len(r.Value)
			dst = binary.AppendUvarint(dst, uint64(n))
		}
		return AppendPayloadRow(dst, r.Value), nil
	}, nil
}

// AppendPayloadRow appends the payload row of value to dst.
func AppendPayloadRow(dst, value []byte) []byte {
	dst = append(dst, 1, 0) // one field, no nulls
	return appendBytes(dst, value)
}

// PayloadDecoder returns the value of a payload write's input row (its
// whole encoding): the record's value.
type PayloadDecoder func(b []byte) ([]byte, error)

// NewPayloadDecoder returns the decoder of payload write rows in coder cid
// of coders: a row of one BYTES field (translate.CheckKafkaPayloadWriteSchema),
// possibly length-prefixed. A null field is an error: a RAW row's value
// is the record's, and Java's RAW write has none for null.
func NewPayloadDecoder(coders map[string]*pipepb.Coder, cid string) (PayloadDecoder, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := translate.CheckKafkaPayloadWriteSchema(s); err != nil {
		return nil, err
	}
	name := s.GetFields()[0].GetName()
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	return func(b []byte) ([]byte, error) {
		if prefixed {
			var err error
			if b, err = stripLengthPrefix(b); err != nil {
				return nil, err
			}
		}
		fields, b, err := readVarint(b)
		if err != nil {
			return nil, fmt.Errorf("row: field count: %w", err)
		}
		nulls, b, err := readBytes(b)
		if err != nil {
			return nil, fmt.Errorf("row: null bitmap: %w", err)
		}
		if fields != 1 || (len(nulls) > 0 && nulls[0]&1 != 0) {
			return nil, fmt.Errorf("row: field %q is null (or missing: %d fields encoded): a RAW write needs a value", name, fields)
		}
		v, b, err := readBytes(b)
		if err != nil {
			return nil, fmt.Errorf("row: field %q: %w", name, err)
		}
		if len(b) != 0 {
			return nil, fmt.Errorf("row: %d bytes after it", len(b))
		}
		return nonNil(v), nil
	}, nil
}

// uvarintLen is the size of v as a varint.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// WriteErrorRowEncoder appends a write's error row (translate.KafkaWriteErrorSchema)
// of an input row (its element encoding) and why it could not be written
// to dst.
type WriteErrorRowEncoder func(dst, elem []byte, message string) ([]byte, error)

// NewWriteErrorRowEncoder returns the encoder of a write's error rows in
// coder cid of coders, for input elements in coder in (rows, possibly
// length-prefixed, as the error rows).
func NewWriteErrorRowEncoder(coders map[string]*pipepb.Coder, cid, in string) (WriteErrorRowEncoder, error) {
	is, err := translate.RowCoderSchema(coders, in)
	if err != nil {
		return nil, err
	}
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := translate.SameRowLayout(s, translate.KafkaWriteErrorSchema(is)); err != nil {
		return nil, fmt.Errorf("coder %q is not a Kafka write's error row: %w", cid, err)
	}
	inPrefixed := coders[in].GetSpec().GetUrn() == URNLengthPrefix
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	var scratch []byte
	return func(dst, elem []byte, message string) ([]byte, error) {
		if inPrefixed {
			var err error
			if elem, err = stripLengthPrefix(elem); err != nil {
				return nil, err
			}
		}
		// A row field is the row's own encoding, which delimits itself.
		row := append(append(scratch[:0], 2, 0), elem...) // two fields, no nulls
		row = appendBytes(row, message)
		scratch = row
		return appendElement(dst, row, prefixed), nil
	}, nil
}

// ErrorRowEncoder appends the error row (translate.KafkaErrorSchema) of a
// record's value and why it could not be read to dst.
type ErrorRowEncoder func(dst, value []byte, message string) []byte

// NewErrorRowEncoder returns the encoder of a read's error rows in coder
// cid of coders, possibly length-prefixed.
func NewErrorRowEncoder(coders map[string]*pipepb.Coder, cid string) (ErrorRowEncoder, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := translate.SameRowLayout(s, translate.KafkaErrorSchema()); err != nil {
		return nil, fmt.Errorf("coder %q is not a Kafka read's error row: %w", cid, err)
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	var scratch []byte
	return func(dst, value []byte, message string) []byte {
		row := append(scratch[:0], 2, 0) // two fields, no nulls
		row = appendBytes(row, value)
		row = appendBytes(row, message)
		scratch = row
		return appendElement(dst, row, prefixed)
	}, nil
}
