package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.DoFn3x0[*sdf.LockRTracker, int, func(string)](&slowRangeFn{})
}

// slowPositions and slowStep make each of slowRangeFn's restrictions take
// about 2 s in one DoFn call, and the three of them, in one bundle of one
// task, 6 s: longer than the transaction_timeout_ms (2000) the test gives
// the job.
const (
	slowPositions = 1000
	slowStep      = 2 * time.Millisecond
)

// slowRangeFn is a splittable DoFn over positions 0..slowPositions of one
// restriction it never splits itself nor checkpoints: it claims and emits
// each position in turn, slowly, as a read of a large file does.
type slowRangeFn struct{}

func (fn *slowRangeFn) CreateInitialRestriction(int) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: slowPositions}
}

func (fn *slowRangeFn) SplitRestriction(_ int, r offsetrange.Restriction) []offsetrange.Restriction {
	return []offsetrange.Restriction{r}
}

func (fn *slowRangeFn) RestrictionSize(_ int, r offsetrange.Restriction) float64 { return r.Size() }

func (fn *slowRangeFn) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}

func (fn *slowRangeFn) ProcessElement(rt *sdf.LockRTracker, i int, emit func(string)) {
	r := rt.GetRestriction().(offsetrange.Restriction)
	for p := r.Start; rt.TryClaim(p); p++ {
		time.Sleep(slowStep)
		emit(fmt.Sprintf("element %d position %d", i, p))
	}
}

// TestLongSplittableBundle: a splittable DoFn whose restrictions (three,
// in one task) would keep its task's cycle open three times the job's
// transaction_timeout_ms. The task gives each restriction a bundle of its
// own and checkpoints a bundle once it has been open max_bundle_time_ms (a
// ProcessBundleSplit at fraction 0), keeps the rest of the restriction as
// it keeps a self-checkpoint's residual, and resumes it in the next
// cycle, so each cycle commits within the timeout; the output holds every
// position of every element once. Without the checkpoints the job fails
// on the embedded broker (its transaction aborted by the timeout:
// INVALID_PRODUCER_EPOCH).
func TestLongSplittableBundle(t *testing.T) {
	for _, b := range []broker{{"embedded", ""}, {"kafkatest", kafkatest.Broker(t)}} {
		t.Run(b.name, func(t *testing.T) {
			ctx := testContext(t, 3*time.Minute)
			opts := map[string]string{"transaction_timeout_ms": "2000", "max_bundle_time_ms": "500", "internal_parallelism": "1"}
			if b.bootstrap != "" {
				opts["bootstrap_servers"] = b.bootstrap
				opts["application_id"] = kafkatest.UniqueName(t, "longsdf")
			}
			got := runToLines(ctx, t, ksrunner, func(out string) *beam.Pipeline {
				p, s := beam.NewPipelineWithRoot()
				lines := beam.ParDo(s, &slowRangeFn{}, beam.Create(s, 7, 8, 9))
				textio.Write(s, out, lines)
				return p
			}, opts)
			var want []string
			for _, e := range []int{7, 8, 9} {
				for p := range slowPositions {
					want = append(want, fmt.Sprintf("element %d position %d", e, p))
				}
			}
			diffLines(t, got, sortedLines(strings.Join(want, "\n")))
		})
	}
}
