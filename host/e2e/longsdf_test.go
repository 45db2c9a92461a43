package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.DoFn3x0[*sdf.LockRTracker, int, func(string)](&slowRangeFn{})
}

// slowPositions and slowStep make each of slowRangeFn's restrictions take
// about 1 s in one DoFn call, and the six of them, in one task, 6 s:
// longer than the transaction_timeout_ms (2000) the test gives the job.
const (
	slowPositions = 500
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

// TestLongSplittableBundle: a splittable DoFn whose restrictions (six, in
// one task) would keep its task's cycle open three times the job's
// transaction_timeout_ms. The task gives each restriction a bundle of its
// own and checkpoints the bundles max_bundle_time_ms after the cycle began
// (a ProcessBundleSplit at fraction 0), keeps the rest of the restriction
// as it keeps a self-checkpoint's residual, keeps the elements not begun
// by then likewise, and resumes them in the next cycle, so each cycle
// commits within the timeout; the output holds every position of every
// element once. Without the checkpoints the job fails on the embedded
// broker (its transaction aborted by the timeout: INVALID_PRODUCER_EPOCH),
// and so it does with each bundle checkpointed max_bundle_time_ms after
// its own start (six of 500 ms in one cycle).
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
				lines := beam.ParDo(s, &slowRangeFn{}, beam.Create(s, 7, 8, 9, 10, 11, 12))
				textio.Write(s, out, lines)
				return p
			}, opts)
			diffLines(t, got, positionLines("", func(int) int { return slowPositions }, 7, 8, 9, 10, 11, 12))
		})
	}
}

func init() {
	register.DoFn3x0[*sdf.LockRTracker, int, func(string)](&unevenRangeFn{})
}

// unevenRangeFn is slowRangeFn with a restriction of as many positions as
// its element says, so that restrictions of one job differ in length.
type unevenRangeFn struct{ slowRangeFn }

func (fn *unevenRangeFn) CreateInitialRestriction(n int) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: int64(n)}
}

// TestSplittableWorkRebalanced: a splittable DoFn with a long restriction
// (1,000 positions, about 2 s) and a short one, which go to the two tasks
// of the job (the spread is by size). The task with the short one is done
// first and takes half of what the other's running bundle has left, by a
// split at fraction 0.5, several times over, in the same cycle: the job's
// committed ksrunner/rebalanced_splits counter shows the splits, and the
// output holds every position once. The short restriction is 100
// positions (0.2 s), or 10 (20 ms): done before the other's bundle is old
// enough to take from (minStealAge), its task waits for it. Without the
// rebalancing the counter stays 0 (without the wait, 0 with the 10); a
// split whose rest went to both tasks would repeat positions, one whose
// rest went to neither would lose them.
func TestSplittableWorkRebalanced(t *testing.T) {
	for _, b := range []broker{{"embedded", ""}, {"kafkatest", kafkatest.Broker(t)}} {
		for _, short := range []int{100, 10} {
			t.Run(fmt.Sprintf("%s/short%d", b.name, short), func(t *testing.T) {
				checkRebalanced(t, b, func(s beam.Scope) beam.PCollection {
					return beam.ParDo(s, &unevenRangeFn{}, beam.Create(s, 1000, short))
				}, positionLines("", func(e int) int { return e }, 1000, short))
			})
		}
	}
}

// checkRebalanced runs a job on b, of two tasks, that writes the lines
// lines makes, and checks that it wrote want and that a task took part of
// another's splittable work (the committed ksrunner/rebalanced_splits).
func checkRebalanced(t *testing.T, b broker, lines func(beam.Scope) beam.PCollection, want []string) {
	t.Helper()
	ctx := testContext(t, 3*time.Minute)
	opts := map[string]string{"internal_parallelism": "2"}
	if b.bootstrap != "" {
		opts["bootstrap_servers"] = b.bootstrap
		opts["application_id"] = kafkatest.UniqueName(t, "rebalance")
	}
	out := filepath.Join(t.TempDir(), "out.txt")
	p, s := beam.NewPipelineWithRoot()
	textio.Write(s, out, lines(s))
	id := runDone(ctx, t, ksrunner, marshal(t, p), opts)
	text, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	diffLines(t, sortedLines(string(text)), want)
	if n := committedCounter(ctx, t, id, "", task.MetricWorkTaken); n < 1 {
		t.Errorf("committed %s/%s: %d, want at least 1 (the task done first takes part of the other's restriction)", "ksrunner", task.MetricWorkTaken, n)
	}
}

func init() {
	register.DoFn4x0[*sdf.LockRTracker, int, string, func(string)](&slowSideRangeFn{})
	register.DoFn4x0[*sdf.LockRTracker, int, string, func(string)](&unevenSideRangeFn{})
}

// unevenSideRangeFn is unevenRangeFn with a side input, a prefix for its
// lines.
type unevenSideRangeFn struct{ unevenRangeFn }

func (fn *unevenSideRangeFn) ProcessElement(rt *sdf.LockRTracker, i int, prefix string, emit func(string)) {
	fn.slowRangeFn.ProcessElement(rt, i, func(line string) { emit(prefix + " " + line) })
}

// TestSplittableWorkRebalancedWithSideInput: TestSplittableWorkRebalanced's
// restrictions read a side input, so each task's gate parks them until the
// side input is ready (gate.go); the task done first still takes part of
// the other's running restriction, which reads the side input as the
// original did. Without gated stages on the board the counter stays 0.
func TestSplittableWorkRebalancedWithSideInput(t *testing.T) {
	for _, b := range []broker{{"embedded", ""}, {"kafkatest", kafkatest.Broker(t)}} {
		t.Run(b.name, func(t *testing.T) {
			checkRebalanced(t, b, func(s beam.Scope) beam.PCollection {
				prefix := beam.Create(s, "side")
				return beam.ParDo(s, &unevenSideRangeFn{}, beam.Create(s, 1000, 100), beam.SideInput{Input: prefix})
			}, positionLines("side ", func(e int) int { return e }, 1000, 100))
		})
	}
}

// slowSideRangeFn is slowRangeFn with a side input, a prefix for its lines.
type slowSideRangeFn struct{ slowRangeFn }

func (fn *slowSideRangeFn) ProcessElement(rt *sdf.LockRTracker, i int, prefix string, emit func(string)) {
	fn.slowRangeFn.ProcessElement(rt, i, func(line string) { emit(prefix + " " + line) })
}

// TestLongSplittableBundleWithSideInput: TestLongSplittableBundle's
// restrictions read a side input, so the task parks them in its store
// until the side input is ready (gate.go). The gate parks and releases a
// checkpointable stage's input as it came, an element a piece, so each
// restriction still gets a bundle of its own, checkpointed in time, and
// the job commits within its transaction timeout with every position once.
func TestLongSplittableBundleWithSideInput(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	opts := map[string]string{"transaction_timeout_ms": "2000", "max_bundle_time_ms": "500", "internal_parallelism": "1"}
	got := runToLines(ctx, t, ksrunner, func(out string) *beam.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		prefix := beam.Create(s, "side")
		lines := beam.ParDo(s, &slowSideRangeFn{}, beam.Create(s, 7, 8, 9, 10, 11, 12), beam.SideInput{Input: prefix})
		textio.Write(s, out, lines)
		return p
	}, opts)
	diffLines(t, got, positionLines("side ", func(int) int { return slowPositions }, 7, 8, 9, 10, 11, 12))
}

// positionLines are the sorted lines the slow range DoFns write for
// elements, positions(e) positions of element e, each after prefix.
func positionLines(prefix string, positions func(e int) int, elements ...int) []string {
	var want []string
	for _, e := range elements {
		for p := range positions(e) {
			want = append(want, fmt.Sprintf("%selement %d position %d", prefix, e, p))
		}
	}
	return sortedLines(strings.Join(want, "\n"))
}
