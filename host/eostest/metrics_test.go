package eostest

import (
	"bytes"
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function2x0(countElement)
}

var (
	elementsCounted = beam.NewCounter("eostest", "elements")
	countCalls      atomic.Int64
)

// countElement counts its element in a user counter and in countCalls.
func countElement(ctx context.Context, _ int) {
	elementsCounted.Inc(ctx, 1)
	countCalls.Add(1)
}

// TestCommittedMetricsUnderAbortedCycles counts n elements in a user counter
// while commit cycles that ran the counting DoFn abort: the committed
// counter is exactly n, the attempted one counts every call, retries
// included; under both guarantees (at_least_once repeats output, but the
// metrics of an aborted cycle are not committed either).
func TestCommittedMetricsUnderAbortedCycles(t *testing.T) {
	for _, guarantee := range []string{"exactly_once", "at_least_once"} {
		t.Run(guarantee, func(t *testing.T) {
			const n = 20_000
			countCalls.Store(0)
			p, s := beam.NewPipelineWithRoot()
			in := make([]int, n)
			for i := range in {
				in[i] = i
			}
			beam.ParDo0(s, countElement, beam.CreateList(s, in))
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			aborted := abortCyclesThatCall(t, func() int { return int(countCalls.Load()) })
			id, r := env.Run(ctx, t, env.Marshal(t, p), map[string]string{
				"bootstrap_servers":    kafkatest.Broker(t),
				"application_id":       kafkatest.UniqueName(t, "app"),
				"commit_interval_ms":   "20",
				"processing_guarantee": guarantee,
				"state_dir":            filepath.Join(t.TempDir(), "state"),
			})
			if r.State != jobpb.JobState_DONE {
				t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
			}
			mr, err := env.Client.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: id})
			if err != nil {
				t.Fatal(err)
			}
			counter := func(kind string, infos []*pipepb.MonitoringInfo) int64 {
				for _, m := range infos {
					if m.GetUrn() == "beam:metric:user:sum_int64:v1" && m.GetLabels()["NAMESPACE"] == "eostest" && m.GetLabels()["NAME"] == "elements" {
						v, err := coder.DecodeVarInt(bytes.NewReader(m.GetPayload()))
						if err != nil {
							t.Fatalf("%s counter: %v", kind, err)
						}
						return v
					}
				}
				t.Fatalf("no %s eostest/elements counter in %v", kind, infos)
				return 0
			}
			committed := counter("committed", mr.GetMetrics().GetCommitted())
			attempted := counter("attempted", mr.GetMetrics().GetAttempted())
			calls := countCalls.Load()
			t.Logf("%d cycles aborted; %d calls; counter committed %d, attempted %d", aborted(), calls, committed, attempted)
			if calls <= n {
				t.Fatalf("countElement called %d times for %d elements: no bundle of it was retried, the test shows nothing", calls, n)
			}
			if committed != n {
				t.Errorf("committed counter %d, want %d", committed, n)
			}
			if attempted != calls {
				t.Errorf("attempted counter %d, want %d (every call)", attempted, calls)
			}
		})
	}
}
