package e2e

import (
	"context"
	"maps"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestKafkaCancelAndResume: an unbounded job cancelled mid-stream and
// resubmitted under the same application_id continues where it stopped:
// its offsets were committed with its last cycle and its open windows'
// state with them, so the output of both jobs together holds every fired
// window's sum exactly once, and the windows open across the cancel sum
// records of both jobs (none lost, none read twice).
//
// The job's source_idle_timeout_ms is an hour, so an idle partition's
// watermark never jumps to wall time: only the data moves it, and which
// windows have fired is known exactly from what was produced. (Timestamps
// ahead of wall time would do it too, but Kafka 4 refuses records more
// than an hour ahead: message.timestamp.after.max.ms.)
func TestKafkaCancelAndResume(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	const partitions, n = 4, 400
	in, out := countTopics(t, bootstrap, "kin", partitions)
	data := newCountData(n, partitions)
	appID := kafkatest.UniqueName(t, "resume")
	pipe := kafkaCountPipeline(t, in, out)
	want1, want2 := data.halves(t)

	data.produce(ctx, t, bootstrap, in, data.recs[:n/2])
	got1 := runUntil(ctx, t, pipe, appID, bootstrap, out, len(want1), nil)
	kafkatest.CheckCounts(t, "after the first job", got1, want1)

	data.produce(ctx, t, bootstrap, in, data.recs[n/2:])
	got2 := runUntil(ctx, t, pipe, appID, bootstrap, out, len(want2), nil)
	kafkatest.CheckCounts(t, "after the resubmitted job", got2, want2)
}

// runUntil runs pipe under appID (with options extra) until out holds
// want records, then cancels it and returns out whole (read_committed,
// failing on a key written twice), after checking the job ended
// CANCELLED.
func runUntil(ctx context.Context, t *testing.T, pipe *pipepb.Pipeline, appID, bootstrap, out string, want int, extra map[string]string) map[string]int64 {
	t.Helper()
	opts := map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2", "source_idle_timeout_ms": "3600000"}
	maps.Copy(opts, extra)
	id, err := submit(ctx, t, ksrunner, pipe, opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	done := make(chan jobEnd, 1)
	go func() { r, err := wait(ctx, ksrunner, id); done <- jobEnd{r.State, r.Errors, err} }()
	kafkatest.ReadCounts(ctx, t, bootstrap, out, want)
	if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r := <-done; r.err != nil || r.state != jobpb.JobState_CANCELLED {
		t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", r.state, r.errs, r.err)
	}
	return kafkatest.ReadCounts(ctx, t, bootstrap, out, -1)
}

// jobEnd is how a job ended.
type jobEnd struct {
	state jobpb.JobState_Enum
	errs  []string
	err   error
}
