package translate

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// The layout of the Kafka IO primitives (kafka.go):
//
//   - A URNKafkaRead heads a sub-topology of its own per topic it reads,
//     whose input Topic is the user's topic (TopicKafka, named as the user
//     named it, partition count discovered by the host at Run) and whose
//     root is RootKafkaSource, carrying the decoded spec: one task per
//     partition of the user's topic. A read of several topics writes them
//     all to a flatten topic (TopicRedistribute "<read>-flatten") whose
//     passthrough sub-topology produces the read's output, as a Flatten of
//     inputs from several sub-topologies is laid out: the read's consumers
//     then have one producing sub-topology, at the cost of one hop.
//   - A URNKafkaWrite is a Sink of its input PCollection, in the
//     sub-topology producing it, with Sink.KafkaWrite set and Sink.Topic the
//     user's topic (not a Plan topic).
//
// What the host does not run yet is refused here, naming the transform.

// urnCoderNullable is Beam's NullableCoder (Java, Python; the Go SDK's
// nullable KVs in cross-language outputs).
const urnCoderNullable = "beam:coder:nullable:v1"

// kafkaConsumerResets are the values of auto.offset.reset the host honours
// (none: a partition without a committed offset, and without
// start_read_time, fails the job), besides by_duration:D
// (KafkaRead.ResetByDuration).
var kafkaConsumerResets = map[string]bool{"earliest": true, "latest": true, "none": true}

// resetByDurationPrefix starts Kafka 4.0's auto.offset.reset by_duration:D
// (KIP-1106).
const resetByDurationPrefix = "by_duration:"

// ResetByDuration reports whether the read's auto.offset.reset is
// by_duration:D, and D: a partition without a committed offset (and
// without start_read_time) starts at its first record whose timestamp is
// no more than D before the read starts, or at its end when none is, as
// Kafka 4.0's consumer resets (KIP-1106). ok is false for any other value,
// and for a D that does not parse, which the translation refused.
func (r *KafkaRead) ResetByDuration() (d time.Duration, ok bool) {
	v, ok := strings.CutPrefix(r.ConsumerConfig["auto.offset.reset"], resetByDurationPrefix)
	if !ok {
		return 0, false
	}
	d, err := ParseISODuration(v)
	return d, err == nil
}

// isoDuration is the ISO-8601 duration Java's Duration.parse reads, which
// Kafka's by_duration takes: PnDTnHnMn.nS, each part optional and signed,
// the letters in either case, the fraction of seconds up to 9 digits.
var isoDuration = regexp.MustCompile(`^(?i)([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?$`)

// ParseISODuration parses an ISO-8601 duration as Java's Duration.parse
// does (PT1H, P1DT12H, PT0.5S); Kafka's by_duration refuses negative ones,
// and so does this.
func ParseISODuration(v string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(v)
	if m == nil || m[3] == "T" || (m[2] == "" && m[3] == "") {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration such as PT1H or P1DT12H", v)
	}
	var total float64 // seconds; float64 keeps far more range than any offset lookup needs
	for _, part := range []struct {
		group   int
		seconds float64
	}{{2, 86400}, {4, 3600}, {5, 60}, {6, 1}} {
		if m[part.group] == "" {
			continue
		}
		n, err := strconv.ParseInt(m[part.group], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", v, err)
		}
		total += float64(n) * part.seconds
	}
	if m[7] != "" {
		frac, _ := strconv.ParseFloat("0."+m[7], 64)
		if strings.HasPrefix(m[6], "-") {
			frac = -frac
		}
		total += frac
	}
	if m[1] == "-" {
		total = -total
	}
	if total < 0 {
		return 0, fmt.Errorf("%q is negative", v)
	}
	if total > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("%q is too long", v)
	}
	return time.Duration(total * float64(time.Second)), nil
}

// addKafkaRead validates a URNKafkaRead leaf and records it.
func (t *translator) addKafkaRead(id string, tr *pipepb.PTransform) error {
	name := tr.GetUniqueName()
	if len(tr.GetInputs()) != 0 {
		return fmt.Errorf("transform %q: a Kafka read needs no input, has %d", name, len(tr.GetInputs()))
	}
	r, err := DecodeKafkaRead(tr.GetSpec().GetPayload())
	if err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	if _, _, err := KafkaReadOutputs(tr.GetOutputs(), r); err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	if r.ErrorOutput != "" && len(r.Topics) != 1 {
		return fmt.Errorf("transform %q: a Kafka read with an error output reads one topic, not %d", name, len(r.Topics))
	}
	for _, topic := range r.Topics {
		if !validTopicName(topic) {
			return fmt.Errorf("transform %q: %q is not a valid Kafka topic name", name, topic)
		}
	}
	if r.WithMetadata && (r.KeyFormat != KafkaByteArray || r.ValueFormat != KafkaByteArray) {
		return fmt.Errorf("transform %q: a Kafka read with metadata reads ByteArray keys and values (its rows hold bytes), not %s and %s", name, r.KeyFormat, r.ValueFormat)
	}
	if v, ok := r.ConsumerConfig["auto.offset.reset"]; ok && !kafkaConsumerResets[v] {
		d, isDuration := strings.CutPrefix(v, resetByDurationPrefix)
		if !isDuration {
			return fmt.Errorf("transform %q: consumer config auto.offset.reset=%q is not supported (want earliest, latest, none or by_duration:<ISO-8601 duration>)", name, v)
		}
		if _, err := ParseISODuration(d); err != nil {
			return fmt.Errorf("transform %q: consumer config auto.offset.reset=%q: %w", name, v, err)
		}
	}
	if v, ok := r.ConsumerConfig["isolation.level"]; ok && v != "read_committed" {
		return fmt.Errorf("transform %q: consumer config isolation.level=%q is not supported: ksrunner reads read_committed", name, v)
	}
	t.kafkaReads[id] = r
	t.addLeaf(id, kindKafkaRead)
	return nil
}

// addKafkaWrite validates a URNKafkaWrite leaf and records it.
func (t *translator) addKafkaWrite(id string, tr *pipepb.PTransform) error {
	name := tr.GetUniqueName()
	w, err := DecodeKafkaWrite(tr.GetSpec().GetPayload())
	if err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	outputs := 0
	if w.ErrorOutput != "" {
		outputs = 1
		if tr.GetOutputs()[w.ErrorOutput] == "" {
			return fmt.Errorf("transform %q: a Kafka write with error output %q has no output of that name", name, w.ErrorOutput)
		}
	}
	if len(tr.GetInputs()) != 1 || len(tr.GetOutputs()) != outputs {
		return fmt.Errorf("transform %q: a Kafka write needs one input and %d outputs, has %d and %d", name, outputs, len(tr.GetInputs()), len(tr.GetOutputs()))
	}
	switch {
	case w.WithHeaders && w.Topic == "":
		// The topic is where rows without one go, and the one topic Run
		// checks exists besides the pipeline's other Kafka topics: rows
		// may name only topics known at Run (host/internal/task/kafka.go).
		return fmt.Errorf("transform %q: a Kafka write with headers needs its topic (rows without a topic go there)", name)
	case w.WithHeaders && (w.KeyFormat != KafkaByteArray || w.ValueFormat != KafkaByteArray):
		return fmt.Errorf("transform %q: a Kafka write with headers writes ByteArray keys and values (its rows hold bytes), not %s and %s", name, w.KeyFormat, w.ValueFormat)
	case !validTopicName(w.Topic):
		return fmt.Errorf("transform %q: %q is not a valid Kafka topic name", name, w.Topic)
	}
	if v, ok := w.ProducerConfig["transactional.id"]; ok {
		return fmt.Errorf("transform %q: producer config transactional.id=%q is not supported: ksrunner writes in its own transactions", name, v)
	}
	t.kafkaWrites[id] = w
	t.addLeaf(id, kindKafkaWrite)
	return nil
}

// checkKafkaRead checks a read's output coder: the with-metadata record
// row (KafkaRecordSchema), or KV<key, value> of its formats.
func (t *translator) checkKafkaRead(name, pc string, r *KafkaRead) error {
	if r.PayloadRow {
		return t.checkKafkaPayloadRead(name, pc, r)
	}
	if !r.WithMetadata {
		return t.checkKafkaKV(name, "output", pc, r.KeyFormat, r.ValueFormat)
	}
	s, err := t.kafkaRow(name, "output", pc)
	if err != nil {
		return err
	}
	if err := SameRowLayout(s, KafkaRecordSchema()); err != nil {
		return fmt.Errorf("transform %q: output %q: the row is not the Kafka record row of a read with metadata (Java's ByteArrayKafkaRecord): %w", name, pc, err)
	}
	return nil
}

// checkKafkaWrite checks a write's input coder: a write-with-headers row
// (CheckKafkaWriteSchema), or KV<key, value> of its formats.
func (t *translator) checkKafkaWrite(name, pc string, w *KafkaWrite) error {
	if w.PayloadRow {
		return t.checkKafkaPayloadWrite(name, pc, w)
	}
	if !w.WithHeaders {
		return t.checkKafkaKV(name, "input", pc, w.KeyFormat, w.ValueFormat)
	}
	s, err := t.kafkaRow(name, "input", pc)
	if err != nil {
		return err
	}
	if err := CheckKafkaWriteSchema(s); err != nil {
		return fmt.Errorf("transform %q: input %q: %w", name, pc, err)
	}
	return nil
}

// kafkaRow returns the row schema of pc's elements, which must be in the
// global window.
func (t *translator) kafkaRow(name, what, pc string) (*pipepb.Schema, error) {
	w, err := t.wire(pc)
	if err != nil {
		return nil, fmt.Errorf("transform %q: %w", name, err)
	}
	if err := t.checkKafkaGlobal(name, what, pc, w); err != nil {
		return nil, err
	}
	s, err := RowCoderSchema(t.comps.GetCoders(), t.comps.GetCoders()[w].GetComponentCoderIds()[0])
	if err != nil {
		return nil, fmt.Errorf("transform %q: %s %q: %w", name, what, pc, err)
	}
	return s, nil
}

func (t *translator) checkKafkaGlobal(name, what, pc, wire string) error {
	cs := t.comps.GetCoders()
	if wc := cs[cs[wire].GetComponentCoderIds()[1]]; wc.GetSpec().GetUrn() != urnCoderGlobalWindow {
		return fmt.Errorf("transform %q: %s %q is in windows of coder %s; a Kafka %s needs the global window (window after reading, re-window to the global window before writing)", name, what, pc, wc.GetSpec().GetUrn(), map[string]string{"output": "read", "input": "write"}[what])
	}
	return nil
}

// checkKafkaKV checks that the wire coder of pc is KV<key, value> in the
// global window, with key and value coders that the Kafka formats map to
// (what = "output" or "input", for messages).
func (t *translator) checkKafkaKV(name, what, pc, keyFormat, valueFormat string) error {
	w, err := t.wire(pc)
	if err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	if err := t.checkKafkaGlobal(name, what, pc, w); err != nil {
		return err
	}
	cs := t.comps.GetCoders()
	kv := cs[cs[w].GetComponentCoderIds()[0]]
	if kv.GetSpec().GetUrn() != urnCoderKV || len(kv.GetComponentCoderIds()) != 2 {
		return fmt.Errorf("transform %q: %s %q has coder %s, want KV<key, value>", name, what, pc, kv.GetSpec().GetUrn())
	}
	if err := t.checkKafkaCoder(keyFormat, kv.GetComponentCoderIds()[0]); err != nil {
		return fmt.Errorf("transform %q: %s %q: key: %w", name, what, pc, err)
	}
	if err := t.checkKafkaCoder(valueFormat, kv.GetComponentCoderIds()[1]); err != nil {
		return fmt.Errorf("transform %q: %s %q: value: %w", name, what, pc, err)
	}
	return nil
}

// checkKafkaCoder checks that a coder (possibly length-prefixed or
// nullable) encodes values of a Kafka format: ByteArray as bytes, String as
// string_utf8 or bytes, Long and Integer as varint. The host converts
// between them (host/internal/task/kafka.go) with the same rules.
func (t *translator) checkKafkaCoder(format, cid string) error {
	c := t.comps.GetCoders()[cid]
	if c == nil {
		return fmt.Errorf("coder %q is not defined", cid)
	}
	urn := c.GetSpec().GetUrn()
	switch urn {
	case urnCoderLengthPrefix, urnCoderNullable:
		if len(c.GetComponentCoderIds()) != 1 {
			return fmt.Errorf("coder %q: %s needs one component", cid, urn)
		}
		return t.checkKafkaCoder(format, c.GetComponentCoderIds()[0])
	case urnCoderBytes:
		if format == KafkaByteArray || format == KafkaString {
			return nil
		}
	case urnCoderStringUTF8:
		if format == KafkaString {
			return nil
		}
	case urnCoderVarInt:
		if format == KafkaLong || format == KafkaInteger {
			return nil
		}
	}
	return fmt.Errorf("coder %s does not encode the Kafka format %s (want bytes for ByteArray, string_utf8 or bytes for String, varint for Long and Integer, optionally nullable)", urn, format)
}
