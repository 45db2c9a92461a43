package task

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

// badRecordsEnv is kafkaEnv (read "in" of 3 partitions: String, Long; a
// pass-through; write "out" of 5 partitions) with the write's value format
// valueFormat, under policy, with the dead-letter topic "dlq" of 2
// partitions.
func badRecordsEnv(t *testing.T, policy ErrorPolicy, valueFormat string) (*testEnv, *translate.SubTopology) {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	in := beam.ParDo(s, kafkaSourcePlaceholder, beam.Impulse(s))
	beam.ParDo0(s, kafkaSinkPlaceholder, beam.ParDo(s, kafkaPass, in))
	pp := marshal(t, p)
	rb, err := translate.EncodeKafkaRead(&translate.KafkaRead{Topics: []string{"in"}, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong, TimestampPolicy: translate.TimestampCreateTime})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := translate.EncodeKafkaWrite(&translate.KafkaWrite{Topic: "out", KeyFormat: translate.KafkaString, ValueFormat: valueFormat})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSource(pp, "kafkaSourcePlaceholder", translate.URNKafkaRead, rb); err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSink(pp, "kafkaSinkPlaceholder", translate.URNKafkaWrite, wb); err != nil {
		t.Fatal(err)
	}
	te := newTestEnv(t, pp, 2)
	te.env.BadRecords = policy
	te.env.Topics.SetDeadLetter("dlq", false)
	te.env.Topics.Discovered(map[string]int32{"in": 3, "out": 5, "dlq": 2})
	te.env.Now = func() time.Time { return time.UnixMilli(1_000_000) }
	sub := te.sub(translate.RootKafkaSource)
	te.exec(sub).setFn(func(in shuffle.WindowedValue) [][]byte { return [][]byte{in.Raw} })
	return te, sub
}

// outLongs describes the records produced to "out" (String, Long) as
// userRecords does.
func outLongs(recs []*kgo.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Topic == "out" {
			out = append(out, fmt.Sprintf("out/* %s=%d", r.Key, int64(binary.BigEndian.Uint64(r.Value))))
		}
	}
	return out
}

// deadLetters describes the records produced to "dlq": partition, key,
// value (hex), timestamp and headers in order.
func deadLetters(recs []*kgo.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Topic != "dlq" {
			continue
		}
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		k := "null"
		if r.Key != nil {
			k = fmt.Sprintf("%q", r.Key)
		}
		out = append(out, fmt.Sprintf("dlq/%d key %s value %x @%d %s", r.Partition, k, r.Value, r.Timestamp.UnixMilli(), strings.Join(hs, " ")))
	}
	return out
}

// The source's bad records (a Long over 3 bytes, a null key under the
// non-nullable String coder, a key that is not UTF-8) among good ones:
// dead_letter produces each to the dead-letter topic with its raw key and
// value, its timestamp and KIP-1034's headers, in the cycle, and counts
// them; skip drops and counts them; either way the good records are the
// output, exactly, and the counts are committed only with the cycle.
func TestKafkaSourceBadRecords(t *testing.T) {
	recs := func() []*kgo.Record {
		return []*kgo.Record{
			kafkaRec(1, 10, "a", be8(1), 1000),
			kafkaRec(1, 11, "b", []byte{1, 2, 3}, 2000),
			kafkaRec(1, 12, "c", be8(3), 3000),
			{Topic: "in", Partition: 1, Offset: 13, Value: be8(4), Timestamp: time.UnixMilli(4000)},
			kafkaRec(1, 14, "\xff", be8(5), 5000),
			kafkaRec(1, 15, "d", be8(6), 6000),
		}
	}
	good := []string{"out/* a=1", "out/* c=3", "out/* d=6"}
	for _, tc := range []struct {
		policy             ErrorPolicy
		dead               []string
		deadCount, skipped int64
	}{
		{PolicyDeadLetter, []string{
			`dlq/0 key "b" value 010203 @2000 __streams.errors.exception=org.apache.kafka.common.errors.SerializationException __streams.errors.message=value: 3 bytes, the Long deserializer needs 8 __streams.errors.topic=in __streams.errors.partition=1 __streams.errors.offset=11 __ksrunner.errors.transform=%s`,
			`dlq/1 key null value 0000000000000004 @4000 __streams.errors.exception=org.apache.kafka.common.errors.SerializationException __streams.errors.message=key: null, and the coder is not nullable __streams.errors.topic=in __streams.errors.partition=1 __streams.errors.offset=13 __ksrunner.errors.transform=%s`,
			`dlq/0 key "\xff" value 0000000000000005 @5000 __streams.errors.exception=org.apache.kafka.common.errors.SerializationException __streams.errors.message=key: 1 bytes that are not UTF-8 (String deserializer) __streams.errors.topic=in __streams.errors.partition=1 __streams.errors.offset=14 __ksrunner.errors.transform=%s`,
		}, 3, 0},
		{PolicySkip, nil, 0, 3},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			te, sub := badRecordsEnv(t, tc.policy, translate.KafkaLong)
			tr := sub.Root.TransformID
			tk := te.task(sub, 1)
			ctx := context.Background()
			if err := tk.Handle(ctx, recs()); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if err := tk.PrepareCommit(ctx); err != nil {
				t.Fatal(err)
			}
			if c := counter(t, te.env.Metrics.Committed, tr, MetricDeadLettered) + counter(t, te.env.Metrics.Committed, tr, MetricSkipped); c != 0 {
				t.Errorf("counted %d bad records as committed before the cycle committed", c)
			}
			if err := tk.CommitState(); err != nil {
				t.Fatal(err)
			}
			tk.Finalize(ctx)
			out := te.take()
			checkLines(t, "user output", outLongs(out), good)
			var want []string
			for _, d := range tc.dead {
				// A keyed dead letter's partition is the producer's (its
				// key's hash; the fake producer leaves it 0), a keyless
				// one its origin's modulo the topic's.
				want = append(want, fmt.Sprintf(d, tk.uniqueName(tr)))
			}
			checkLines(t, "dead letters", deadLetters(out), want)
			if got := counter(t, te.env.Metrics.Committed, tr, MetricDeadLettered); got != tc.deadCount {
				t.Errorf("%s committed %d, want %d", MetricDeadLettered, got, tc.deadCount)
			}
			if got := counter(t, te.env.Metrics.Committed, tr, MetricSkipped); got != tc.skipped {
				t.Errorf("%s committed %d, want %d", MetricSkipped, got, tc.skipped)
			}

			// A cycle that aborts counts its bad records as attempted only.
			tk.Handle(ctx, []*kgo.Record{kafkaRec(1, 16, "e", []byte{9}, 7000)})
			tk.Abort()
			if got := counter(t, te.env.Metrics.Committed, tr, MetricDeadLettered) + counter(t, te.env.Metrics.Committed, tr, MetricSkipped); got != 3 {
				t.Errorf("after an aborted cycle: %d bad records committed, want 3", got)
			}
		})
	}
}

// Under fail, the first bad record stops the partition's records: Handle
// returns a *BadRecordError naming the transform, topic, partition and
// offset, after handing on the records before it (not those after).
func TestKafkaSourceBadRecordFails(t *testing.T) {
	for _, policy := range []ErrorPolicy{"", PolicyFail} {
		te, sub := badRecordsEnv(t, policy, translate.KafkaLong)
		tk := te.task(sub, 2)
		ctx := context.Background()
		err := tk.Handle(ctx, []*kgo.Record{
			kafkaRec(2, 4, "a", be8(1), 1000),
			kafkaRec(2, 5, "b", []byte{1, 2, 3}, 2000),
			kafkaRec(2, 6, "c", be8(3), 3000),
		})
		var bad *BadRecordError
		if !errors.As(err, &bad) || bad.Topic != "in" || bad.Partition != 2 || bad.Offset != 5 || bad.Transform != sub.Root.TransformID {
			t.Fatalf("policy %q: Handle = %v, want a BadRecordError of in/2 offset 5", policy, err)
		}
		if want := "transform " + sub.Root.TransformID + " (" + tk.uniqueName(sub.Root.TransformID) + "): topic in partition 2 offset 5: value: 3 bytes, the Long deserializer needs 8"; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q, want it to contain %q", err, want)
		}
		if err := tk.PrepareCommit(ctx); err != nil {
			t.Fatal(err)
		}
		checkLines(t, "user output", outLongs(te.take()), []string{"out/* a=1"})
	}
}

// A write's element the sink cannot produce: a value the Integer
// serializer cannot hold, a record larger than the topic's
// max.message.bytes. fail names the transform, the topic and the element;
// dead_letter produces it to the dead-letter topic (the Beam encoding when
// the serializer failed, else the serialized record) with headers naming
// the write, and counts it; skip counts it; good elements are produced.
func TestKafkaSinkBadElements(t *testing.T) {
	big := strings.Repeat("k", 200)
	for _, tc := range []struct {
		name  string
		rec   *kgo.Record
		limit int32
		fail  string
		dead  string
	}{
		{"integer overflow", kafkaRec(0, 1, "b", be8(1<<40), 2000), 0,
			`topic out: element with key "b" at 1970-01-01T00:00:02Z: value: 1099511627776 does not fit the Integer serializer`,
			`dlq/0 key "\x01b" value 808080808020 @2000 __streams.errors.exception=org.apache.kafka.common.errors.SerializationException __streams.errors.message=value: 1099511627776 does not fit the Integer serializer __streams.errors.topic=in __streams.errors.partition=0 __streams.errors.offset=-1 __ksrunner.errors.transform=%s __ksrunner.errors.destination=out __ksrunner.errors.encoding=beam`},
		{"too large", kafkaRec(0, 1, big, be8(2), 2000), 300,
			`topic out: element with key "` + big[:64] + `"... at 1970-01-01T00:00:02Z: a record of about 332 bytes, topic out takes at most 300`,
			`dlq/0 key "` + big + `" value 00000002 @2000 __streams.errors.exception=org.apache.kafka.common.errors.RecordTooLargeException __streams.errors.message=a record of about 332 bytes, topic out takes at most 300 (max.message.bytes, or the producer's batch limit) __streams.errors.topic=in __streams.errors.partition=0 __streams.errors.offset=-1 __ksrunner.errors.transform=%s __ksrunner.errors.destination=out __ksrunner.errors.encoding=kafka`},
	} {
		for _, policy := range []ErrorPolicy{PolicyFail, PolicyDeadLetter, PolicySkip} {
			t.Run(tc.name+"/"+string(policy), func(t *testing.T) {
				te, sub := badRecordsEnv(t, policy, translate.KafkaInteger)
				if tc.limit > 0 {
					te.env.Topics.MaxMessageBytes["out"] = tc.limit
				}
				var sink string
				for _, s := range sub.Sinks {
					if s.KafkaWrite != nil {
						sink = s.TransformID
					}
				}
				tk := te.task(sub, 0)
				ctx := context.Background()
				if err := tk.Handle(ctx, []*kgo.Record{kafkaRec(0, 0, "a", be8(7), 1000), tc.rec}); err != nil {
					t.Fatal(err)
				}
				err := tk.PrepareCommit(ctx)
				out := te.take()
				var ints []string
				for _, r := range out {
					if r.Topic == "out" {
						ints = append(ints, fmt.Sprintf("%s=%d", r.Key, int32(binary.BigEndian.Uint32(r.Value))))
					}
				}
				if policy == PolicyFail {
					if want := "transform " + sink + " (" + tk.uniqueName(sink) + "): " + tc.fail; err == nil || !strings.Contains(err.Error(), want) {
						t.Fatalf("PrepareCommit = %v, want an error containing %q", err, want)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				checkLines(t, "user output", ints, []string{"a=7"})
				var want []string
				if policy == PolicyDeadLetter {
					want = []string{fmt.Sprintf(tc.dead, tk.uniqueName(sink))}
				}
				checkLines(t, "dead letters", deadLetters(out), want)
				if err := tk.CommitState(); err != nil {
					t.Fatal(err)
				}
				tk.Finalize(ctx)
				name := MetricSkipped
				if policy == PolicyDeadLetter {
					name = MetricDeadLettered
				}
				if got := counter(t, te.env.Metrics.Committed, sink, name); got != 1 {
					t.Errorf("%s of %s: %d, want 1", name, sink, got)
				}
			})
		}
	}
}
