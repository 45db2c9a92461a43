package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

// badRecord is a record of fillWithBadRecords that the Long deserializer
// cannot decode, where it landed.
type badRecord struct {
	partition int32
	offset    int64
	key       string
	value     []byte
	ts        int64
}

// fillWithBadRecords creates topic in (4 partitions) and out (3), and
// writes to in, in timestamp order within each partition, 200 good records
// of kafkatest.FillCountTopics' kind (String key, Long count, 7 s apart from
// an hour ago) and, after every 20th, a bad one (a 3-byte value), round
// robin over the partitions. It returns the good records' sums per
// "key@window start" of one-minute windows and the bad records.
func fillWithBadRecords(ctx context.Context, t *testing.T, bootstrap, in, out string) (map[string]int64, []badRecord) {
	t.Helper()
	kafkatest.CreateTopic(t, bootstrap, in, 4)
	kafkatest.CreateTopic(t, bootstrap, out, kafkatest.CountOutPartitions)
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	base := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()
	want := map[string]int64{}
	var bad []badRecord
	for i := range 200 {
		key := fmt.Sprintf("k%d", i%10)
		ts := base + int64(i)*7000
		v := int64(1 + i%2)
		want[fmt.Sprintf("%s@%d", key, ts-ts%60000)] += v
		recs := []*kgo.Record{{Topic: in, Partition: int32(i % 4), Key: []byte(key), Value: be8(v), Timestamp: time.UnixMilli(ts)}}
		if i%20 == 7 {
			recs = append(recs, &kgo.Record{Topic: in, Partition: int32(i/20) % 4, Key: []byte(fmt.Sprintf("bad%d", i)), Value: []byte{byte(i), 2, 3}, Timestamp: time.UnixMilli(ts)})
		}
		res := cl.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		for _, pr := range res { // in completion order
			if r := pr.Record; strings.HasPrefix(string(r.Key), "bad") {
				bad = append(bad, badRecord{r.Partition, r.Offset, string(r.Key), r.Value, r.Timestamp.UnixMilli()})
			}
		}
	}
	return want, bad
}

// label is how messages name a transform: "id (unique name)".
func label(pipe *pipepb.Pipeline, id string) string {
	return id + " (" + pipe.GetComponents().GetTransforms()[id].GetUniqueName() + ")"
}

// kafkaIDs are the read and write transforms of a Kafka count pipeline.
func kafkaIDs(t *testing.T, pipe *pipepb.Pipeline) (read, write string) {
	t.Helper()
	plan, err := translate.Translate(pipe, translate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range plan.SubTopologies {
		if st.Root.Kind == translate.RootKafkaSource {
			read = st.Root.TransformID
		}
		for _, s := range st.Sinks {
			if s.KafkaWrite != nil {
				write = s.TransformID
			}
		}
	}
	return read, write
}

// committedCounter is the committed ksrunner/name counter of transform in
// the job's metrics; of all its transforms, summed, for transform "".
func committedCounter(ctx context.Context, t *testing.T, id, transform, name string) int64 {
	t.Helper()
	mr, err := ksrunner.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, m := range mr.GetMetrics().GetCommitted() {
		if l := m.GetLabels(); l["NAMESPACE"] == "ksrunner" && l["NAME"] == name && (transform == "" || l["PTRANSFORM"] == transform) {
			v, err := coder.DecodeVarInt(bytes.NewReader(m.GetPayload()))
			if err != nil {
				t.Fatal(err)
			}
			n += v
		}
	}
	return n
}

// awaitCounter waits, until the deadline of ctx, for the committed counter
// to reach want (a cycle's metrics are committed just after its
// transaction, which made its output visible), and fails if it is not
// exactly want then.
func awaitCounter(ctx context.Context, t *testing.T, id, transform, name string, want int64) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got := committedCounter(ctx, t, id, transform, name)
		if got == want {
			return
		}
		if got > want {
			t.Fatalf("%s of %s: %d, want %d", name, transform, got, want)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s of %s: %d by the deadline, want %d", name, transform, got, want)
		case <-tick.C:
		}
	}
}

// runUntilOutput submits pipe with opts (plus bootstrap_servers), waits
// until out holds as many records as want, cancels the job, and checks
// that out holds exactly want, each key once. It returns the job's id.
func runUntilOutput(ctx context.Context, t *testing.T, bootstrap string, pipe *pipepb.Pipeline, opts map[string]string, out string, want map[string]int64, afterOutput func(id string)) string {
	t.Helper()
	opts["bootstrap_servers"] = bootstrap
	id, err := submit(ctx, t, ksrunner, pipe, opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	// The output is awaited while the job runs: a job that ends stops the
	// wait, its errors logged.
	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	type ended struct {
		r   jobtest.Result
		err error
	}
	done := make(chan ended, 1)
	go func() {
		r, err := wait(ctx, ksrunner, id)
		if r.State != jobpb.JobState_CANCELLED {
			t.Logf("job ended %v (errors %q, %v)", r.State, r.Errors, err)
			stopRead()
		}
		done <- ended{r, err}
	}()
	got := kafkatest.ReadCounts(readCtx, t, bootstrap, out, len(want))
	if afterOutput != nil {
		afterOutput(id)
	}
	if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if e := <-done; e.err != nil || e.r.State != jobpb.JobState_CANCELLED {
		t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", e.r.State, e.r.Errors, e.err)
	}
	if all := kafkatest.ReadCounts(ctx, t, bootstrap, out, -1); !maps.Equal(all, got) || !maps.Equal(got, want) {
		t.Errorf("output: %d records, %v; want %d, %v", len(all), all, len(want), want)
	}
	return id
}

// describeDeadLetter is a dead-letter record as the test compares it.
func describeDeadLetter(r *kgo.Record) string {
	var hs []string
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	return fmt.Sprintf("key %q value %x @%d %s", r.Key, r.Value, r.Timestamp.UnixMilli(), strings.Join(hs, " "))
}

// Undecodable records (3-byte values under the Long deserializer) among
// good ones, over 4 partitions: under dead_letter each is in the
// application's dead-letter topic (read_committed) once, with its raw key,
// value and timestamp and KIP-1034's headers naming its origin, the output
// holds exactly the good records' counts, and dead_lettered_records counts
// them; under skip the output is the same and skipped_records counts them.
func TestKafkaReadBadRecords(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	t.Run("dead_letter", func(t *testing.T) {
		ctx := testContext(t, 3*time.Minute)
		in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
		want, bad := fillWithBadRecords(ctx, t, bootstrap, in, out)
		pipe := kafkaCountPipeline(t, in, out)
		read, _ := kafkaIDs(t, pipe)
		appID := kafkatest.UniqueName(t, "e2e")
		runUntilOutput(ctx, t, bootstrap, pipe, map[string]string{"application_id": appID, "internal_parallelism": "2", "deserialization_error_policy": "dead_letter"}, out, want, func(id string) {
			awaitCounter(ctx, t, id, read, "dead_lettered_records", int64(len(bad)))
			awaitCounter(ctx, t, id, read, "skipped_records", 0)
		})
		var wantDead []string
		for _, b := range bad {
			wantDead = append(wantDead, fmt.Sprintf("key %q value %x @%d __streams.errors.exception=org.apache.kafka.common.errors.SerializationException __streams.errors.message=value: 3 bytes, the Long deserializer needs 8 __streams.errors.topic=%s __streams.errors.partition=%d __streams.errors.offset=%d __ksrunner.errors.transform=%s",
				b.key, b.value, b.ts, in, b.partition, b.offset, pipe.GetComponents().GetTransforms()[read].GetUniqueName()))
		}
		var dead []string
		kafkatest.ReadTopic(ctx, t, bootstrap, shuffle.TopicName(appID, "dead-letter"), nil, func(r *kgo.Record) { dead = append(dead, describeDeadLetter(r)) })
		slices.Sort(dead)
		slices.Sort(wantDead)
		if !slices.Equal(dead, wantDead) {
			t.Errorf("dead-letter topic:\ngot:\n\t%s\nwant:\n\t%s", strings.Join(dead, "\n\t"), strings.Join(wantDead, "\n\t"))
		}
	})
	t.Run("skip", func(t *testing.T) {
		ctx := testContext(t, 3*time.Minute)
		in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
		want, bad := fillWithBadRecords(ctx, t, bootstrap, in, out)
		pipe := kafkaCountPipeline(t, in, out)
		read, _ := kafkaIDs(t, pipe)
		runUntilOutput(ctx, t, bootstrap, pipe, map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "internal_parallelism": "2", "deserialization_error_policy": "skip"}, out, want, func(id string) {
			awaitCounter(ctx, t, id, read, "skipped_records", int64(len(bad)))
			awaitCounter(ctx, t, id, read, "dead_lettered_records", 0)
		})
	})
	t.Run("missing dead_letter_topic", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
		kafkatest.CreateTopic(t, bootstrap, in, 1)
		kafkatest.CreateTopic(t, bootstrap, out, 1)
		dlq := kafkatest.UniqueName(t, "nodlq")
		id, err := submit(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap, "deserialization_error_policy": "dead_letter", "dead_letter_topic": dlq})
		if err != nil {
			t.Fatal(err)
		}
		r, err := wait(ctx, ksrunner, id)
		if err != nil || r.State != jobpb.JobState_FAILED || !strings.Contains(strings.Join(r.Errors, "\n"), `option dead_letter_topic: Kafka topic "`+dlq+`" does not exist`) {
			t.Errorf("job ended %v (errors %q, %v), want FAILED naming dead_letter_topic %s", r.State, r.Errors, err, dlq)
		}
	})
}

// Under fail (the default) the job fails naming the topic, partition and
// offset of a bad record, and the committed offset of each partition named
// is that record's offset (no other partition's is past its first bad
// record); a rerun under the same application_id with skip resumes at the
// committed offsets: it skips every bad record once, and the output of
// both runs together holds the good records' counts exactly.
func TestKafkaReadBadRecordFailResumes(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	ctx := testContext(t, 3*time.Minute)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	want, bad := fillWithBadRecords(ctx, t, bootstrap, in, out)
	pipe := kafkaCountPipeline(t, in, out)
	read, _ := kafkaIDs(t, pipe)
	appID := kafkatest.UniqueName(t, "e2e")
	firstBad := map[int32]int64{}
	for _, b := range bad {
		if _, ok := firstBad[b.partition]; !ok {
			firstBad[b.partition] = b.offset
		}
	}

	id, err := submit(ctx, t, ksrunner, pipe, map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := wait(ctx, ksrunner, id)
	if err != nil || r.State != jobpb.JobState_FAILED {
		t.Fatalf("job ended %v (errors %q, %v), want FAILED", r.State, r.Errors, err)
	}
	named := map[int32]int64{}
	re := regexp.MustCompile(`transform ` + regexp.QuoteMeta(label(pipe, read)) + `: topic ` + regexp.QuoteMeta(in) + ` partition (\d+) offset (\d+): value: 3 bytes, the Long deserializer needs 8`)
	for _, e := range r.Errors {
		for _, m := range re.FindAllStringSubmatch(e, -1) {
			p, _ := strconv.Atoi(m[1])
			o, _ := strconv.ParseInt(m[2], 10, 64)
			named[int32(p)] = o
		}
	}
	if len(named) == 0 {
		t.Fatalf("errors %q name no bad record of %s", r.Errors, in)
	}
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	offs, err := adm.FetchOffsets(ctx, appID)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		o, ok := offs.Lookup(in, p)
		committed := int64(0)
		if ok && o.Err == nil {
			committed = o.At
		}
		if at, isNamed := named[p]; isNamed {
			if at != firstBad[p] || committed != at {
				t.Errorf("partition %d: named offset %d, committed %d; want both the first bad record's, %d", p, at, committed, firstBad[p])
			}
		} else if committed > firstBad[p] {
			t.Errorf("partition %d: committed %d, past its first bad record %d", p, committed, firstBad[p])
		}
	}

	// The rerun: resumes at the committed offsets, skipping every bad
	// record (all at or after them) once.
	runUntilOutput(ctx, t, bootstrap, pipe, map[string]string{"application_id": appID, "internal_parallelism": "2", "deserialization_error_policy": "skip"}, out, want, func(id string) {
		awaitCounter(ctx, t, id, read, "skipped_records", int64(len(bad)))
	})
}

// A Kafka write's record larger than its topic's max.message.bytes fails
// the job naming the write transform, the topic and the element, rather
// than an anonymous producer error.
func TestKafkaWriteTooLarge(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	ctx := testContext(t, 2*time.Minute)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	kafkatest.CreateTopic(t, bootstrap, in, 1)
	kafkatest.CreateTopicWithConfigs(t, bootstrap, out, 1, map[string]string{"max.message.bytes": "100"})
	cl := kafkatest.Client(t, bootstrap)
	ts := time.Now().Add(-time.Hour).Truncate(time.Minute)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte(strings.Repeat("k", 50)), Value: be8(1), Timestamp: ts}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pipe := kafkaCountPipeline(t, in, out)
	_, write := kafkaIDs(t, pipe)
	id, err := submit(ctx, t, ksrunner, pipe, map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap})
	if err != nil {
		t.Fatal(err)
	}
	r, err := wait(ctx, ksrunner, id)
	wantErr := fmt.Sprintf(`transform %s: topic %s: element with key "%s@%d" at `, label(pipe, write), out, strings.Repeat("k", 50), ts.UnixMilli())
	if err != nil || r.State != jobpb.JobState_FAILED || !strings.Contains(strings.Join(r.Errors, "\n"), wantErr) || !strings.Contains(strings.Join(r.Errors, "\n"), "takes at most 100") {
		t.Errorf("job ended %v (errors %q, %v), want FAILED with %q ... takes at most 100", r.State, r.Errors, err, wantErr)
	}
}
