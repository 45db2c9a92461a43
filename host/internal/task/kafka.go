package task

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Kafka IO: the source root (a user's topic, RootKafkaSource) and the sink
// (Sink.KafkaWrite).
//
// The conversions between records and elements are host/internal/kafkaio's.
//
// The source's watermark (DESIGN.md §5; docs/architecture.md): the largest
// record timestamp seen less Env.SourceMaxDelay (Java KafkaIO's maxDelay);
// once the partition is caught up as of a time T and no record came for
// Env.SourceIdleTimeout before T, T less the delay. It never passes data in
// flight: the task reports it after closing the cycle's bundles, and a
// record's timestamp behind it is late data that the windowing strategy
// handles. An unbounded read never reaches +inf: it ends only by Cancel; a
// bounded one (kafkabound.go) reports +inf once it ended.
//
// Caught up as of T (Listed) means the task has handled every record below
// the partition's end offset (last stable offset) as a ListOffsets request
// sent at T listed it: a record appended after T has a later timestamp
// (CreateTime less the producer's own delay), one appended before it was
// handled. Neither a poll's return time nor a fetch's high watermark says
// that: a fetch may have waited in the client's buffer across a stalled
// cycle, and a partition a poll did not bring may have records the client
// has not fetched yet; both made records late (issue 12).

// DefaultSourceIdleTimeout is Env.SourceIdleTimeout when unset.
const DefaultSourceIdleTimeout = time.Second

// kafkaSource is the root of a RootKafkaSource sub-topology: one partition
// of the user's topic.
type kafkaSource struct {
	t        *Task
	read     *translate.KafkaRead
	key, val kafkaio.Encoder
	record   kafkaio.RecordEncoder   // a read with metadata: the record row
	payload  kafkaio.PayloadEncoder  // a payload row read: the value's row
	errorRow kafkaio.ErrorRowEncoder // a read with an error output
	scratch  []byte

	maxTs int64 // largest element timestamp routed; minWatermark: none
	// deadLettered and skipped count the bad records of the Handle call
	// (deadletter.go).
	deadLettered, skipped int64
	errored               int64 // records sent to the error output
	// next is the offset after the last record handled, or the end a
	// fetch without records of the partition showed; -1: none yet.
	next       int64
	lastRecord time.Time
	// caughtUpAt is the latest T the partition was caught up as of
	// (Listed; zero: never): as far as an idle partition's watermark may
	// follow wall time.
	caughtUpAt time.Time

	bound *sourceBound // nil: an unbounded read (kafkabound.go)
}

func newKafkaSource(t *Task) (*kafkaSource, error) {
	r := t.sub.Root
	if r.KafkaRead == nil {
		return nil, fmt.Errorf("sub-topology %d: a Kafka source without its spec", t.sub.ID)
	}
	src := &kafkaSource{t: t, read: r.KafkaRead, maxTs: minWatermark, next: -1, lastRecord: t.now()}
	var err error
	if src.bound, err = newSourceBound(t, t.env.ReadBounds[t.sub.ID]); err != nil {
		return nil, err
	}
	if src.bound == nil && t.env.Draining != nil {
		// An unbounded read ends where it is when the job drains.
		src.bound = &sourceBound{quota: -1, resume: -1}
	}
	if r.KafkaRead.PayloadRow {
		return src, src.newPayload()
	}
	if r.KafkaRead.WithMetadata {
		elem, err := elemCoder(t.env.Plan, r.Output)
		if err == nil {
			src.record, err = kafkaio.NewRecordEncoder(t.env.Plan.Pipeline.GetComponents().GetCoders(), elem)
		}
		if err != nil {
			return nil, fmt.Errorf("transform %s: output %s: %w", r.TransformID, r.Output, err)
		}
		return src, nil
	}
	key, val, err := kafkaKV(t.env.Plan, r.Output)
	if err != nil {
		return nil, fmt.Errorf("transform %s: output %s: %w", r.TransformID, r.Output, err)
	}
	ke, err := kafkaio.NewEncoder(t.env.Plan.Pipeline.GetComponents().GetCoders(), key, r.KafkaRead.KeyFormat)
	if err != nil {
		return nil, fmt.Errorf("transform %s: key: %w", r.TransformID, err)
	}
	ve, err := kafkaio.NewEncoder(t.env.Plan.Pipeline.GetComponents().GetCoders(), val, r.KafkaRead.ValueFormat)
	if err != nil {
		return nil, fmt.Errorf("transform %s: value: %w", r.TransformID, err)
	}
	src.key, src.val = ke, ve
	return src, nil
}

// elemCoder returns the element coder id of a PCollection's wire coder.
func elemCoder(plan *translate.Plan, pcoll string) (string, error) {
	wv := plan.Pipeline.GetComponents().GetCoders()[plan.WireCoders[pcoll]]
	if wv == nil || len(wv.GetComponentCoderIds()) != 2 {
		return "", fmt.Errorf("no windowed value wire coder")
	}
	return wv.GetComponentCoderIds()[0], nil
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

// data is never called: a source's records are the user's, which
// handleSource gives to emit whole.
func (s *kafkaSource) data([]byte, int64) error {
	return fmt.Errorf("sub-topology %d: a Kafka source takes the user's records, not internal ones", s.t.sub.ID)
}

// emit emits one record's element; now is the time the Handle call the
// record is in started (reading the clock once per record was a tenth of an
// instance's CPU at 200,000 records/s). It reports whether it emitted it:
// the caller then sets lastRecord, once per call.
func (s *kafkaSource) emit(rec *kgo.Record, now time.Time) (bool, error) {
	t := s.t
	if (s.bound != nil && s.bound.ended(now)) || t.draining() {
		s.bound.drop(rec) // neither emitted nor committed (SourceEnd)
		return false, nil
	}
	ts := s.timestamp(rec)
	b := windowedHeader(s.scratch[:0], ts)
	if s.record != nil {
		b = s.record(b, rec)
	} else if s.payload != nil {
		var err error
		if b, err = s.payload(b, rec); err != nil {
			return false, err
		}
	} else {
		var err error
		if b, err = s.key(b, rec.Key); err != nil {
			return false, &decodeError{"key", err}
		}
		if b, err = s.val(b, rec.Value); err != nil {
			return false, &decodeError{"value", err}
		}
	}
	s.scratch = b
	s.maxTs = max(s.maxTs, ts)
	s.next = rec.Offset + 1
	if s.bound != nil {
		s.bound.emitted++
	}
	return true, t.route(t.sub.Root.Output, b)
}

// timestamp is a record's element timestamp, per the read's policy.
func (s *kafkaSource) timestamp(rec *kgo.Record) int64 {
	if s.read.TimestampPolicy == translate.TimestampProcessingTime {
		return s.t.now().UnixMilli()
	}
	return rec.Timestamp.UnixMilli()
}

// windowedHeader appends the windowed value's header of a source's
// element at ts to dst.
func windowedHeader(dst []byte, ts int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, state.EventTimeBits(ts))
	dst = binary.BigEndian.AppendUint32(dst, 1) // the global window, encoded as nothing
	return append(dst, 0x0F)                    // pane: no firing
}

// fetched records a fetch of the partition: its high watermark (last
// stable offset) and how many records it brought. A fetch without records
// (and without an error) says the position is the high watermark, even
// when the task has handled no record yet; it says nothing about when.
func (s *kafkaSource) fetched(highWater int64, records int) {
	if records == 0 {
		s.next = max(s.next, highWater)
	}
}

// listed takes a ListOffsets answer: the partition ended at end as of at,
// when the request was sent. from is where consumption started when the
// task has handled nothing (the committed offset, or the offset the reset
// policy resolved to); -1: unknown.
func (s *kafkaSource) listed(at time.Time, end, from int64) {
	pos := s.next
	if pos < 0 {
		pos = from
	}
	if pos >= 0 && pos >= end && at.After(s.caughtUpAt) {
		s.caughtUpAt = at
	}
}

func (s *kafkaSource) prepare(context.Context, int64) error { return s.bound.save(s.t) }

func (s *kafkaSource) watermark(int64) (int64, error) {
	if s.bound.ended(s.t.now()) || s.t.draining() {
		return maxWatermark, nil // every record emitted is in this cycle or before
	}
	bound := s.t.env.SourceMaxDelay.Milliseconds()
	wm := minWatermark
	if s.maxTs > minWatermark {
		wm = s.maxTs - bound
	}
	if at := s.caughtUpAt; !at.IsZero() && at.Sub(s.lastRecord) >= s.t.idleTimeout() {
		wm = max(wm, at.UnixMilli()-bound)
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
// of its partition in a fetch and how many records the fetch brought;
// other tasks ignore it. The runtime calls it before Handle gets the
// fetch's records.
func (t *Task) Fetched(highWater int64, records int) {
	if s, ok := t.root.(*kafkaSource); ok {
		s.fetched(highWater, records)
	}
}

// Listed tells a Kafka source task that its partition's end offset (last
// stable offset) was end as of at, the time the ListOffsets request that
// listed it was sent (Env.Now); from is the offset its consumption started
// at if known (the group's committed offset, or what the reset policy
// resolved to), else -1. Other tasks ignore it.
func (t *Task) Listed(at time.Time, end, from int64) {
	if s, ok := t.root.(*kafkaSource); ok {
		s.listed(at, end, from)
	}
}

// handleSource hands a source task's records, the user's own without an
// envelope, to its root. A record its deserializers cannot decode is
// handled per Env.BadRecords (deadletter.go); under PolicyFail the error
// is a *BadRecordError returned after the records before it were handed
// on, the rest of recs untouched.
func (t *Task) handleSource(ctx context.Context, s *kafkaSource, recs []*kgo.Record) error {
	var bad error
	now, emitted := t.now(), false
	for _, r := range recs {
		ok, err := s.emit(r, now)
		emitted = emitted || ok
		if err != nil {
			if err = t.badSourceRecord(s, r, err); err != nil {
				if _, ok := err.(*BadRecordError); !ok {
					return err
				}
				bad = err
				break
			}
		}
	}
	if emitted {
		// When it last handled a record, as idleness counts it: after the
		// records, not when the call started.
		s.lastRecord = t.now()
	}
	t.flushBadRecords(s)
	if err := t.flushStages(ctx, false); err != nil {
		return err
	}
	return bad
}

// kafkaSink is a Sink.KafkaWrite's serializers.
type kafkaSink struct {
	key, val kafkaio.Decoder
	row      kafkaio.WriteRowDecoder // a write with headers
	payload  kafkaio.PayloadDecoder  // a payload row write
	// structured: payload is a JSON, Avro or PROTO write's
	structured bool
	// errorRow (a write with an error output) makes the error rows of
	// input rows the format cannot hold.
	errorRow kafkaio.WriteErrorRowEncoder
	scratch  []byte
}

func newKafkaSink(plan *translate.Plan, s *translate.Sink) (*kafkaSink, error) {
	if s.KafkaWrite.PayloadRow {
		return newPayloadSink(plan, s)
	}
	if s.KafkaWrite.WithHeaders {
		elem, err := elemCoder(plan, s.PCollection)
		if err != nil {
			return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
		}
		rd, err := kafkaio.NewWriteRowDecoder(plan.Pipeline.GetComponents().GetCoders(), elem)
		if err != nil {
			return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
		}
		return &kafkaSink{row: rd}, nil
	}
	key, val, err := kafkaKV(plan, s.PCollection)
	if err != nil {
		return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
	}
	coders := plan.Pipeline.GetComponents().GetCoders()
	kd, err := kafkaio.NewDecoder(coders, key, s.KafkaWrite.KeyFormat)
	if err != nil {
		return nil, fmt.Errorf("transform %s: key: %w", s.TransformID, err)
	}
	vd, err := kafkaio.NewDecoder(coders, val, s.KafkaWrite.ValueFormat)
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
	// The record's key and value alias raw and are produced after this
	// returns, but raw is valid only during the executor's emit or a
	// source's route (a WASM executor reuses its output chunk, a source
	// its scratch): they need bytes of their own.
	raw = bytes.Clone(raw)
	wv, err := t.env.Codecs[pcoll].Next(raw)
	if err != nil {
		return fmt.Errorf("transform %s: %w", s.TransformID, err)
	}
	if ks.row != nil {
		return t.sinkRowToKafka(s, ks, wv.Elem)
	}
	if ks.payload != nil {
		return t.sinkPayloadToKafka(s, ks, wv)
	}
	kb, vb, err := t.env.Codecs[pcoll].SplitKV(wv.Elem)
	if err != nil {
		return fmt.Errorf("transform %s: %w", s.TransformID, err)
	}
	rec := &kgo.Record{Topic: s.Topic}
	if rec.Key, err = ks.key(kb); err != nil {
		return t.badSinkElement(s, wv, kb, vb, rec, false, fmt.Errorf("key: %w", err))
	}
	if rec.Value, err = ks.val(vb); err != nil {
		return t.badSinkElement(s, wv, kb, vb, rec, false, fmt.Errorf("value: %w", err))
	}
	if err := t.checkSize(rec); err != nil {
		return t.badSinkElement(s, wv, kb, vb, rec, true, err)
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

// sinkRowToKafka produces a write-with-headers row: its key, value and
// headers, to the row's topic (the write's when null) and partition (the
// default partitioner's when null), at the row's timestamp (the
// producer's clock when null), as Java's KafkaIO.WriteWithHeaders.
//
// A row's topic must be one Run found (Env.Topics.Outputs: the topics of
// the pipeline's Kafka writes, DESIGN.md §3): ksrunner never creates a
// topic nor learns of one mid-job, so a row naming another fails the task,
// naming the topic and the transform, as does a partition the topic does
// not have.
func (t *Task) sinkRowToKafka(s *translate.Sink, ks *kafkaSink, elem []byte) error {
	row, err := ks.row(elem)
	if err != nil {
		return fmt.Errorf("transform %s: write row: %w", s.TransformID, err)
	}
	rec := &row.Record
	rec.Topic = s.Topic
	if row.Topic != "" {
		rec.Topic = row.Topic
	}
	n := t.env.Topics.Outputs[rec.Topic]
	if n <= 0 {
		return fmt.Errorf("transform %s (%s): a row names topic %q, which is not a topic the job writes (rows may name the topics of the pipeline's Kafka writes, which exist at Run; ksrunner creates none)", s.TransformID, t.transformName(s.TransformID), rec.Topic)
	}
	switch {
	case row.HasPartition && row.Partition >= n:
		return fmt.Errorf("transform %s (%s): a row names partition %d of topic %q, which has %d", s.TransformID, t.transformName(s.TransformID), row.Partition, rec.Topic, n)
	case row.HasPartition:
		shuffle.SetPartition(rec, row.Partition)
	case rec.Key == nil:
		rec.Partition = (t.rr.Add(1) & 0x7fffffff) % n
	}
	t.env.Produce(rec)
	return nil
}

// transformName is a transform's unique name, for messages.
func (t *Task) transformName(id string) string {
	return t.env.Plan.Pipeline.GetComponents().GetTransforms()[id].GetUniqueName()
}
