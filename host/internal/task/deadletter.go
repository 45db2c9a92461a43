package task

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Bad records: a record a Kafka read's key or value deserializer cannot
// decode, or an element a Kafka write cannot produce (its serializer
// fails, or the record is larger than its topic or the producer allows).
// Env.BadRecords says what happens to them; none is ever dropped without
// being counted:
//
//   - PolicyFail: the task fails naming the transform and the record (a
//     read: topic, partition and offset, as a *BadRecordError, after the
//     records before it were handled, so that the runtime can commit up to
//     it and a rerun resumes at it).
//   - PolicyDeadLetter: the record goes to Topics.DeadLetter in the task's
//     commit cycle (its transaction, under exactly_once), keeping the raw
//     key and value, with KIP-1034's headers naming the error and the
//     origin; counted in ksrunner/dead_lettered_records of the transform.
//   - PolicySkip: dropped and counted in ksrunner/skipped_records.
//
// Both counters are host metrics of the transform (hostCounter), committed
// with the cycle like a bundle's.

// ErrorPolicy is what Kafka IO does with a bad record.
type ErrorPolicy string

// The values of option deserialization_error_policy.
const (
	PolicyFail       ErrorPolicy = "fail"
	PolicyDeadLetter ErrorPolicy = "dead_letter"
	PolicySkip       ErrorPolicy = "skip"
)

// The headers of a dead-letter record: KIP-1034's (Kafka Streams'
// ExceptionHandlerUtils; no stack trace, which a Go error does not have),
// then ksrunner's own.
const (
	// HeaderException is the kind of error, as the Kafka exception class
	// Kafka Streams would name.
	HeaderException = "__streams.errors.exception"
	// HeaderMessage is the error's message.
	HeaderMessage = "__streams.errors.message"
	// HeaderTopic, HeaderPartition and HeaderOffset are the record's origin:
	// for a read, the user's record; for a write, the task's input
	// partition (offset -1: an element comes out of a bundle, not of one
	// input record).
	HeaderTopic     = "__streams.errors.topic"
	HeaderPartition = "__streams.errors.partition"
	HeaderOffset    = "__streams.errors.offset"
	// HeaderTransform is the unique name of the Kafka read or write (as
	// the pipeline names it: its id when it has no unique name).
	HeaderTransform = "__ksrunner.errors.transform"
	// HeaderDestination is, for a write, the topic it was written to.
	HeaderDestination = "__ksrunner.errors.destination"
	// HeaderEncoding is, for a write, how the key and value are encoded:
	// "kafka" (serialized) or "beam" (the element's Beam encoding, when a
	// serializer failed).
	HeaderEncoding = "__ksrunner.errors.encoding"
)

// The exception classes of HeaderException.
const (
	ExceptionSerialization  = "org.apache.kafka.common.errors.SerializationException"
	ExceptionRecordTooLarge = "org.apache.kafka.common.errors.RecordTooLargeException"
)

// The host metrics of bad records, by transform.
const (
	MetricDeadLettered = "dead_lettered_records"
	MetricSkipped      = "skipped_records"
	// MetricErrorOutput counts the records a read sent to its error
	// output (error_handling).
	MetricErrorOutput = "error_output_records"
)

// recordOverhead bounds what a record adds to its key, value and headers
// in a produce request (record batch header, varints, attributes): a
// record is too large when its payload plus this exceeds the limit. It
// errs on the side of too large by a few dozen bytes.
const recordOverhead = 128

// BadRecordError is a Kafka read's record its deserializers cannot decode,
// under PolicyFail. The records of the partition before it were handled.
type BadRecordError struct {
	Transform   string // id
	Name        string // unique name
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Err         error
}

func (e *BadRecordError) Error() string {
	return fmt.Sprintf("transform %s (%s): topic %s partition %d offset %d: %v (deserialization_error_policy %s; %s or %s would go on)",
		e.Transform, e.Name, e.Topic, e.Partition, e.Offset, e.Err, PolicyFail, PolicyDeadLetter, PolicySkip)
}

func (e *BadRecordError) Unwrap() error { return e.Err }

// decodeError is the error of a Kafka read's deserializer: the record is
// bad, the task is not.
type decodeError struct {
	field string // "key" or "value"
	err   error
}

func (e *decodeError) Error() string { return e.field + ": " + e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// uniqueName is a transform's unique name (its id if it has none).
func (t *Task) uniqueName(id string) string {
	if n := t.transformName(id); n != "" {
		return n
	}
	return id
}

func (t *Task) policy() ErrorPolicy {
	if t.env.BadRecords == "" {
		return PolicyFail
	}
	return t.env.BadRecords
}

// badSourceRecord handles the error of a source record: a decode error per
// the policy (nil: go on), any other error as the task's failure.
func (t *Task) badSourceRecord(s *kafkaSource, r *kgo.Record, err error) error {
	tr := t.sub.Root.TransformID
	name := t.uniqueName(tr)
	var de *decodeError
	if !errors.As(err, &de) {
		return fmt.Errorf("transform %s (%s): topic %s partition %d offset %d: %w", tr, name, r.Topic, r.Partition, r.Offset, err)
	}
	switch {
	case s.errorRow != nil:
		// The read's error output (error_handling) takes it, whatever the
		// policy: the pipeline handles it.
		if err := s.emitError(r, de); err != nil {
			return err
		}
		s.errored++
	case t.policy() == PolicyDeadLetter:
		dl := &kgo.Record{
			Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
			Headers: []kgo.RecordHeader{
				{Key: HeaderException, Value: []byte(ExceptionSerialization)},
				{Key: HeaderMessage, Value: []byte(de.Error())},
				{Key: HeaderTopic, Value: []byte(r.Topic)},
				{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
				{Key: HeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
				{Key: HeaderTransform, Value: []byte(name)},
			},
		}
		if err := t.deadLetter(dl, r.Partition); err != nil {
			return fmt.Errorf("transform %s (%s): topic %s partition %d offset %d: %w: dead-lettering it: %w", tr, name, r.Topic, r.Partition, r.Offset, de, err)
		}
		s.deadLettered++
	case t.policy() == PolicySkip:
		s.skipped++
	default:
		return &BadRecordError{Transform: tr, Name: name, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, LeaderEpoch: r.LeaderEpoch, Err: de}
	}
	// Handled: the partition's position moves past it (data did not).
	s.next = r.Offset + 1
	return nil
}

// flushBadRecords counts the source's dead-lettered and skipped records
// in the cycle's metrics.
func (t *Task) flushBadRecords(s *kafkaSource) {
	var infos []*pipepb.MonitoringInfo
	if s.deadLettered > 0 {
		infos = append(infos, hostCounter(t.sub.Root.TransformID, MetricDeadLettered, s.deadLettered))
	}
	if s.skipped > 0 {
		infos = append(infos, hostCounter(t.sub.Root.TransformID, MetricSkipped, s.skipped))
	}
	if s.errored > 0 {
		infos = append(infos, hostCounter(t.sub.Root.TransformID, MetricErrorOutput, s.errored))
	}
	s.deadLettered, s.skipped, s.errored = 0, 0, 0
	t.addMetrics(infos)
}

// deadLetter produces r to the dead-letter topic in the task's cycle. A
// keyless record goes to the partition of its origin's modulo the topic's.
func (t *Task) deadLetter(r *kgo.Record, origin int32) error {
	r.Topic = t.env.Topics.DeadLetter
	if r.Topic == "" {
		return errors.New("no dead-letter topic")
	}
	if err := t.checkSize(r); err != nil {
		return err
	}
	if r.Key == nil {
		if n := t.env.Topics.DeadLetterPartitions; n > 0 {
			r.Partition = origin % n
		}
	}
	t.env.Produce(r)
	return nil
}

// checkSize fails a record larger than its topic's max.message.bytes or
// the producer's limit, which the producer would fail asynchronously,
// aborting the whole cycle without naming the element's transform.
func (t *Task) checkSize(r *kgo.Record) error {
	limit := t.env.MaxRecordBytes
	if m, ok := t.env.Topics.MaxMessageBytes[r.Topic]; ok && (limit <= 0 || m < limit) {
		limit = m
	}
	if limit <= 0 {
		return nil
	}
	size := len(r.Key) + len(r.Value) + recordOverhead
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if size > int(limit) {
		return &tooLargeError{topic: r.Topic, size: size, limit: limit}
	}
	return nil
}

// checkInternalSize fails an element of pcoll too large for a record of
// the internal topic it goes to (a Kafka name), naming both, rather than
// leave it to the producer, which would fail the whole cycle naming only
// the topic. A record holds the element and at most its key again (an
// unpacked KV record), which the bound counts.
func (t *Task) checkInternalSize(topic, pcoll string, raw []byte) error {
	if 1+2*len(raw)+recordOverhead <= t.sinkLimit {
		return nil // the common case, without a lookup per element
	}
	limit := t.env.Topics.RecordLimit(topic)
	if size := 1 + 2*len(raw) + recordOverhead; size <= int(limit) {
		return nil
	}
	// The exact size: the key is a part of the element.
	size := 1 + len(raw) + recordOverhead
	if codec := t.env.Codecs[pcoll]; codec != nil && codec.IsKV() {
		if wv, err := codec.Next(raw); err == nil {
			if key, _, err := codec.SplitKV(wv.Elem); err == nil {
				size += len(key)
			}
		}
	}
	if size <= int(limit) {
		return nil
	}
	return fmt.Errorf("pcollection %s: an element of %d bytes does not fit in a record of topic %s, which takes at most %d bytes (its max.message.bytes: internal_max_message_bytes for the topics a job creates, at most 67108864; an element crosses such a topic whole, as does a group but where a ParDo with side inputs reads it in pieces)", t.pcollName(pcoll), len(raw), topic, limit)
}

// smallestSinkLimit is the smallest record limit of the internal topics
// the task writes.
func (t *Task) smallestSinkLimit() int {
	limit := math.MaxInt
	for _, s := range t.sub.Sinks {
		if s.KafkaWrite == nil {
			limit = min(limit, int(t.env.Topics.RecordLimit(t.env.Topics.Full(s.Topic))))
		}
	}
	return limit
}

type tooLargeError struct {
	topic string
	size  int
	limit int32
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("a record of about %d bytes, topic %s takes at most %d (max.message.bytes, or the producer's batch limit)", e.size, e.topic, e.limit)
}

// badSinkElement handles an element a Kafka write cannot produce: err is
// its serializer's failure (rec.Key or rec.Value unset) or the record's
// size (rec whole); kb and vb are the element's encoded key and value. It
// returns the task's failure (PolicyFail, or a dead letter that cannot be
// produced either), or nil.
func (t *Task) badSinkElement(s *translate.Sink, wv shuffle.WindowedValue, kb, vb []byte, rec *kgo.Record, serialized bool, err error) error {
	key := rec.Key // nil if the key did not serialize (or is null)
	exception := ExceptionSerialization
	var tl *tooLargeError
	if errors.As(err, &tl) {
		exception = ExceptionRecordTooLarge
	}
	fail := func(err error) error {
		return fmt.Errorf("transform %s (%s): topic %s: element %s: %w", s.TransformID, t.uniqueName(s.TransformID), s.Topic, describeElement(wv, kb, key), err)
	}
	switch t.policy() {
	case PolicyDeadLetter:
		dl := &kgo.Record{Key: rec.Key, Value: rec.Value, Timestamp: wvTime(wv)}
		encoding := "kafka"
		if !serialized {
			dl.Key, dl.Value, encoding = kb, vb, "beam"
		}
		dl.Headers = []kgo.RecordHeader{
			{Key: HeaderException, Value: []byte(exception)},
			{Key: HeaderMessage, Value: []byte(err.Error())},
			{Key: HeaderTopic, Value: []byte(t.env.Topics.Full(t.sub.Input))},
			{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(t.partition), 10)},
			{Key: HeaderOffset, Value: []byte("-1")},
			{Key: HeaderTransform, Value: []byte(t.uniqueName(s.TransformID))},
			{Key: HeaderDestination, Value: []byte(s.Topic)},
			{Key: HeaderEncoding, Value: []byte(encoding)},
		}
		if derr := t.deadLetter(dl, t.partition); derr != nil {
			return fail(fmt.Errorf("%w; dead-lettering it: %w", err, derr))
		}
		t.addMetrics([]*pipepb.MonitoringInfo{hostCounter(s.TransformID, MetricDeadLettered, 1)})
		return nil
	case PolicySkip:
		t.addMetrics([]*pipepb.MonitoringInfo{hostCounter(s.TransformID, MetricSkipped, 1)})
		return nil
	}
	return fail(err)
}

// describeElement names an element of a Kafka write in messages: its
// serialized key, or (nil) its key's Beam encoding kb, shortened, and its
// timestamp.
func describeElement(wv shuffle.WindowedValue, kb, key []byte) string {
	k, form := key, "key"
	if k == nil {
		k, form = kb, "encoded key"
	}
	const most = 64
	suffix := ""
	if len(k) > most {
		k, suffix = k[:most], "..."
	}
	return fmt.Sprintf("with %s %q%s at %s", form, k, suffix, time.UnixMilli(wv.Timestamp).UTC().Format(time.RFC3339Nano))
}

// wvTime is an element's timestamp as a record's (zero, which the producer
// makes now, outside Kafka's range).
func wvTime(wv shuffle.WindowedValue) time.Time {
	if wv.Timestamp < 0 || wv.Timestamp >= maxWatermark {
		return time.Time{}
	}
	return time.UnixMilli(wv.Timestamp)
}

// pcollName describes PCollection id for messages: its id and the
// transform producing it.
func (t *Task) pcollName(id string) string {
	ts := t.env.Plan.Pipeline.GetComponents().GetTransforms()
	for _, tid := range slices.Sorted(maps.Keys(ts)) {
		if len(ts[tid].GetSubtransforms()) > 0 {
			continue // a composite: its leaf names the producer
		}
		for _, out := range ts[tid].GetOutputs() {
			if out == id {
				return fmt.Sprintf("%s (output of transform %q)", id, t.uniqueName(tid))
			}
		}
	}
	return id
}
