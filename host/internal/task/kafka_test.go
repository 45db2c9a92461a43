package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function2x0(kafkaSourcePlaceholder)
	register.Function2x2(kafkaPass)
	register.Function2x0(kafkaSinkPlaceholder)
}

// The placeholders stand for the Kafka primitives until pipelinetest
// replaces them in the proto.
func kafkaSourcePlaceholder([]byte, func(string, int64)) {}
func kafkaPass(k string, v int64) (string, int64)        { return k, v }
func kafkaSinkPlaceholder(string, int64)                 {}
func be8(v int64) []byte                                 { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func kafkaRec(p int32, off int64, key string, value []byte, ts int64) *kgo.Record {
	return &kgo.Record{Topic: "in", Partition: p, Offset: off, Key: []byte(key), Value: value, Timestamp: time.UnixMilli(ts)}
}

// kafkaEnv is a test env over read "in" (KV<string, int64>: String, Long) →
// a pass-through ParDo → write "out", one sub-topology; "in" has 3
// partitions and "out" 5; the Kafka sources' clock is *now.
func kafkaEnv(t *testing.T, policy string) (*testEnv, *translate.SubTopology, *time.Time) {
	return kafkaEnvEdited(t, policy, nil)
}

// kafkaEnvEdited is kafkaEnv with edit applied to the pipeline proto first.
func kafkaEnvEdited(t *testing.T, policy string, edit func(*pipepb.Pipeline)) (*testEnv, *translate.SubTopology, *time.Time) {
	p, s := beam.NewPipelineWithRoot()
	in := beam.ParDo(s, kafkaSourcePlaceholder, beam.Impulse(s))
	beam.ParDo0(s, kafkaSinkPlaceholder, beam.ParDo(s, kafkaPass, in))
	pp := marshal(t, p)
	rb, err := translate.EncodeKafkaRead(&translate.KafkaRead{Topics: []string{"in"}, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong, TimestampPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := translate.EncodeKafkaWrite(&translate.KafkaWrite{Topic: "out", KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSource(pp, "kafkaSourcePlaceholder", translate.URNKafkaRead, rb); err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSink(pp, "kafkaSinkPlaceholder", translate.URNKafkaWrite, wb); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(pp)
	}
	te := newTestEnv(t, pp, 2)
	te.env.Topics.Discovered(map[string]int32{"in": 3, "out": 5})
	now := time.UnixMilli(1_000_000)
	te.env.Now = func() time.Time { return now }
	sub := te.sub(translate.RootKafkaSource)
	te.exec(sub).setFn(func(in shuffle.WindowedValue) [][]byte { return [][]byte{in.Raw} })
	return te, sub, &now
}

// userRecords splits produced records into those on user topics (as
// "topic/partition key=value") and the rest, described.
func (te *testEnv) userRecords(recs []*kgo.Record) (user, rest []string) {
	var other []*kgo.Record
	for _, r := range recs {
		if r.Topic == "out" {
			v := "null"
			if r.Value != nil {
				v = fmt.Sprint(int64(binary.BigEndian.Uint64(r.Value)))
			}
			part := "*"
			if r.Key == nil {
				part = "rr"
			}
			user = append(user, "out/"+part+" "+string(r.Key)+"="+v)
			continue
		}
		other = append(other, r)
	}
	return user, te.describe(other)
}

// A source task takes the user's records (no envelope byte), routes each as
// KV<key, value> in the output's coder, in the global window with the
// no-firing pane at its record timestamp; the write serializes key and
// value back and produces them keyed to the user's topic, and no watermark
// reaches it. The watermark is the largest timestamp less the max delay
// until the partition, caught up as a listing of its end showed, has been
// idle for the idle timeout, then the listing's time less the delay.
func TestKafkaSource(t *testing.T) {
	te, sub, now := kafkaEnv(t, translate.TimestampCreateTime)
	te.env.SourceMaxDelay = time.Second
	tk := te.task(sub, 1)
	tk.Fetched(3, 2) // offsets 0..2 exist, 2 records fetched
	te.cycle(tk, kafkaRec(1, 0, "a", be8(7), 20_000), kafkaRec(1, 1, "b", be8(5), 12_000))
	checkLines(t, "stage input", te.exec(sub).inputs(), []string{
		`"a":7 @20000 GW nofiring`,
		`"b":5 @12000 GW nofiring`,
	})
	user, rest := te.userRecords(te.take())
	checkLines(t, "user output", user, []string{"out/* a=7", "out/* b=5"})
	checkLines(t, "reports", rest, []string{"status " + tk.ID() + " 19000"})

	// Idle, but not caught up: the watermark stays.
	*now = now.Add(5 * time.Second)
	tk.Listed(*now, 3, -1)
	te.cycle(tk)
	if _, rest := te.userRecords(te.take()); len(rest) != 0 {
		t.Errorf("a partition behind its end offset advanced: %q", rest)
	}
	// Caught up, not idle long enough: stays.
	te.cycle(tk, kafkaRec(1, 2, "a", be8(1), 21_000))
	_, rest = te.userRecords(te.take())
	checkLines(t, "after the last record", rest, []string{"status " + tk.ID() + " 20000"})
	*now = now.Add(999 * time.Millisecond)
	tk.Listed(*now, 3, -1)
	te.cycle(tk)
	if _, rest := te.userRecords(te.take()); len(rest) != 0 {
		t.Errorf("advanced before the idle timeout: %q", rest)
	}
	*now = now.Add(time.Millisecond)
	tk.Listed(*now, 3, -1)
	te.cycle(tk)
	_, rest = te.userRecords(te.take())
	checkLines(t, "idle", rest, []string{"status " + tk.ID() + " " + timeString(now.UnixMilli()-1000)})
}

// An idle partition's watermark follows wall time only as of the time a
// listing of its end offset was sent that the task had reached: not as of
// a commit that comes long after it (a stalled cycle), and not at all while
// records below a listed end wait unhandled (in the client's buffer, or not
// fetched yet): records produced since are not late. The default max delay
// is Java KafkaIO's for CreateTime across languages: none.
func TestKafkaSourceIdleAsOfListing(t *testing.T) {
	te, sub, now := kafkaEnv(t, translate.TimestampCreateTime)
	tk := te.task(sub, 0)
	if err := tk.Handle(context.Background(), []*kgo.Record{kafkaRec(0, 0, "a", be8(1), 20_000)}); err != nil {
		t.Fatal(err)
	}
	commit := func() []string {
		t.Helper()
		ctx := context.Background()
		if err := tk.PrepareCommit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tk.CommitState(); err != nil {
			t.Fatal(err)
		}
		tk.SendStatus()
		_, rest := te.userRecords(te.take())
		return rest
	}
	checkLines(t, "no delay", commit(), []string{"status " + tk.ID() + " 20000"})
	// Listings that show records the task has not handled: no news of
	// it being caught up, however long it waits.
	for range 3 {
		*now = now.Add(time.Second)
		tk.Listed(*now, 2, -1)
	}
	if rest := commit(); len(rest) != 0 {
		t.Errorf("advanced while a listing showed records not handled: %q", rest)
	}
	// A listing that the task reached, then a commit 5 s later (a stalled
	// cycle): as of the listing's time.
	*now = now.Add(time.Second)
	listed := *now
	tk.Listed(listed, 1, -1)
	*now = now.Add(5 * time.Second)
	checkLines(t, "idle as of the listing", commit(), []string{"status " + tk.ID() + " " + timeString(listed.UnixMilli())})
	// An older listing answered late does not move it back.
	tk.Listed(listed.Add(-time.Second), 1, -1)
	if rest := commit(); len(rest) != 0 {
		t.Errorf("an older listing changed the watermark: %q", rest)
	}
}

// Under the ProcessingTime policy an element's timestamp is the wall clock.
func TestKafkaSourceProcessingTime(t *testing.T) {
	te, sub, now := kafkaEnv(t, translate.TimestampProcessingTime)
	tk := te.task(sub, 0)
	te.cycle(tk, kafkaRec(0, 0, "a", be8(-1), 20_000))
	checkLines(t, "stage input", te.exec(sub).inputs(), []string{`"a":-1 @` + timeString(now.UnixMilli()) + ` GW nofiring`})
}

// A record that does not decode fails the task, naming the transform,
// topic, partition and offset.
func TestKafkaSourceUndecodable(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  *kgo.Record
		want string
	}{
		{"short long", kafkaRec(2, 4, "a", []byte{1, 2, 3}, 0), "value: 3 bytes, the Long deserializer needs 8"},
		{"null key", &kgo.Record{Topic: "in", Partition: 2, Offset: 4, Value: be8(1)}, "key: null, and the coder is not nullable"},
		{"not utf-8", kafkaRec(2, 4, "\xff", be8(1), 0), "key: 1 bytes that are not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te, sub, _ := kafkaEnv(t, translate.TimestampCreateTime)
			err := te.task(sub, 2).Handle(context.Background(), []*kgo.Record{tc.rec})
			if err == nil || !strings.Contains(err.Error(), "topic in partition 2 offset 4") || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), sub.Root.TransformID) {
				t.Errorf("Handle = %v, want an error naming the transform, topic in partition 2 offset 4 and %q", err, tc.want)
			}
		})
	}
}

// A partition without records is caught up: a task that has handled
// nothing is at the offset its consumption started at (the runtime's
// from), or at the end a fetch without its records showed; after the idle
// timeout its watermark follows the listings' time.
func TestKafkaSourceEmptyPartition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fetched bool  // a fetch brought no record at offset 4
		from    int64 // where consumption started
	}{{"started at the end", false, 4}, {"fetched at the end", true, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			te, sub, now := kafkaEnv(t, translate.TimestampCreateTime)
			tk := te.task(sub, 0)
			if tc.fetched {
				tk.Fetched(4, 0)
			}
			tk.Listed(*now, 4, tc.from)
			te.cycle(tk)
			_, rest := te.userRecords(te.take())
			checkLines(t, "opened", rest, []string{"status " + tk.ID() + " -inf"})
			*now = now.Add(time.Second)
			tk.Listed(*now, 4, tc.from)
			te.cycle(tk)
			_, rest = te.userRecords(te.take())
			checkLines(t, "idle", rest, []string{"status " + tk.ID() + " " + timeString(now.UnixMilli())})
		})
	}
	// Without a position, a listing says nothing.
	te, sub, now := kafkaEnv(t, translate.TimestampCreateTime)
	tk := te.task(sub, 0)
	*now = now.Add(time.Second)
	tk.Listed(*now, 4, -1)
	te.cycle(tk)
	_, rest := te.userRecords(te.take())
	checkLines(t, "no position", rest, []string{"status " + tk.ID() + " -inf"})
}

// With nullable keys (Beam's NullableCoder, which the wire coder
// length-prefixes) a null Kafka key is an element with a null key, and the
// write produces it with a null key, round-robin over the topic's
// partitions.
func TestKafkaNullableKeys(t *testing.T) {
	te, sub, _ := kafkaEnvEdited(t, translate.TimestampCreateTime, func(pp *pipepb.Pipeline) {
		cs := pp.GetComponents().GetCoders()
		for _, pc := range pp.GetComponents().GetPcollections() {
			kv := cs[pc.GetCoderId()]
			if kv.GetSpec().GetUrn() != "beam:coder:kv:v1" {
				continue
			}
			key := kv.GetComponentCoderIds()[0]
			if cs[key].GetSpec().GetUrn() == kafkaio.URNNullable {
				continue
			}
			cs[key+"_nullable"] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: kafkaio.URNNullable}, ComponentCoderIds: []string{key}}
			kv.ComponentCoderIds = []string{key + "_nullable", kv.GetComponentCoderIds()[1]}
		}
	})
	tk := te.task(sub, 0)
	te.cycle(tk, &kgo.Record{Topic: "in", Offset: 0, Value: be8(7), Timestamp: time.UnixMilli(5000)}, kafkaRec(0, 1, "a", be8(8), 6000))
	checkLines(t, "stage input", te.exec(sub).inputs(), []string{`null:7 @5000 GW nofiring`, `"a":8 @6000 GW nofiring`})
	var lines []string
	for _, r := range te.take() {
		if r.Topic != "out" {
			continue
		}
		if r.Key == nil && (r.Partition < 0 || r.Partition >= 5) {
			t.Errorf("null key to partition %d of 5", r.Partition)
		}
		lines = append(lines, fmt.Sprintf("key %q null %v value %d", r.Key, r.Key == nil, int64(binary.BigEndian.Uint64(r.Value))))
	}
	checkLines(t, "user output", lines, []string{`key "" null true value 7`, `key "a" null false value 8`})
}
