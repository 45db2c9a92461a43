package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/jobtest"
	_ "github.com/ksrunner/ksrunner/host/kafkaio"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function2x0(kafkaReadPlaceholder)
	register.Function3x2(keyByWindow)
	register.Function2x0(kafkaWritePlaceholder)
	register.Function2x2(decodeCount)
	register.Function2x2(encodeCount)
}

// The placeholders stand for the Kafka primitives, which pipelinetest puts
// in their place in the proto (the expansion service is tested on its own).
func kafkaReadPlaceholder([]byte, func(string, int64)) {}
func kafkaWritePlaceholder(string, int64)              {}

// keyByWindow makes the window part of the key: "key@start".
func keyByWindow(w beam.Window, k string, n int64) (string, int64) {
	return fmt.Sprintf("%s@%d", k, w.(window.IntervalWindow).Start.Milliseconds()), n
}

// kafkaCountPipeline reads KV<string, int64> (String, Long) from topic in,
// sums the values per key in fixed one-minute windows, and writes
// KV<"key@window start", sum> (String, Long) to topic out.
func kafkaCountPipeline(t *testing.T, in, out string) *pipepb.Pipeline {
	t.Helper()
	return kafkaSumPipeline(t, loopback.EnvironmentConfig, in, out, time.Minute, nil)
}

// kafkaSumPipeline is kafkaCountPipeline with windows of size, its
// LOOPBACK workers started by the pool at env; mid, if not nil, is a DoFn
// (KV<string, int64> in and out) between the read and the windowing.
func kafkaSumPipeline(t *testing.T, env func(context.Context) string, in, out string, size time.Duration, mid any) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	recs := beam.ParDo(s, kafkaReadPlaceholder, beam.Impulse(s))
	if mid != nil {
		recs = beam.ParDo(s, mid, recs)
	}
	sums := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(size), recs))
	keyed := beam.ParDo(s, keyByWindow, sums)
	beam.ParDo0(s, kafkaWritePlaceholder, beam.WindowInto(s, window.NewGlobalWindows(), keyed))
	pipe := jobtest.MarshalLoopback(t, p, env, workerBin)
	withCountKafkaIO(t, pipe, in, out)
	return pipe
}

// withCountKafkaIO puts the count pipelines' Kafka read of in (String
// keys, Long values, CreateTime, from the earliest offset) and write to
// out in place of pipe's placeholders.
func withCountKafkaIO(t *testing.T, pipe *pipepb.Pipeline, in, out string) {
	t.Helper()
	withKafkaPrimitives(t, pipe, &translate.KafkaRead{
		Topics: []string{in}, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong,
		TimestampPolicy: translate.TimestampCreateTime, ConsumerConfig: map[string]string{"auto.offset.reset": "earliest"},
	}, &translate.KafkaWrite{Topic: out, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong})
}

// withKafkaPrimitives puts read and write in place of pipe's
// kafkaReadPlaceholder and kafkaWritePlaceholder.
func withKafkaPrimitives(t *testing.T, pipe *pipepb.Pipeline, read *translate.KafkaRead, write *translate.KafkaWrite) {
	t.Helper()
	rb, err := translate.EncodeKafkaRead(read)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := translate.EncodeKafkaWrite(write)
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSource(pipe, "kafkaReadPlaceholder", translate.URNKafkaRead, rb); err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSink(pipe, "kafkaWritePlaceholder", translate.URNKafkaWrite, wb); err != nil {
		t.Fatal(err)
	}
}

func be8(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// TestKafkaReadWindowedCountWrite: a pipeline reading a user topic of 4
// partitions through the Kafka read primitive, counting per key in fixed
// windows and writing through the Kafka write primitive runs unbounded,
// exactly once: the output topic holds each key and window's count once
// (read_committed), 4 source tasks ran, and Cancel ends the job.
func TestKafkaReadWindowedCountWrite(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	want := kafkatest.FillCountTopics(ctx, t, bootstrap, in, out)
	runCountJob(ctx, t, bootstrap, kafkaCountPipeline(t, in, out), out, want)
}

// TestKafkaIOThroughSDK: the same pipeline written with the Go SDK's own
// kafkaio.Read and kafkaio.Write, expanded in-process by ksrunner's
// host/kafkaio (no expansion address, no Java), runs alike: each key and
// window's count once in the output topic, one source task per partition.
func TestKafkaIOThroughSDK(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	want := kafkatest.FillCountTopics(ctx, t, bootstrap, in, out)
	p, s := beam.NewPipelineWithRoot()
	recs := kafkaio.Read(s, "", bootstrap, []string{in},
		kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"}),
		kafkaio.TimestampPolicy(kafkaio.CreateTime))
	counts := beam.ParDo(s, decodeCount, recs)
	sums := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), counts))
	keyed := beam.ParDo(s, encodeCount, beam.ParDo(s, keyByWindow, sums))
	kafkaio.Write(s, "", bootstrap, out, beam.WindowInto(s, window.NewGlobalWindows(), keyed))
	runCountJob(ctx, t, bootstrap, marshal(t, p), out, want)
}

// decodeCount reads a record of kafkatest.FillCountTopics: a string key, a Long.
func decodeCount(k, v []byte) (string, int64) { return string(k), int64(binary.BigEndian.Uint64(v)) }

// encodeCount writes a count as Kafka's StringSerializer and LongSerializer
// would.
func encodeCount(k string, n int64) ([]byte, []byte) { return []byte(k), be8(n) }

// runCountJob runs pipe, which reads the topic kafkatest.FillCountTopics filled and
// writes out, until out holds as many records as want, cancels it, and
// checks out holds exactly want, each once, and that one source task per
// input partition reported.
func runCountJob(ctx context.Context, t *testing.T, bootstrap string, pipe *pipepb.Pipeline, out string, want map[string]int64) {
	t.Helper()
	source := sourceSubTopology(t, pipe)
	appID := kafkatest.UniqueName(t, "e2e")
	id, err := submit(ctx, t, ksrunner, pipe, map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2"})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	done := make(chan jobEnd, 1)
	go func() { r, err := wait(ctx, ksrunner, id); done <- jobEnd{r.State, r.Errors, err} }()

	got := kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want))
	select {
	case r := <-done:
		t.Fatalf("the unbounded job ended %v (errors %q, %v) before Cancel", r.state, r.errs, r.err)
	default:
	}
	if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r := <-done; r.err != nil || r.state != jobpb.JobState_CANCELLED {
		t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", r.state, r.errs, r.err)
	}
	// After the job: the whole topic, nothing more than what was awaited.
	if all := kafkatest.ReadCounts(ctx, t, bootstrap, out, -1); !maps.Equal(all, got) {
		t.Errorf("the output topic grew after the counts arrived: %d records, then %d", len(got), len(all))
	}
	kafkatest.CheckCounts(t, "output", got, want)

	// The source tasks: one per partition of the input, each reported.
	status := readStatus(ctx, t, bootstrap, shuffle.TopicName(appID, shuffle.StatusTopic))
	var sources []string
	for _, k := range status {
		if strings.HasPrefix(k, fmt.Sprintf("%d/", source)) {
			sources = append(sources, k)
		}
	}
	slices.Sort(sources)
	if wantSrc := []string{fmt.Sprintf("%d/0", source), fmt.Sprintf("%d/1", source), fmt.Sprintf("%d/2", source), fmt.Sprintf("%d/3", source)}; !slices.Equal(sources, wantSrc) {
		t.Errorf("source tasks that reported %v, want %v", sources, wantSrc)
	}
}

// sourceSubTopology is the id of the sub-topology of pipe's Kafka read.
func sourceSubTopology(t *testing.T, pipe *pipepb.Pipeline) int {
	t.Helper()
	plan, err := translate.Translate(pipe, translate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range plan.SubTopologies {
		if st.Root.Kind == translate.RootKafkaSource {
			return st.ID
		}
	}
	t.Fatal("no Kafka read in the pipeline")
	return -1
}

// readStatus returns the task ids that wrote to a status topic.
func readStatus(ctx context.Context, t *testing.T, bootstrap, topic string) []string {
	t.Helper()
	seen := map[string]bool{}
	kafkatest.ReadTopic(ctx, t, bootstrap, topic, nil, func(r *kgo.Record) { seen[string(r.Key)] = true })
	return slices.Sorted(maps.Keys(seen))
}

// A pipeline with a Kafka read needs an application_id; a Kafka read of a
// topic that does not exist fails the job at Run, naming the topic; a record the read cannot decode (Long over 3 bytes) fails it
// naming topic, partition and offset.
func TestKafkaReadFailures(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	run := func(t *testing.T, in, out string) []string {
		ctx := testContext(t, 2*time.Minute)
		return runFailed(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap})
	}
	contains := func(t *testing.T, errs []string, parts ...string) {
		t.Helper()
		for _, e := range errs {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(e, p)
			}
			if ok {
				return
			}
		}
		t.Errorf("errors %q: none names all of %q", errs, parts)
	}
	t.Run("no application_id", func(t *testing.T) {
		// A Kafka read is unbounded: without an application_id it runs
		// under one made for the submission, and a warning names it.
		ctx := testContext(t, time.Minute)
		in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
		kafkatest.CreateTopic(t, bootstrap, in, 1)
		kafkatest.CreateTopic(t, bootstrap, out, 1)
		id, err := submit(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), map[string]string{"bootstrap_servers": bootstrap})
		if err != nil {
			t.Fatalf("submit without application_id: %v", err)
		}
		if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
			t.Fatal(err)
		}
		r, err := wait(ctx, ksrunner, id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(r.Messages, func(m string) bool { return strings.Contains(m, "option application_id: not set") }) {
			t.Errorf("no warning about the missing application_id; messages: %q", r.Messages)
		}
	})
	t.Run("missing topic", func(t *testing.T) {
		out := kafkatest.UniqueName(t, "kout")
		kafkatest.CreateTopic(t, bootstrap, out, 1)
		in := kafkatest.UniqueName(t, "kmissing")
		contains(t, run(t, in, out), in, "does not exist")
	})
	t.Run("undecodable record", func(t *testing.T) {
		in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
		kafkatest.CreateTopic(t, bootstrap, in, 1)
		kafkatest.CreateTopic(t, bootstrap, out, 1)
		cl := kafkatest.Client(t, bootstrap)
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte{1, 2, 3}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		contains(t, run(t, in, out), "topic "+in+" partition 0 offset 0", "3 bytes, the Long deserializer needs 8")
	})
}
