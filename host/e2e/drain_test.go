package e2e

import (
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/runnerlib"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestDrain: Drain of an unbounded job reading Kafka (windowed sums, idle
// partitions never advance: only data and the drain move the watermark)
// fires every window, the ones the data had not closed too, each once; the
// job goes DRAINING then DONE (not DRAINED: see host.drainedState), and
// the Go SDK's own client (runnerlib.WaitForCompletion, what beam.Run of
// the universal runner waits with) returns success; the read stops where it was, so its
// committed offsets are the input's ends and records produced afterwards
// are not read.
func TestDrain(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := countTopics(t, bootstrap, "drain", 4)
	d := newCountData(200, 4)
	d.produce(ctx, t, bootstrap, in, d.recs)
	closed := d.fired(d.recs)
	all := d.windows(d.recs)
	if len(closed) == 0 || len(all) <= len(closed) {
		t.Fatalf("test data: %d windows closed by the data, %d in all", len(closed), len(all))
	}

	appID := kafkatest.UniqueName(t, "drain")
	id, err := submit(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), map[string]string{
		"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2", "source_idle_timeout_ms": "3600000",
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}) })
	waited := make(chan error, 1)
	go func() { waited <- runnerlib.WaitForCompletion(ctx, ksrunner, id) }()
	states, err := ksrunner.GetStateStream(ctx, &jobpb.GetJobStateRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.CheckCounts(t, "before the drain", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(closed)), closed)

	resp, err := ksrunner.Drain(ctx, &jobpb.DrainJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if resp.GetState() != jobpb.JobState_DRAINING {
		t.Errorf("Drain answered %v, want DRAINING", resp.GetState())
	}
	var seen []jobpb.JobState_Enum
	for {
		ev, err := states.Recv()
		if err != nil {
			break
		}
		seen = append(seen, ev.GetState())
	}
	if n := len(seen); n < 2 || seen[n-2] != jobpb.JobState_DRAINING || seen[n-1] != jobpb.JobState_DONE {
		t.Fatalf("states %v, want ... DRAINING, DONE", seen)
	}
	if err := <-waited; err != nil {
		t.Errorf("runnerlib.WaitForCompletion of the drained job: %v, want success", err)
	}
	if _, err := ksrunner.Drain(ctx, &jobpb.DrainJobRequest{JobId: id}); err == nil {
		t.Error("Drain of a drained job: no error")
	}
	// Records produced after the drain are not read.
	d.produce(ctx, t, bootstrap, in, []countRec{{key: "late", ts: time.Now().UnixMilli(), value: 1, partition: 0}})
	kafkatest.CheckCounts(t, "after the drain", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), all)

	// The group's offsets are where the read stopped: the input's ends
	// before the late record.
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	offsets, err := adm.FetchOffsets(ctx, appID)
	if err != nil {
		t.Fatal(err)
	}
	perPartition := map[int32]int64{}
	for _, r := range d.recs {
		perPartition[r.partition]++
	}
	for p, n := range perPartition {
		o, ok := offsets.Lookup(in, p)
		if !ok || o.At != n {
			t.Errorf("partition %d: committed offset %v (found %v), want %d", p, o.At, ok, n)
		}
	}
}
