package kafkaio

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// Avro rows (translate.AvroRowSchema, format AVRO of the Kafka schema
// transforms): a read turns each record's value, an Avro binary datum of
// the read's schema, into a row; a write turns each input row into a
// datum of translate.AvroWriteSchema of its schema.
//
// The datums are walked here, driven by the schema hamba/avro parsed,
// rather than decoded with hamba/avro into Go values and converted: its
// generic decoding wraps a union's record in a map of its name but not a
// union's string, and turns annotated longs into time.Time, where rows
// need each value as the schema has it. The tests check the walk against
// hamba/avro's own encoding and decoding.

// NewRowPayloadEncoder returns the encoder of a structured read's values
// (JSON, AVRO without a registry, PROTO) as rows in coder cid of coders.
func NewRowPayloadEncoder(coders map[string]*pipepb.Coder, cid string, r *translate.KafkaRead) (PayloadEncoder, error) {
	switch r.RowFormat {
	case translate.KafkaRowJSON:
		return NewJSONPayloadEncoder(coders, cid, r.RowSchema)
	case translate.KafkaRowAvro:
		return NewAvroPayloadEncoder(coders, cid, r.RowSchema)
	case translate.KafkaRowProto:
		return NewProtoPayloadEncoder(coders, cid, r.RowSchema, r.MessageName)
	}
	return nil, fmt.Errorf("row format %q: want %s, %s or %s", r.RowFormat, translate.KafkaRowJSON, translate.KafkaRowAvro, translate.KafkaRowProto)
}

// NewRowPayloadDecoder returns the decoder of a payload write's rows in
// coder cid of coders into values of its format (none: RAW).
func NewRowPayloadDecoder(coders map[string]*pipepb.Coder, cid string, w *translate.KafkaWrite) (PayloadDecoder, error) {
	switch w.RowFormat {
	case "":
		return NewPayloadDecoder(coders, cid)
	case translate.KafkaRowJSON:
		return NewJSONPayloadDecoder(coders, cid)
	case translate.KafkaRowAvro:
		return NewAvroPayloadDecoder(coders, cid)
	case translate.KafkaRowProto:
		return NewProtoPayloadDecoder(coders, cid, w.RowSchema, w.MessageName)
	}
	return nil, fmt.Errorf("row format %q: want %s, %s or %s", w.RowFormat, translate.KafkaRowJSON, translate.KafkaRowAvro, translate.KafkaRowProto)
}

// NewAvroPayloadEncoder returns the encoder of records' values, Avro
// datums of schema text, as rows in coder cid of coders, possibly
// length-prefixed. Its errors are about the record's value.
func NewAvroPayloadEncoder(coders map[string]*pipepb.Coder, cid, text string) (PayloadEncoder, error) {
	if _, err := readRowSchema(coders, cid, &translate.KafkaRead{PayloadRow: true, RowFormat: translate.KafkaRowAvro, RowSchema: text}); err != nil {
		return nil, err
	}
	as, err := translate.ParseAvroSchema(text)
	if err != nil {
		return nil, err
	}
	rec := as.(*avro.RecordSchema) // AvroRowSchema checked it
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	var scratch []byte
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		if r.Value == nil {
			return nil, fmt.Errorf("the record has no value (a tombstone), and an Avro read's row needs a datum")
		}
		row, rest, err := appendAvroRecord(scratch[:0], rec, r.Value)
		if err != nil {
			return nil, fmt.Errorf("not a datum of the read's Avro schema: %w", err)
		}
		if len(rest) != 0 {
			return nil, fmt.Errorf("not a datum of the read's Avro schema: %d bytes after it", len(rest))
		}
		scratch = row
		return appendElement(dst, row, prefixed), nil
	}, nil
}

// appendAvroRecord appends the record datum at the start of b as a row
// and returns what follows it.
func appendAvroRecord(dst []byte, rec *avro.RecordSchema, b []byte) ([]byte, []byte, error) {
	fv := avroFieldsPool.Get().(*avroFields)
	defer avroFieldsPool.Put(fv)
	rest, err := fv.read(rec, b)
	if err != nil {
		return nil, nil, err
	}
	dst = appendRowHeader(dst, len(fv.nulls), func(i int) bool { return fv.nulls[i] })
	return append(dst, fv.vals...), rest, nil
}

// avroFieldsPool holds avroFields to read records into: a record nests
// others (itself, even), so a reader cannot keep just one.
var avroFieldsPool = sync.Pool{New: func() any { return new(avroFields) }}

// avroFields are a record datum's fields as row values: field i's value is
// vals[ends[i-1]:ends[i]], empty when nulls[i]. A row's header needs to
// know which fields are null, and a registry read takes them by name, so
// the values are kept apart first.
type avroFields struct {
	vals  []byte
	ends  []int
	nulls []bool
}

// read reads the record datum at the start of b and returns what follows.
func (fv *avroFields) read(rec *avro.RecordSchema, b []byte) ([]byte, error) {
	fv.vals, fv.ends, fv.nulls = fv.vals[:0], fv.ends[:0], fv.nulls[:0]
	for _, f := range rec.Fields() {
		var err error
		var null bool
		if fv.vals, b, null, err = appendAvroValue(fv.vals, f.Type(), b); err != nil {
			return nil, underName(err, f.Name())
		}
		fv.ends = append(fv.ends, len(fv.vals))
		fv.nulls = append(fv.nulls, null)
	}
	return b, nil
}

// value is field i's row value.
func (fv *avroFields) value(i int) []byte {
	start := 0
	if i > 0 {
		start = fv.ends[i-1]
	}
	return fv.vals[start:fv.ends[i]]
}

// appendAvroValue appends the datum of schema s at the start of b as a row
// value and returns what follows it; a null (of a nullable union) appends
// nothing and reports null.
func appendAvroValue(dst []byte, s avro.Schema, b []byte) (out, rest []byte, null bool, err error) {
	fail := func(err error) ([]byte, []byte, bool, error) {
		return nil, nil, false, &pathError{noun: "field", msg: err.Error()}
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		return appendAvroValue(dst, s.Schema(), b)
	case *avro.UnionSchema:
		idx, rest, err := readZigzag(b)
		if err != nil {
			return fail(err)
		}
		if idx < 0 || idx >= int64(len(s.Types())) {
			return fail(fmt.Errorf("union branch %d of %d", idx, len(s.Types())))
		}
		branch := s.Types()[idx]
		if branch.Type() == avro.Null {
			return dst, rest, true, nil
		}
		return appendAvroValue(dst, branch, rest)
	case *avro.RecordSchema:
		out, rest, err := appendAvroRecord(dst, s, b)
		return out, rest, false, err
	case *avro.ArraySchema:
		return appendAvroBlocks(dst, b, func(dst, b []byte, i int) ([]byte, []byte, error) {
			out, rest, err := appendAvroItem(dst, s.Items(), b)
			if err != nil {
				return nil, nil, underIndex(err, i)
			}
			return out, rest, nil
		})
	case *avro.MapSchema:
		return appendAvroBlocks(dst, b, func(dst, b []byte, i int) ([]byte, []byte, error) {
			k, rest, err := readAvroBytes(b)
			if err != nil {
				return nil, nil, &pathError{noun: "field", msg: fmt.Sprintf("key %d: %v", i, err)}
			}
			dst = appendBytes(dst, k)
			out, rest, err := appendAvroItem(dst, s.Values(), rest)
			if err != nil {
				return nil, nil, underBracket(err, strconv.Quote(string(k)))
			}
			return out, rest, nil
		})
	case *avro.EnumSchema:
		idx, rest, err := readZigzag(b)
		if err != nil {
			return fail(err)
		}
		sym, ok := s.Symbol(int(idx))
		if !ok || idx > math.MaxInt32 {
			return fail(fmt.Errorf("enum index %d of %d symbols", idx, len(s.Symbols())))
		}
		return appendBytes(dst, sym), rest, false, nil
	case *avro.FixedSchema:
		if len(b) < s.Size() {
			return fail(fmt.Errorf("short"))
		}
		return appendBytes(dst, b[:s.Size()]), b[s.Size():], false, nil
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Boolean:
			if len(b) < 1 || b[0] > 1 {
				return fail(fmt.Errorf("not a boolean"))
			}
			return append(dst, b[0]), b[1:], false, nil
		case avro.Int, avro.Long:
			v, rest, err := readZigzag(b)
			if err != nil {
				return fail(err)
			}
			if s.Type() == avro.Int && (v < math.MinInt32 || v > math.MaxInt32) {
				return fail(fmt.Errorf("%d is out of an int's range", v))
			}
			return binary.AppendUvarint(dst, uint64(v)), rest, false, nil
		case avro.Float:
			if len(b) < 4 {
				return fail(fmt.Errorf("short"))
			}
			return binary.BigEndian.AppendUint32(dst, binary.LittleEndian.Uint32(b)), b[4:], false, nil
		case avro.Double:
			if len(b) < 8 {
				return fail(fmt.Errorf("short"))
			}
			return binary.BigEndian.AppendUint64(dst, binary.LittleEndian.Uint64(b)), b[8:], false, nil
		case avro.String, avro.Bytes:
			v, rest, err := readAvroBytes(b)
			if err != nil {
				return fail(err)
			}
			return appendBytes(dst, v), rest, false, nil
		}
	}
	return fail(fmt.Errorf("Avro type %s has no row value", s.Type()))
}

// appendAvroItem appends an array item or map value: a nullable one with
// the row list's null marker.
func appendAvroItem(dst []byte, s avro.Schema, b []byte) ([]byte, []byte, error) {
	if u, ok := s.(*avro.UnionSchema); ok && u.Nullable() {
		mark := len(dst)
		dst = append(dst, 1)
		out, rest, null, err := appendAvroValue(dst, s, b)
		if err != nil {
			return nil, nil, err
		}
		if null {
			out[mark] = 0
		}
		return out, rest, nil
	}
	out, rest, null, err := appendAvroValue(dst, s, b)
	if err == nil && null {
		err = &pathError{noun: "field", msg: "a null item"}
	}
	return out, rest, err
}

// appendAvroBlocks reads an Avro array or map, blocks of a count (its
// negation followed by the block's size in bytes) ending with a 0 count,
// and appends the row list's int32 count and each item's values.
func appendAvroBlocks(dst, b []byte, item func(dst, b []byte, i int) ([]byte, []byte, error)) ([]byte, []byte, bool, error) {
	countAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	n := 0
	for {
		c, rest, err := readZigzag(b)
		if err != nil {
			return nil, nil, false, &pathError{noun: "field", msg: "block count: " + err.Error()}
		}
		b = rest
		if c == 0 {
			break
		}
		if c < 0 {
			if _, b, err = readZigzag(b); err != nil { // the block's size
				return nil, nil, false, &pathError{noun: "field", msg: "block size: " + err.Error()}
			}
			c = -c
		}
		if c > int64(len(b)) { // every item takes a byte at least
			return nil, nil, false, &pathError{noun: "field", msg: fmt.Sprintf("a block of %d items in %d bytes", c, len(b))}
		}
		for range c {
			if dst, b, err = item(dst, b, n); err != nil {
				return nil, nil, false, err
			}
			n++
		}
	}
	if n > math.MaxInt32 {
		return nil, nil, false, &pathError{noun: "field", msg: fmt.Sprintf("%d items", n)}
	}
	binary.BigEndian.PutUint32(dst[countAt:], uint32(n))
	return dst, b, false, nil
}

func readZigzag(b []byte) (int64, []byte, error) {
	u, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("bad varint")
	}
	return int64(u>>1) ^ -int64(u&1), b[n:], nil
}

func readAvroBytes(b []byte) ([]byte, []byte, error) {
	l, rest, err := readZigzag(b)
	if err != nil || l < 0 || l > int64(len(rest)) {
		return nil, nil, fmt.Errorf("bad length")
	}
	return rest[:l], rest[l:], nil
}

func appendZigzag(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

// NewAvroPayloadDecoder returns the decoder of Avro write rows in coder
// cid of coders (translate.CheckKafkaAvroWriteSchema), possibly
// length-prefixed: each row's datum of translate.AvroWriteSchema, the
// record's value.
func NewAvroPayloadDecoder(coders map[string]*pipepb.Coder, cid string) (PayloadDecoder, error) {
	return newStructuredDecoder(coders, cid, translate.CheckKafkaAvroWriteSchema, func(s *pipepb.Schema) (rowWriter, error) {
		w, err := newAvroRowWriter(s, map[*pipepb.Schema]*avroRowWriter{})
		if err != nil {
			return nil, err
		}
		return w.appendRow, nil
	})
}

// avroRowWriter writes rows of one schema as Avro record datums. Made
// once per decoder, so a row computes no encoding order.
type avroRowWriter struct {
	fields []*pipepb.Field // in encoding order, as AvroWriteSchema lists them
	// nested are the writers of nested rows' schemas, shared by one
	// decoder's writers.
	nested map[*pipepb.Schema]*avroRowWriter
}

func newAvroRowWriter(s *pipepb.Schema, nested map[*pipepb.Schema]*avroRowWriter) (*avroRowWriter, error) {
	return buildRowWriter(s, nested, func(fields []*pipepb.Field) *avroRowWriter {
		return &avroRowWriter{fields: fields, nested: nested}
	})
}

// appendRow appends the row at the start of b as an Avro record datum
// and returns what follows it.
func (w *avroRowWriter) appendRow(dst, b []byte) ([]byte, []byte, error) {
	h, b, err := readRowHeader(b, len(w.fields))
	if err != nil {
		return nil, nil, err
	}
	for i, f := range w.fields {
		null := h.null(i)
		switch {
		case null && !f.GetType().GetNullable():
			return nil, nil, &pathError{noun: "field", path: f.GetName(), msg: "null, and its type is not nullable"}
		case null:
			dst = appendZigzag(dst, 0) // the union's null branch
			continue
		case f.GetType().GetNullable():
			dst = appendZigzag(dst, 1)
		}
		if dst, b, err = w.appendValue(dst, f.GetType(), b); err != nil {
			return nil, nil, underName(err, f.GetName())
		}
	}
	return dst, b, nil
}

// appendValueAvro appends the non-null row value of type t at the start
// of b as an Avro datum and returns what follows it.
func (w *avroRowWriter) appendValue(dst []byte, t *pipepb.FieldType, b []byte) ([]byte, []byte, error) {
	fail := func(err error) ([]byte, []byte, error) {
		return nil, nil, &pathError{noun: "field", msg: err.Error()}
	}
	switch ti := t.GetTypeInfo().(type) {
	case *pipepb.FieldType_AtomicType:
		switch ti.AtomicType {
		case pipepb.AtomicType_BOOLEAN:
			if len(b) < 1 {
				return fail(fmt.Errorf("short"))
			}
			return append(dst, b[0]&1), b[1:], nil
		case pipepb.AtomicType_INT32:
			v, rest, err := readVarint(b)
			if err != nil {
				return fail(err)
			}
			return appendZigzag(dst, int64(int32(v))), rest, nil
		case pipepb.AtomicType_INT64:
			v, rest, err := readVarint(b)
			if err != nil {
				return fail(err)
			}
			return appendZigzag(dst, v), rest, nil
		case pipepb.AtomicType_FLOAT:
			if len(b) < 4 {
				return fail(fmt.Errorf("short"))
			}
			return binary.LittleEndian.AppendUint32(dst, binary.BigEndian.Uint32(b)), b[4:], nil
		case pipepb.AtomicType_DOUBLE:
			if len(b) < 8 {
				return fail(fmt.Errorf("short"))
			}
			return binary.LittleEndian.AppendUint64(dst, binary.BigEndian.Uint64(b)), b[8:], nil
		case pipepb.AtomicType_STRING, pipepb.AtomicType_BYTES:
			v, rest, err := readBytes(b)
			if err != nil {
				return fail(err)
			}
			return append(appendZigzag(dst, int64(len(v))), v...), rest, nil
		}
	case *pipepb.FieldType_ArrayType, *pipepb.FieldType_IterableType:
		et := t.GetArrayType().GetElementType()
		if et == nil {
			et = t.GetIterableType().GetElementType()
		}
		var items []byte
		n, i := 0, 0
		rest, err := readList(b, et.GetNullable(), func(b []byte) ([]byte, error) {
			var rest []byte
			var err error
			if et.GetNullable() {
				items = appendZigzag(items, 1)
			}
			if items, rest, err = w.appendValue(items, et, b); err != nil {
				return nil, underIndex(err, i)
			}
			n, i = n+1, i+1
			return rest, err
		}, func() error {
			items = appendZigzag(items, 0)
			n, i = n+1, i+1
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		return appendAvroBlock(dst, n, items), rest, nil
	case *pipepb.FieldType_MapType:
		kt, vt := ti.MapType.GetKeyType(), ti.MapType.GetValueType()
		if len(b) < 4 {
			return fail(fmt.Errorf("map: short"))
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if n < 0 {
			return fail(fmt.Errorf("map: %d entries", n))
		}
		var entries []byte
		for range n {
			k, rest, err := readBytes(b)
			if err != nil || kt.GetNullable() {
				return fail(fmt.Errorf("map key: want a non-null STRING"))
			}
			entries = append(appendZigzag(entries, int64(len(k))), k...)
			b = rest
			if vt.GetNullable() {
				if len(b) < 1 {
					return fail(fmt.Errorf("map: short"))
				}
				null := b[0] == 0
				b = b[1:]
				if null {
					entries = appendZigzag(entries, 0)
					continue
				}
				entries = appendZigzag(entries, 1)
			}
			if entries, b, err = w.appendValue(entries, vt, b); err != nil {
				return nil, nil, underBracket(err, strconv.Quote(string(k)))
			}
		}
		return appendAvroBlock(dst, int(n), entries), b, nil
	case *pipepb.FieldType_RowType:
		return w.nested[ti.RowType.GetSchema()].appendRow(dst, b)
	}
	return fail(fmt.Errorf("values of type %s have no Avro datum here", translate.FieldTypeString(t)))
}

// appendAvroBlock appends n items as one block of an Avro array or map
// (none: just the end).
func appendAvroBlock(dst []byte, n int, items []byte) []byte {
	if n > 0 {
		dst = append(appendZigzag(dst, int64(n)), items...)
	}
	return appendZigzag(dst, 0)
}
