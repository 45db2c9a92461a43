package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestElementTooLargeForTopic: an element larger than the internal topic
// it must cross whole (hugeStablePipeline's 2 MiB string, with
// internal_max_message_bytes at Kafka's 1 MiB) fails the job with an
// error naming the PCollection, the transform making it, the topic and the
// option, rather than the producer's MESSAGE_TOO_LARGE naming the topic
// alone.
func TestElementTooLargeForTopic(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	errs := runFailed(ctx, t, ksrunner, hugeStablePipeline(t, t.TempDir()+"/out"), map[string]string{"internal_max_message_bytes": "1048576"})
	msg := strings.Join(errs, "\n")
	for _, want := range []string{`(output of transform "e2e.hugeElement"): an element of `, "does not fit in a record of topic __beam_", "stableLength_2fStableInput-repartition, which takes at most 1048576 bytes", "internal_max_message_bytes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q, want %q in them", errs, want)
		}
	}
}

// TestLargeGroupToSideInputReader: a ParDo with a side input, or with user
// state, that is the only reader of a GroupByKey's groups (behind a
// windowed GroupByKey too: merging windows, allowed lateness) reads them
// where they are, in pages, so the hot group of about 4 MB passes with
// internal_max_message_bytes at Kafka's 1 MiB, which no topic record or
// stored value of it could take; the output is exact.
func TestLargeGroupToSideInputReader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(out string) *beam.Pipeline
		side  string
	}{
		{"side input", hotSidePipeline, "xy"},
		{"user state", hotStatefulPipeline, "st"},
		{"side input after session windows", hotSideSessionsPipeline, "ccch"},
		{"user state and a side input after allowed lateness", hotStatefulSideLatenessPipeline, "xy"},
		// The ParDo heads a sub-topology of its own: the hot group
		// crosses its topic in pieces.
		{"side input made from the groups", hotSideOfGroupsPipeline, "ccch"},
		// A ParDo requiring stable input heads a sub-topology of its own
		// too, fed by a topic of committed records: the same.
		{"stable input", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 2*time.Minute)
			out := filepath.Join(t.TempDir(), "out.txt")
			var pipe *pipepb.Pipeline
			if tc.build != nil {
				pipe = marshal(t, tc.build(out))
			} else {
				pipe = hotStableGroupsPipeline(t, out)
			}
			runDone(ctx, t, ksrunner, pipe, map[string]string{"internal_max_message_bytes": "1048576"})
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("reading the output: %v", err)
			}
			if got, want := sortedLines(string(b)), hotSideWantWith(tc.side); !slices.Equal(got, want) {
				t.Errorf("output %q, want %q", got, want)
			}
		})
	}
}

// TestKafkaWriteTopicBatchLimit: a Kafka write to a topic whose
// max.message.bytes is below the producer's batch limit (Kafka's default
// 1 MB) writes many small records in one cycle. The producer's batches for
// that topic keep to the topic's limit: a batch filled to the producer's
// would be refused whole (MESSAGE_TOO_LARGE), failing the job for records
// that each fit. (The real broker refuses such batches, failing the test
// every time when the producer ignores the topic's limit; kfake answers
// before batches grow that large.)
func TestKafkaWriteTopicBatchLimit(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	ctx := testContext(t, 2*time.Minute)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	kafkatest.CreateTopic(t, bootstrap, in, 1)
	kafkatest.CreateTopicWithConfigs(t, bootstrap, out, 1, map[string]string{"max.message.bytes": "20000"})
	const n = 3000 // about 450 KB: 20 batches of the topic's limit
	cl := kafkatest.Client(t, bootstrap)
	want := map[string]int64{}
	var recs []*kgo.Record
	for i := range n {
		key := fmt.Sprintf("%04d-%s", i, strings.Repeat("k", 120))
		want[key] = int64(i)
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte(key), Value: be8(int64(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	max := int64(n)
	runDone(ctx, t, ksrunner, passThroughPipeline(t, loopback.EnvironmentConfig, in, out, &max, "earliest"), map[string]string{
		"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap, "commit_interval_ms": "5000",
	})
	kafkatest.CheckCounts(t, "output", kafkatest.ReadCounts(ctx, t, bootstrap, out, n), want)
}

// TestInternalTopicsKeepTheirLimit: an application's internal topics keep
// the max.message.bytes they were made with. A job that made them at
// Kafka's 1 MiB fails on the hot group; the same pipeline resubmitted
// under its application_id at the default 8 MiB is warned, in a job
// message naming the topics and their limits, and fails the same way,
// naming the topic's own limit, rather than producing batches the broker
// refuses.
func TestInternalTopicsKeepTheirLimit(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	ctx := testContext(t, 2*time.Minute)
	appID := kafkatest.UniqueName(t, "e2e")
	pipe := hugeStablePipeline(t, t.TempDir()+"/out")
	opts := map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_max_message_bytes": "1048576"}
	runFailed(ctx, t, ksrunner, pipe, opts) // makes the topics at 1 MiB
	delete(opts, "internal_max_message_bytes")
	_, r := runEnded(ctx, t, ksrunner, pipe, opts, jobpb.JobState_FAILED)
	warned := false
	for _, m := range r.Messages {
		warned = warned || strings.Contains(m, "internal topics made by an earlier run take smaller records than internal_max_message_bytes (8388608) asks: __beam_"+appID) && strings.Contains(m, "stableLength_2fStableInput-repartition (1048576)")
	}
	if !warned {
		t.Errorf("no job message warning of the topics' smaller limit; messages %q", r.Messages)
	}
	if msg := strings.Join(r.Errors, "\n"); !strings.Contains(msg, "stableLength_2fStableInput-repartition, which takes at most 1048576 bytes") {
		t.Errorf("errors %q, want the element too large for the topic's own 1048576 bytes", r.Errors)
	}
}
