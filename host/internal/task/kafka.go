package task

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/translate"
)

// Kafka IO: the source root (a user's topic, RootKafkaSource) and the sink
// (Sink.KafkaWrite).
//
// Formats and coders (translate.checkKafkaCoder allows the same pairs):
// ByteArray is the bytes coder; String is string_utf8 (or bytes), and a
// value that is not UTF-8 does not decode; Long is Kafka's LongSerializer
// (8 bytes, big-endian) as a varint; Integer is IntegerSerializer (4 bytes,
// big-endian) as a varint, sign-extended as the Go and Python SDKs decode
// it. A length_prefix wraps its component's encoding in a varint length; a
// nullable coder writes 0 for a Kafka null and 1 before the value, and a
// null under any other coder does not decode.
//
// The source's watermark (DESIGN.md §5): the largest record timestamp seen
// less SourceOutOfOrderness; once the partition is caught up (the last
// fetch's high watermark reached, or no fetch seen at all) and no record
// came for Env.SourceIdleTimeout, wall time less SourceOutOfOrderness. It
// never passes data in flight: the task reports it after closing the
// cycle's bundles, and a record's timestamp behind it is late data that
// the windowing strategy handles. A source never reaches +inf: an
// unbounded read ends only by Cancel.

// SourceOutOfOrderness is how far behind the largest record timestamp a
// Kafka source's watermark stays: records up to this much out of order
// within a partition are on time.
const SourceOutOfOrderness = time.Second

// DefaultSourceIdleTimeout is Env.SourceIdleTimeout when unset.
const DefaultSourceIdleTimeout = time.Second

// kafkaSource is the root of a RootKafkaSource sub-topology: one partition
// of the user's topic.
type kafkaSource struct {
	t        *Task
	read     *translate.KafkaRead
	key, val kafkaEncoder
	scratch  []byte

	maxTs      int64 // largest element timestamp routed; minWatermark: none
	next       int64 // offset after the last record handled; -1: none yet
	highWater  int64 // of the last fetch; -1: none seen
	lastRecord time.Time
}

func newKafkaSource(t *Task) (*kafkaSource, error) {
	r := t.sub.Root
	if r.KafkaRead == nil {
		return nil, fmt.Errorf("sub-topology %d: a Kafka source without its spec", t.sub.ID)
	}
	key, val, err := kafkaKV(t.env.Plan, r.Output)
	if err != nil {
		return nil, fmt.Errorf("transform %s: output %s: %w", r.TransformID, r.Output, err)
	}
	ke, err := newKafkaEncoder(t.env.Plan.Pipeline.GetComponents().GetCoders(), key, r.KafkaRead.KeyFormat)
	if err != nil {
		return nil, fmt.Errorf("transform %s: key: %w", r.TransformID, err)
	}
	ve, err := newKafkaEncoder(t.env.Plan.Pipeline.GetComponents().GetCoders(), val, r.KafkaRead.ValueFormat)
	if err != nil {
		return nil, fmt.Errorf("transform %s: value: %w", r.TransformID, err)
	}
	return &kafkaSource{t: t, read: r.KafkaRead, key: ke, val: ve, maxTs: minWatermark, next: -1, highWater: -1, lastRecord: t.now()}, nil
}

// kafkaKV returns the key and value coder ids of a KV PCollection's wire
// coder.
func kafkaKV(plan *translate.Plan, pcoll string) (key, value string, err error) {
	cs := plan.Pipeline.GetComponents().GetCoders()
	wv := cs[plan.WireCoders[pcoll]]
	if wv == nil || len(wv.GetComponentCoderIds()) != 2 {
		return "", "", fmt.Errorf("no windowed value wire coder")
	}
	kv := cs[wv.GetComponentCoderIds()[0]]
	if kv.GetSpec().GetUrn() != "beam:coder:kv:v1" || len(kv.GetComponentCoderIds()) != 2 {
		return "", "", fmt.Errorf("coder %s is not a KV coder", kv.GetSpec().GetUrn())
	}
	return kv.GetComponentCoderIds()[0], kv.GetComponentCoderIds()[1], nil
}

func (s *kafkaSource) data(rec *kgo.Record) error {
	t := s.t
	ts := rec.Timestamp.UnixMilli()
	if s.read.TimestampPolicy == translate.TimestampProcessingTime {
		ts = t.now().UnixMilli()
	}
	b := binary.BigEndian.AppendUint64(s.scratch[:0], state.EventTimeBits(ts))
	b = binary.BigEndian.AppendUint32(b, 1) // the global window, encoded as nothing
	b = append(b, 0x0F)                     // pane: no firing
	var err error
	if b, err = s.key(b, rec.Key); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if b, err = s.val(b, rec.Value); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	s.scratch = b
	s.maxTs = max(s.maxTs, ts)
	s.next = rec.Offset + 1
	s.lastRecord = t.now()
	return t.route(t.sub.Root.Output, b)
}

// fetched records a fetch of the partition: its high watermark and how many
// records it brought. A fetch without records (and without an error) says
// the position is the high watermark: the partition is caught up, even
// when the task has handled no record yet.
func (s *kafkaSource) fetched(highWater int64, records int) {
	s.highWater = highWater
	if records == 0 {
		s.next = max(s.next, highWater)
	}
}

func (*kafkaSource) prepare(context.Context, int64) error { return nil }

func (s *kafkaSource) watermark(int64) (int64, error) {
	bound := SourceOutOfOrderness.Milliseconds()
	wm := minWatermark
	if s.maxTs > minWatermark {
		wm = s.maxTs - bound
	}
	now := s.t.now()
	caughtUp := s.highWater < 0 || s.next >= s.highWater
	if caughtUp && now.Sub(s.lastRecord) >= s.t.idleTimeout() {
		wm = max(wm, now.UnixMilli()-bound)
	}
	return min(wm, maxWatermark-1), nil
}

func (t *Task) now() time.Time {
	if t.env.Now != nil {
		return t.env.Now()
	}
	return time.Now()
}

func (t *Task) idleTimeout() time.Duration {
	if t.env.SourceIdleTimeout > 0 {
		return t.env.SourceIdleTimeout
	}
	return DefaultSourceIdleTimeout
}

// Fetched tells a Kafka source task the high watermark (last stable offset)
// of its partition in a fetch and how many records the fetch brought,
// which says whether it is caught up; other tasks ignore it. The runtime
// calls it before Handle gets the fetch's records.
func (t *Task) Fetched(highWater int64, records int) {
	if s, ok := t.root.(*kafkaSource); ok {
		s.fetched(highWater, records)
	}
}

// handleSource hands a source task's records, the user's own without an
// envelope, to its root.
func (t *Task) handleSource(ctx context.Context, s *kafkaSource, recs []*kgo.Record) error {
	for _, r := range recs {
		if err := s.data(r); err != nil {
			return fmt.Errorf("transform %s: topic %s partition %d offset %d: %w", t.sub.Root.TransformID, r.Topic, r.Partition, r.Offset, err)
		}
	}
	return t.flushStages(ctx, false)
}

// kafkaEncoder encodes a Kafka key or value (nil: null) of one format in a
// coder.
type kafkaEncoder func(dst, b []byte) ([]byte, error)

var errNull = errors.New("null, and the coder is not nullable")

func newKafkaEncoder(coders map[string]*pipepb.Coder, cid, format string) (kafkaEncoder, error) {
	c := coders[cid]
	if c == nil {
		return nil, fmt.Errorf("coder %q is not defined", cid)
	}
	urn := c.GetSpec().GetUrn()
	inner := func() (kafkaEncoder, error) {
		if len(c.GetComponentCoderIds()) != 1 {
			return nil, fmt.Errorf("coder %s needs one component", urn)
		}
		return newKafkaEncoder(coders, c.GetComponentCoderIds()[0], format)
	}
	switch {
	case urn == urnLengthPrefix:
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
	case urn == urnNullable:
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
	case urn == urnBytes && (format == translate.KafkaByteArray || format == translate.KafkaString),
		urn == urnStringUTF8 && format == translate.KafkaString:
		check := urn == urnStringUTF8 || format == translate.KafkaString
		return func(dst, b []byte) ([]byte, error) {
			if b == nil {
				return nil, errNull
			}
			if check && !utf8.Valid(b) {
				return nil, fmt.Errorf("%d bytes that are not UTF-8 (String deserializer)", len(b))
			}
			return append(binary.AppendUvarint(dst, uint64(len(b))), b...), nil
		}, nil
	case urn == urnVarInt && format == translate.KafkaLong:
		return func(dst, b []byte) ([]byte, error) {
			if b == nil {
				return nil, errNull
			}
			if len(b) != 8 {
				return nil, fmt.Errorf("%d bytes, the Long deserializer needs 8", len(b))
			}
			return binary.AppendUvarint(dst, binary.BigEndian.Uint64(b)), nil
		}, nil
	case urn == urnVarInt && format == translate.KafkaInteger:
		return func(dst, b []byte) ([]byte, error) {
			if b == nil {
				return nil, errNull
			}
			if len(b) != 4 {
				return nil, fmt.Errorf("%d bytes, the Integer deserializer needs 4", len(b))
			}
			return binary.AppendUvarint(dst, uint64(int64(int32(binary.BigEndian.Uint32(b))))), nil
		}, nil
	}
	return nil, fmt.Errorf("coder %s does not encode the Kafka format %s", urn, format)
}

// kafkaDecoder decodes an encoded key or value (its whole encoding) to a
// Kafka key or value of one format (nil: null).
type kafkaDecoder func(b []byte) ([]byte, error)

func newKafkaDecoder(coders map[string]*pipepb.Coder, cid, format string) (kafkaDecoder, error) {
	c := coders[cid]
	if c == nil {
		return nil, fmt.Errorf("coder %q is not defined", cid)
	}
	urn := c.GetSpec().GetUrn()
	inner := func() (kafkaDecoder, error) {
		if len(c.GetComponentCoderIds()) != 1 {
			return nil, fmt.Errorf("coder %s needs one component", urn)
		}
		return newKafkaDecoder(coders, c.GetComponentCoderIds()[0], format)
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
	case urn == urnLengthPrefix:
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
	case urn == urnNullable:
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
	case urn == urnBytes && (format == translate.KafkaByteArray || format == translate.KafkaString),
		urn == urnStringUTF8 && format == translate.KafkaString:
		return func(b []byte) ([]byte, error) {
			v, err := lengthPrefixed(b)
			if v == nil && err == nil {
				v = []byte{} // empty, not null
			}
			return v, err
		}, nil
	case urn == urnVarInt && format == translate.KafkaLong:
		return func(b []byte) ([]byte, error) {
			v, rest, err := uvarint(b)
			if err != nil || len(rest) != 0 {
				return nil, fmt.Errorf("bad varint")
			}
			return binary.BigEndian.AppendUint64(nil, v), nil
		}, nil
	case urn == urnVarInt && format == translate.KafkaInteger:
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

const (
	urnLengthPrefix = "beam:coder:length_prefix:v1"
	urnNullable     = "beam:coder:nullable:v1"
	urnBytes        = "beam:coder:bytes:v1"
	urnStringUTF8   = "beam:coder:string_utf8:v1"
	urnVarInt       = "beam:coder:varint:v1"
)

// kafkaSink is a Sink.KafkaWrite's serializers.
type kafkaSink struct {
	key, val kafkaDecoder
}

func newKafkaSink(plan *translate.Plan, s *translate.Sink) (*kafkaSink, error) {
	key, val, err := kafkaKV(plan, s.PCollection)
	if err != nil {
		return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
	}
	coders := plan.Pipeline.GetComponents().GetCoders()
	kd, err := newKafkaDecoder(coders, key, s.KafkaWrite.KeyFormat)
	if err != nil {
		return nil, fmt.Errorf("transform %s: key: %w", s.TransformID, err)
	}
	vd, err := newKafkaDecoder(coders, val, s.KafkaWrite.ValueFormat)
	if err != nil {
		return nil, fmt.Errorf("transform %s: value: %w", s.TransformID, err)
	}
	return &kafkaSink{key: kd, val: vd}, nil
}

// sinkToKafka produces one element of a Kafka write to the user's topic,
// in the task's transaction: a keyed record to the partition of Kafka's
// default partitioner (murmur2 of the key, shuffle.Partitioner), a null
// key round-robin.
func (t *Task) sinkToKafka(s *translate.Sink, pcoll string, raw []byte) error {
	ks := t.kafkaSinks[s]
	wv, err := t.env.Codecs[pcoll].Next(raw)
	if err != nil {
		return fmt.Errorf("transform %s: %w", s.TransformID, err)
	}
	kb, vb, err := t.env.Codecs[pcoll].SplitKV(wv.Elem)
	if err != nil {
		return fmt.Errorf("transform %s: %w", s.TransformID, err)
	}
	rec := &kgo.Record{Topic: s.Topic}
	if rec.Key, err = ks.key(kb); err != nil {
		return fmt.Errorf("transform %s: key: %w", s.TransformID, err)
	}
	if rec.Value, err = ks.val(vb); err != nil {
		return fmt.Errorf("transform %s: value: %w", s.TransformID, err)
	}
	if rec.Key == nil {
		n := t.env.Topics.Outputs[s.Topic]
		if n <= 0 {
			return fmt.Errorf("transform %s: topic %s: partition count unknown", s.TransformID, s.Topic)
		}
		rec.Partition = (t.rr.Add(1) & 0x7fffffff) % n
	}
	t.env.Produce(rec)
	return nil
}
