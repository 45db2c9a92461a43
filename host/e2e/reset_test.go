package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestResetKeepsReadOffsets: an application drained and then reset
// (`ksrunner reset`) has no internal topics left, and its next job under
// the same application id and state_dir starts on new ones and reads only
// what came after the drain: its Kafka read goes on from the offsets the
// reset kept. Both jobs' outputs are exact (read_committed): each window
// of its own records, once.
func TestResetKeepsReadOffsets(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out1 := countTopics(t, bootstrap, "reset", 4)
	out2 := kafkatest.UniqueName(t, "reset-out2")
	kafkatest.CreateTopic(t, bootstrap, out2, kafkatest.CountOutPartitions)
	d := newCountData(400, 4)
	first, second := d.recs[:200], d.recs[200:]
	appID := kafkatest.UniqueName(t, "reset")
	opts := map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2",
		"source_idle_timeout_ms": "3600000", "state_dir": t.TempDir()}

	// run runs a job to its drain and returns its messages.
	run := func(out string, recs []countRec) []string {
		t.Helper()
		id, err := submit(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), opts)
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
		d.produce(ctx, t, bootstrap, in, recs)
		closed := sumsOf(recs, d.fired(recs))
		kafkatest.CheckCounts(t, "before the drain", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(closed)), closed)
		if _, err := ksrunner.Drain(ctx, &jobpb.DrainJobRequest{JobId: id}); err != nil {
			t.Fatalf("Drain: %v", err)
		}
		r, err := wait(ctx, ksrunner, id)
		if err != nil || r.State != jobpb.JobState_DONE {
			t.Fatalf("the drained job ended %v (%v), want DONE", r.State, err)
		}
		kafkatest.CheckCounts(t, "after the drain", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), d.windows(recs))
		return r.Messages
	}
	emptied := func(msgs []string) bool {
		return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "topics were made again since the local store") })
	}
	if emptied(run(out1, first)) {
		t.Error("the first job emptied its new store")
	}

	rep, err := host.ResetApplication(ctx, host.ResetConfig{ApplicationID: appID, BootstrapServers: bootstrap})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	if rep.JobState != "drained" || !slices.Contains(rep.Topics, shuffle.TopicName(appID, shuffle.PipelineTopic)) ||
		!slices.Contains(rep.Topics, shuffle.TopicName(appID, "subtopology-1-changelog")) || !slices.Equal(rep.KeptOffsets, []string{in}) {
		t.Fatalf("reset report %+v: want the drained job, its pipeline topic and changelogs deleted, the offsets of %s kept", rep, in)
	}
	listed, err := kadm.NewClient(kafkatest.Client(t, bootstrap)).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range rep.Topics {
		if listed.Has(name) {
			t.Errorf("topic %s is still there after the reset", name)
		}
	}

	// The next job reads the second half only: its windows hold the
	// second half's records alone (the window the halves share too). Its
	// store, on the same state_dir, saw the topics made again.
	if !emptied(run(out2, second)) {
		t.Error("the second job's store did not see the topics made again (no message)")
	}
}

// sumsOf is the part of windows (as countData.fired gives them, from
// every record) made of recs alone: the same windows, their sums over recs.
func sumsOf(recs []countRec, windows map[string]int64) map[string]int64 {
	own := map[string]int64{}
	for _, r := range recs {
		w := fmt.Sprintf("%s@%d", r.key, r.ts-r.ts%60000)
		if _, ok := windows[w]; ok {
			own[w] += r.value
		}
	}
	return own
}
