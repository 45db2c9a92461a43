package kafkaio

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/hamba/avro/v2"
	"github.com/hamba/avro/v2/registry"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate"
)

// Registry reads: format AVRO with a Confluent schema registry
// (KafkaRead.SchemaRegistryURL). A value is a 0 byte, its writer's schema
// id (4 bytes, big-endian) and a datum of that schema; the read's rows
// follow its own schema (the subject's latest when it was expanded). As
// Java's AvroUtils.toBeamRow does with the GenericRecord the Confluent
// deserializer gives it, a row takes each field by name from the writer's
// record: a field the writer lacks is null (an error for a field that is
// not nullable), one the read lacks is dropped, and a field in both must
// have one type in both (nullability aside).
//
// A value not in the wire format, or whose writer's schema cannot fill
// the row, is a bad record. A schema the registry cannot give (it is out
// of reach, or does not know the id) is a RegistryError, which is not
// about the record: the task fails rather than drop data.

// RegistryError is a schema registry's failure to give a schema.
type RegistryError struct {
	URL string
	ID  int
	Err error
}

func (e *RegistryError) Error() string {
	return fmt.Sprintf("schema registry %s: schema id %d: %v", RedactURL(e.URL), e.ID, e.Err)
}

// RedactURL is a registry's URL for messages: a password in it (a
// registry behind basic authentication, https://USER:PASSWORD@HOST)
// replaced by xxxxx.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
}

func (e *RegistryError) Unwrap() error { return e.Err }

// RegistryTimeout bounds one schema's fetch from a registry.
const RegistryTimeout = 30 * time.Second

// NewRegistryClient is the client of a registry read.
func NewRegistryClient(url string) (*registry.Client, error) {
	c, err := registry.NewClient(url)
	if err != nil {
		return nil, fmt.Errorf("schema registry %q: %w", RedactURL(url), err)
	}
	return c, nil
}

// NewRegistryPayloadEncoder returns the encoder of a registry read's
// values as rows of Avro schema text in coder cid of coders, possibly
// length-prefixed, fetching writers' schemas from the registry at url.
func NewRegistryPayloadEncoder(coders map[string]*pipepb.Coder, cid, text, url string) (PayloadEncoder, error) {
	s, err := readRowSchema(coders, cid, &translate.KafkaRead{PayloadRow: true, RowFormat: translate.KafkaRowAvro, RowSchema: text})
	if err != nil {
		return nil, err
	}
	order, err := translate.EncodingOrder(s)
	if err != nil {
		return nil, err
	}
	reader := make([]*pipepb.Field, len(order))
	for i, o := range order {
		reader[i] = s.GetFields()[o]
	}
	client, err := NewRegistryClient(url)
	if err != nil {
		return nil, err
	}
	plans := map[int]*writerPlan{}
	var fv avroFields
	var scratch []byte
	prefixed := coders[cid].GetSpec().GetUrn() == URNLengthPrefix
	return func(dst []byte, r *kgo.Record) ([]byte, error) {
		if r.Value == nil {
			return nil, fmt.Errorf("the record has no value (a tombstone), and an Avro read's row needs a datum")
		}
		if len(r.Value) < 5 || r.Value[0] != 0 {
			return nil, fmt.Errorf("not in the schema registry's wire format (a 0 byte and a 4-byte schema id before the datum)")
		}
		id := int(binary.BigEndian.Uint32(r.Value[1:5]))
		plan := plans[id]
		if plan == nil {
			ctx, cancel := context.WithTimeout(context.Background(), RegistryTimeout)
			ws, err := client.GetSchema(ctx, id)
			cancel()
			if err != nil {
				return nil, &RegistryError{URL: url, ID: id, Err: err}
			}
			plan = newWriterPlan(reader, ws)
			plans[id] = plan
		}
		if plan.err != nil {
			return nil, fmt.Errorf("schema id %d: %w", id, plan.err)
		}
		rest, err := fv.read(plan.writer, r.Value[5:])
		if err != nil {
			return nil, fmt.Errorf("not a datum of its writer's schema (id %d): %w", id, err)
		}
		if len(rest) != 0 {
			return nil, fmt.Errorf("not a datum of its writer's schema (id %d): %d bytes after it", id, len(rest))
		}
		if scratch, err = plan.row(scratch[:0], reader, &fv, id); err != nil {
			return nil, err
		}
		return appendElement(dst, scratch, prefixed), nil
	}, nil
}

// writerPlan maps a writer's record to the read's row: from[i] is the
// writer's field of the read's field i, -1 if it has none.
type writerPlan struct {
	writer *avro.RecordSchema
	from   []int
	err    error // the writer's schema cannot fill the row
}

func newWriterPlan(reader []*pipepb.Field, ws avro.Schema) *writerPlan {
	p := &writerPlan{}
	rec, ok := ws.(*avro.RecordSchema)
	if !ok {
		p.err = fmt.Errorf("the writer's schema is a %s, not a record", ws.Type())
		return p
	}
	p.writer = rec
	// The writer's fields as row fields, by the same mapping as the read's.
	wrow, err := translate.AvroRowSchema(ws.String())
	if err != nil {
		p.err = fmt.Errorf("the writer's schema: %w", err)
		return p
	}
	byName := map[string]int{}
	for j, f := range wrow.GetFields() {
		byName[f.GetName()] = j
	}
	for _, f := range reader {
		j, ok := byName[f.GetName()]
		if !ok {
			if !f.GetType().GetNullable() {
				p.err = fmt.Errorf("field %q: not in the writer's schema, and not nullable in the read's", f.GetName())
				return p
			}
			p.from = append(p.from, -1)
			continue
		}
		w := wrow.GetFields()[j]
		wt := proto.Clone(w.GetType()).(*pipepb.FieldType) // compared nullability aside
		wt.Nullable = f.GetType().GetNullable()
		one := func(name string, t *pipepb.FieldType) *pipepb.Schema {
			return &pipepb.Schema{Fields: []*pipepb.Field{{Name: name, Type: t}}}
		}
		if err := translate.SameRowLayout(one(f.GetName(), wt), one(f.GetName(), f.GetType())); err != nil {
			p.err = fmt.Errorf("the writer's and the read's types differ: %w", err)
			return p
		}
		p.from = append(p.from, j)
	}
	return p
}

// row appends the read's row of the writer's fields fv.
func (p *writerPlan) row(dst []byte, reader []*pipepb.Field, fv *avroFields, id int) ([]byte, error) {
	null := func(i int) bool { j := p.from[i]; return j < 0 || fv.nulls[j] }
	for i, f := range reader {
		if null(i) && !f.GetType().GetNullable() {
			return nil, fmt.Errorf("field %q: null in the writer's datum (schema id %d), and not nullable in the read's schema", f.GetName(), id)
		}
	}
	dst = appendRowHeader(dst, len(reader), null)
	for i := range reader {
		if !null(i) {
			dst = append(dst, fv.value(p.from[i])...)
		}
	}
	return dst, nil
}
