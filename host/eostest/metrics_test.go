package eostest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
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
			aborted := abortCyclesThatCall(t, func() int { return int(countCalls.Load()) })
			id := runDone(t, env.Marshal(t, p), map[string]string{
				"commit_interval_ms":   "20",
				"processing_guarantee": guarantee,
			})
			c, a := jobCounters(t, id)
			committed, attempted := c["eostest/elements"], a["eostest/elements"]
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
