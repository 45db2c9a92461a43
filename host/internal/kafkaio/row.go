package kafkaio

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// Rows (beam:coder:row:v1), as Beam's RowCoder encodes them: a varint
// field count; a varint byte count and the bitmap of null fields (bit i of
// byte i/8 for the i-th encoded field; trailing zero bytes elided, so no
// nulls is a 0); then every non-null field in encoding order. INT16, INT32
// and INT64 are varints (of the value as int64, as the Go SDK writes them),
// STRING and BYTES a varint length and the bytes, a nested row its own
// encoding, an ARRAY or ITERABLE a 4-byte big-endian count and the elements
// (or -1 and varint-counted chunks ending with 0, as Java writes iterables
// of unknown size), each element behind a 0/1 null byte when its type is
// nullable.

// RecordEncoder appends the element of a read with metadata for a record
// (its row, translate.KafkaRecordSchema) to dst.
type RecordEncoder func(dst []byte, r *kgo.Record) []byte

// NewRecordEncoder returns the encoder of records in coder cid of coders:
// the Kafka record row, possibly length-prefixed.
func NewRecordEncoder(coders map[string]*pipepb.Coder, cid string) (RecordEncoder, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := translate.SameRowLayout(s, translate.KafkaRecordSchema()); err != nil {
		return nil, fmt.Errorf("coder %q is not the Kafka record row: %w", cid, err)
	}
	if coders[cid].GetSpec().GetUrn() != URNLengthPrefix {
		return AppendRecordRow, nil
	}
	return func(dst []byte, r *kgo.Record) []byte {
		// The row's length first: encode after a guess of its varint's
		// size, and move the row if the guess was wrong.
		start := len(dst)
		dst = append(dst, 0, 0)
		dst = AppendRecordRow(dst, r)
		n := len(dst) - start - 2
		var l [binary.MaxVarintLen64]byte
		ln := binary.PutUvarint(l[:], uint64(n))
		if ln != 2 {
			dst = append(dst, make([]byte, max(ln-2, 0))...)
			copy(dst[start+ln:], dst[start+2:start+2+n])
			dst = dst[:start+ln+n]
		}
		copy(dst[start:], l[:ln])
		return dst
	}, nil
}

// AppendRecordRow appends the translate.KafkaRecordSchema row of r: its
// topic, partition, offset, timestamp (the record's own, whatever the
// read's timestamp policy, as Java's KafkaRecord), key and value (null when
// nil), headers (a list, empty when none) and timestamp type (Java's
// KafkaTimestampType id and name).
func AppendRecordRow(dst []byte, r *kgo.Record) []byte {
	dst = append(dst, 9) // fields
	var nulls byte
	if r.Key == nil {
		nulls |= 1 << 4
	}
	if r.Value == nil {
		nulls |= 1 << 5
	}
	if nulls != 0 {
		dst = append(dst, 1, nulls)
	} else {
		dst = append(dst, 0)
	}
	dst = appendBytes(dst, r.Topic)
	dst = binary.AppendUvarint(dst, uint64(int64(r.Partition)))
	dst = binary.AppendUvarint(dst, uint64(r.Offset))
	dst = binary.AppendUvarint(dst, uint64(r.Timestamp.UnixMilli()))
	if r.Key != nil {
		dst = appendBytes(dst, r.Key)
	}
	if r.Value != nil {
		dst = appendBytes(dst, r.Value)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Headers)))
	for _, h := range r.Headers {
		if h.Value == nil {
			dst = append(dst, 2, 1, 1<<1)
		} else {
			dst = append(dst, 2, 0)
		}
		dst = appendBytes(dst, h.Key)
		if h.Value != nil {
			dst = appendBytes(dst, h.Value)
		}
	}
	id, name := TimestampType(r)
	dst = binary.AppendUvarint(dst, uint64(int64(id)))
	return appendBytes(dst, name)
}

// TimestampType is Java's KafkaTimestampType of a record: 0 CreateTime, 1
// LogAppendTime, -1 NoTimestampType (a record of the old message format).
func TimestampType(r *kgo.Record) (int32, string) {
	switch r.Attrs.TimestampType() {
	case 0:
		return 0, translate.KafkaCreateTimeType
	case 1:
		return 1, translate.KafkaLogAppendTimeType
	}
	return -1, translate.KafkaNoTimestampType
}

func appendBytes[T string | []byte](dst []byte, b T) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// WriteRowDecoder decodes the element of a write with headers (its whole
// encoding) into the record to produce: Key, Value, Headers, and the
// row's topic, partition and timestamp where they are set.
type WriteRowDecoder func(b []byte) (WriteRow, error)

// WriteRow is a decoded write-with-headers row.
type WriteRow struct {
	Record kgo.Record // Key, Value, Headers; Timestamp when HasTimestamp
	// Topic is the row's topic, "" when it has none (null or no field).
	Topic string
	// Partition is the row's partition when HasPartition.
	Partition    int32
	HasPartition bool
	HasTimestamp bool
}

// NewWriteRowDecoder returns the decoder of write-with-headers rows in
// coder cid of coders (a row, possibly length-prefixed, whose schema
// translate.CheckKafkaWriteSchema accepts). Fields are found by name, as
// Java's KafkaIO.WriteWithHeaders finds them; others are skipped.
func NewWriteRowDecoder(coders map[string]*pipepb.Coder, cid string) (WriteRowDecoder, error) {
	s, err := translate.RowCoderSchema(coders, cid)
	if err != nil {
		return nil, err
	}
	if err := translate.CheckKafkaWriteSchema(s); err != nil {
		return nil, err
	}
	rd, err := newRowReader(s)
	if err != nil {
		return nil, err
	}
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	return func(b []byte) (WriteRow, error) {
		if prefixed {
			var err error
			if b, err = stripLengthPrefix(b); err != nil {
				return WriteRow{}, err
			}
		}
		var w WriteRow
		rest, err := rd.read(b, &w)
		if err != nil {
			return WriteRow{}, err
		}
		if len(rest) != 0 {
			return WriteRow{}, fmt.Errorf("row: %d bytes after it", len(rest))
		}
		return w, nil
	}, nil
}

// rowReader reads write rows of one schema: fields in encoding order,
// each with what to do with its value.
type rowReader struct {
	fields []rowField
}

type rowField struct {
	name string
	t    *pipepb.FieldType
	// set stores a non-null value at the start of b in w and returns the
	// rest of b.
	set func(b []byte, w *WriteRow) ([]byte, error)
}

func newRowReader(s *pipepb.Schema) (*rowReader, error) {
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	rd := &rowReader{}
	for _, i := range order {
		f := s.GetFields()[i]
		rf := rowField{name: f.GetName(), t: f.GetType()}
		switch f.GetName() {
		case translate.KafkaWriteKey:
			rf.set = func(b []byte, w *WriteRow) ([]byte, error) {
				v, rest, err := readBytes(b)
				w.Record.Key = nonNil(v)
				return rest, err
			}
		case translate.KafkaWriteValue:
			rf.set = func(b []byte, w *WriteRow) ([]byte, error) {
				v, rest, err := readBytes(b)
				w.Record.Value = nonNil(v)
				return rest, err
			}
		case translate.KafkaWriteTopic:
			rf.set = func(b []byte, w *WriteRow) ([]byte, error) {
				v, rest, err := readBytes(b)
				w.Topic = string(v)
				return rest, err
			}
		case translate.KafkaWritePartition:
			rf.set = func(b []byte, w *WriteRow) ([]byte, error) {
				v, rest, err := readVarint(b)
				if err == nil && (v < 0 || v > math.MaxInt32) {
					err = fmt.Errorf("partition %d", v)
				}
				w.Partition, w.HasPartition = int32(v), true
				return rest, err
			}
		case translate.KafkaWriteTimestamp:
			rf.set = func(b []byte, w *WriteRow) ([]byte, error) {
				v, rest, err := readVarint(b)
				w.Record.Timestamp, w.HasTimestamp = timeMillis(v), true
				return rest, err
			}
		case translate.KafkaWriteHeaders:
			hr, err := newHeaderReader(f.GetType())
			if err != nil {
				return nil, err
			}
			rf.set = hr
		}
		rd.fields = append(rd.fields, rf)
	}
	return rd, nil
}

func (rd *rowReader) read(b []byte, w *WriteRow) ([]byte, error) {
	return readRow(b, len(rd.fields), func(i int, b []byte) ([]byte, error) {
		f := rd.fields[i]
		var err error
		if f.set != nil {
			b, err = f.set(b, w)
		} else {
			b, err = skipValue(b, f.t)
		}
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.name, err)
		}
		return b, nil
	})
}

// readRow reads a row header of a schema of n fields and hands each
// non-null field's bytes to each, which returns what follows the field.
// A row of fewer fields (an older schema) leaves the rest null.
func readRow(b []byte, n int, each func(i int, b []byte) ([]byte, error)) ([]byte, error) {
	h, b, err := readRowHeader(b, n)
	if err != nil {
		return nil, err
	}
	for i := range int(h.fields) {
		if h.null(i) {
			continue
		}
		if b, err = each(i, b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// rowHeader is a row's field count and null bitmap, read from its start.
type rowHeader struct {
	fields int64
	nulls  []byte
}

// readRowHeader reads the header of a row of a schema of n fields and
// returns what follows it.
func readRowHeader(b []byte, n int) (rowHeader, []byte, error) {
	nf, b, err := readVarint(b)
	if err != nil {
		return rowHeader{}, nil, fmt.Errorf("row: field count: %w", err)
	}
	if nf < 0 || nf > int64(n) {
		return rowHeader{}, nil, fmt.Errorf("row: %d fields, the schema has %d", nf, n)
	}
	nulls, b, err := readBytes(b)
	if err != nil {
		return rowHeader{}, nil, fmt.Errorf("row: null bitmap: %w", err)
	}
	return rowHeader{nf, nulls}, b, nil
}

// null reports whether field i (in encoding order) is null: marked so,
// or missing from a row of fewer fields (an older schema).
func (h rowHeader) null(i int) bool {
	return int64(i) >= h.fields || (i/8 < len(h.nulls) && h.nulls[i/8]>>(i%8)&1 == 1)
}

// appendRowHeader appends a row header of n fields, the fields null marks
// null, to dst: the field count and the null bitmap (empty when none is
// null, as the Go SDK writes it).
func appendRowHeader(dst []byte, n int, null func(i int) bool) []byte {
	dst = binary.AppendUvarint(dst, uint64(n))
	var nulls []byte
	for i := range n {
		if null(i) {
			if nulls == nil {
				nulls = make([]byte, (n+7)/8)
			}
			nulls[i/8] |= 1 << (i % 8)
		}
	}
	return appendBytes(dst, nulls)
}

// appendElement appends the encoding of row to dst as an element of a
// row coder, length-prefixed when prefixed (the coder is wrapped in a
// length prefix).
func appendElement(dst, row []byte, prefixed bool) []byte {
	if prefixed {
		return appendBytes(dst, row)
	}
	return append(dst, row...)
}

// newHeaderReader reads a headers field: a list of rows with a key and a
// value (others skipped).
func newHeaderReader(t *pipepb.FieldType) (func(b []byte, w *WriteRow) ([]byte, error), error) {
	elem := t.GetArrayType().GetElementType()
	if elem == nil {
		elem = t.GetIterableType().GetElementType()
	}
	hs := elem.GetRowType().GetSchema()
	order, err := translate.EncodingOrder(hs)
	if err != nil {
		return nil, err
	}
	fields := make([]*pipepb.Field, len(order))
	for i, o := range order {
		fields[i] = hs.GetFields()[o]
	}
	header := func(b []byte) (kgo.RecordHeader, []byte, error) {
		var h kgo.RecordHeader
		hasKey := false
		rest, err := readRow(b, len(fields), func(i int, b []byte) ([]byte, error) {
			switch fields[i].GetName() {
			case "key":
				v, rest, err := readBytes(b)
				h.Key, hasKey = string(v), true
				return rest, err
			case "value":
				v, rest, err := readBytes(b)
				h.Value = nonNil(v)
				return rest, err
			}
			return skipValue(b, fields[i].GetType())
		})
		if err == nil && !hasKey {
			err = fmt.Errorf("a header without a key (null)")
		}
		return h, rest, err
	}
	return func(b []byte, w *WriteRow) ([]byte, error) {
		return readList(b, elem.GetNullable(), func(b []byte) ([]byte, error) {
			h, rest, err := header(b)
			if err == nil {
				w.Record.Headers = append(w.Record.Headers, h)
			}
			return rest, err
		}, func() error { return fmt.Errorf("a null header") })
	}, nil
}

// readList reads an ARRAY or ITERABLE, handing each element to each; a
// null element (of a nullable element type) calls null.
func readList(b []byte, nullable bool, each func([]byte) ([]byte, error), null func() error) ([]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("list: short")
	}
	n := int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	elem := func(b []byte) ([]byte, error) {
		if nullable {
			if len(b) < 1 {
				return nil, fmt.Errorf("list: short")
			}
			if b[0] == 0 {
				return b[1:], null()
			}
			b = b[1:]
		}
		return each(b)
	}
	var err error
	if n >= 0 {
		for range n {
			if b, err = elem(b); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	// -1: chunks of a varint count, ending with a 0 count.
	for {
		c, rest, err := readVarint(b)
		if err != nil || c < 0 {
			return nil, fmt.Errorf("list: bad chunk count")
		}
		b = rest
		if c == 0 {
			return b, nil
		}
		for range c {
			if b, err = elem(b); err != nil {
				return nil, err
			}
		}
	}
}

// skipValue skips a non-null value of type t at the start of b.
func skipValue(b []byte, t *pipepb.FieldType) ([]byte, error) {
	fixed := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, fmt.Errorf("short")
		}
		return b[n:], nil
	}
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		switch ti.AtomicType {
		case pipepb.AtomicType_BYTE, pipepb.AtomicType_BOOLEAN:
			return fixed(1)
		case pipepb.AtomicType_INT16, pipepb.AtomicType_INT32, pipepb.AtomicType_INT64:
			_, rest, err := readVarint(b)
			return rest, err
		case pipepb.AtomicType_FLOAT:
			return fixed(4)
		case pipepb.AtomicType_DOUBLE:
			return fixed(8)
		case pipepb.AtomicType_STRING, pipepb.AtomicType_BYTES:
			_, rest, err := readBytes(b)
			return rest, err
		}
	case *pipepb.FieldType_ArrayType:
		e := ti.ArrayType.GetElementType()
		return readList(b, e.GetNullable(), func(b []byte) ([]byte, error) { return skipValue(b, e) }, func() error { return nil })
	case *pipepb.FieldType_IterableType:
		e := ti.IterableType.GetElementType()
		return readList(b, e.GetNullable(), func(b []byte) ([]byte, error) { return skipValue(b, e) }, func() error { return nil })
	case *pipepb.FieldType_MapType:
		k, v := ti.MapType.GetKeyType(), ti.MapType.GetValueType()
		if len(b) < 4 {
			return nil, fmt.Errorf("map: short")
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		var err error
		for range max(n, 0) {
			for _, et := range []*pipepb.FieldType{k, v} {
				if et.GetNullable() {
					if len(b) < 1 {
						return nil, fmt.Errorf("map: short")
					}
					if b[0] == 0 {
						b = b[1:]
						continue
					}
					b = b[1:]
				}
				if b, err = skipValue(b, et); err != nil {
					return nil, err
				}
			}
		}
		return b, nil
	case *pipepb.FieldType_RowType:
		s := ti.RowType.GetSchema()
		order, err := translate.EncodingOrder(s)
		if err != nil {
			return nil, err
		}
		return readRow(b, len(order), func(i int, b []byte) ([]byte, error) {
			return skipValue(b, s.GetFields()[order[i]].GetType())
		})
	case *pipepb.FieldType_LogicalType:
		return skipValue(b, ti.LogicalType.GetRepresentation())
	}
	return nil, fmt.Errorf("values of type %s are not supported", translate.FieldTypeString(t))
}

// stripLengthPrefix returns the value of a length-prefixed coder's whole
// encoding b.
func stripLengthPrefix(b []byte) ([]byte, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) != l {
		return nil, fmt.Errorf("row: bad length prefix")
	}
	return b[n:], nil
}

func readVarint(b []byte) (int64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("bad varint")
	}
	return int64(v), b[n:], nil
}

func readBytes(b []byte) ([]byte, []byte, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, nil, fmt.Errorf("bad length")
	}
	return b[n : n+int(l)], b[n+int(l):], nil
}

// nonNil makes a decoded value that is present but empty non-nil: empty,
// not null.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func timeMillis(ms int64) time.Time { return time.UnixMilli(ms) }
