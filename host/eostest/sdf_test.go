package eostest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/host"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.DoFn3x1[*sdf.LockRTracker, int, func(int), sdf.ProcessContinuation](&checkpointingFn{})
	register.Emitter1[int]()
}

const (
	sdfParts   = 4   // elements of the Create, one restriction each
	sdfPerPart = 500 // positions of each restriction
	sdfPerCall = 50  // positions one call claims before it checkpoints
)

// checkpointingFn emits the positions of [i*sdfPerPart, (i+1)*sdfPerPart)
// for its element i, sdfPerCall of them per call, checkpointing after each
// with a resume delay of Delay: the residuals carry the rest across commit
// cycles.
type checkpointingFn struct {
	Delay time.Duration
}

// sdfCalls counts checkpointingFn's calls per restriction start, in this
// process's LOOPBACK worker, and when each start was first called; a call
// starting at panicAt (if set) panics.
var sdfCalls struct {
	sync.Mutex
	starts  map[int64]int
	first   map[int64]time.Time
	panicAt *int64
}

func (fn *checkpointingFn) CreateInitialRestriction(i int) offsetrange.Restriction {
	return offsetrange.Restriction{Start: int64(i * sdfPerPart), End: int64((i + 1) * sdfPerPart)}
}

func (fn *checkpointingFn) SplitRestriction(_ int, r offsetrange.Restriction) []offsetrange.Restriction {
	return []offsetrange.Restriction{r}
}

func (fn *checkpointingFn) RestrictionSize(_ int, r offsetrange.Restriction) float64 { return r.Size() }

func (fn *checkpointingFn) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}

func (fn *checkpointingFn) ProcessElement(rt *sdf.LockRTracker, _ int, emit func(int)) sdf.ProcessContinuation {
	start := rt.GetRestriction().(offsetrange.Restriction).Start
	sdfCalls.Lock()
	sdfCalls.starts[start]++
	if _, ok := sdfCalls.first[start]; !ok {
		sdfCalls.first[start] = time.Now()
	}
	fail := sdfCalls.panicAt != nil && *sdfCalls.panicAt == start
	sdfCalls.Unlock()
	if fail {
		panic(fmt.Sprintf("injected failure at position %d", start))
	}
	for p := start; p < start+sdfPerCall; p++ {
		if !rt.TryClaim(p) {
			return sdf.StopProcessing()
		}
		emit(int(p))
	}
	return sdf.ResumeProcessingIn(fn.Delay)
}

// sdfSumPipeline is sumPipeline with 0..sdfParts*sdfPerPart-1 emitted by
// checkpointingFn.
func sdfSumPipeline(delay time.Duration, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	parts := make([]int, sdfParts)
	for i := range parts {
		parts[i] = i
	}
	ints := beam.ParDo(s, &checkpointingFn{Delay: delay}, beam.CreateList(s, parts))
	textio.Write(s, out, beam.ParDo(s, sumValues, beam.GroupByKey(s, beam.ParDo(s, toKV, ints))))
	return p
}

// resetSDFCalls clears sdfCalls, setting panicAt, and returns a function
// that reads it: how many calls there were, and how many restriction starts
// were called more than once, but the initial ones (a call from a residual
// called again).
func resetSDFCalls(panicAt *int64) func() (calls, repeated int) {
	sdfCalls.Lock()
	sdfCalls.starts, sdfCalls.first, sdfCalls.panicAt = map[int64]int{}, map[int64]time.Time{}, panicAt
	sdfCalls.Unlock()
	return func() (calls, repeated int) {
		sdfCalls.Lock()
		defer sdfCalls.Unlock()
		for start, n := range sdfCalls.starts {
			calls += n
			if n > 1 && start%sdfPerPart != 0 {
				repeated++
			}
		}
		return calls, repeated
	}
}

// TestSDFResidualsUnderAbortedCycles runs a splittable DoFn that
// checkpoints after every 50 of its 2,000 positions (its residuals are kept
// in the task's state across commit cycles) with every other commit cycle
// that ran it aborted (Hooks.EveryCycle: a cycle that only resumes
// residuals consumes nothing): under exactly_once the sums of its output
// are exact, each written once. The aborts do hit its residuals: calls
// resumed from a residual by a cycle that aborted run again (the reopened
// task found the residual again). The GroupByKey in the global window fires
// only when the watermark passes its end, so a watermark not held by the
// pending residuals would leave values out of the sums.
func TestSDFResidualsUnderAbortedCycles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	calls := resetSDFCalls(nil)
	var mu sync.Mutex
	seen, ran, aborted := 0, 0, 0
	defer hooks.Set(host.TestHooks{
		// Cycles that only resume residuals consume nothing.
		EveryCycle: func() bool { return true },
		BeforeCommit: func(int) error {
			mu.Lock()
			defer mu.Unlock()
			if n, _ := calls(); n > seen {
				seen = n
				if ran++; ran%2 == 0 {
					aborted++
					return host.ErrAbortCycle
				}
			}
			return nil
		},
	})()
	out := filepath.Join(t.TempDir(), "sums.txt")
	id, r := env.Run(ctx, t, env.Marshal(t, sdfSumPipeline(0, out)), map[string]string{
		"bootstrap_servers":    kafkatest.Broker(t),
		"application_id":       kafkatest.UniqueName(t, "app"),
		"processing_guarantee": "exactly_once",
		"commit_interval_ms":   "20",
	})
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	n, repeated := calls()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d commit cycles aborted; %d calls of the splittable DoFn, %d residuals resumed again", aborted, n, repeated)
	if want := sdfParts * sdfPerPart / sdfPerCall; n < want || repeated == 0 {
		t.Errorf("%d calls of the splittable DoFn, %d residuals resumed again: want at least %d calls, some residuals resumed again (after an abort)", n, repeated, want)
	}
	got, dups := readSums(t, out)
	if dups > 0 {
		t.Errorf("%d sums were written more than once", dups)
	}
	if wrong, ex := compare(got, wantSums(sdfParts*sdfPerPart)); wrong > 0 {
		t.Errorf("%d of %d sums are wrong, e.g. %s", wrong, keys, ex)
	}
}

// TestSDFResidualsRestoreFromChangelog fails a job while its splittable
// DoFn (checkpointing with a resume delay) has residuals pending: its call
// at position 150 panics, after the calls at 0, 50 and 100, each resumed
// from the residual of the one before, in a later cycle, so after that
// residual committed. The pipeline then runs again under the same
// application_id with a new, empty store (each run's is temporary): the
// residuals come back from the changelog, so the DoFn goes on at 150, never
// again at 0, and every sum is exact: nothing lost, nothing twice.
func TestSDFResidualsRestoreFromChangelog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "sums.txt")
	pipe := env.Marshal(t, sdfSumPipeline(20*time.Millisecond, out))
	opts := map[string]string{
		"bootstrap_servers":    kafkatest.Broker(t),
		"application_id":       kafkatest.UniqueName(t, "app"),
		"processing_guarantee": "exactly_once",
	}
	panicAt := int64(3 * sdfPerCall)
	calls := resetSDFCalls(&panicAt)
	id, r := env.Run(ctx, t, pipe, opts)
	if r.State != jobpb.JobState_FAILED {
		t.Fatalf("first run: job %s ended %v, want FAILED by the DoFn's panic; errors: %q", id, r.State, r.Errors)
	}
	first, _ := calls()

	calls = resetSDFCalls(nil)
	id, r = env.Run(ctx, t, pipe, opts)
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("second run: job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	second, _ := calls()
	sdfCalls.Lock()
	again, resumed := sdfCalls.starts[0], sdfCalls.starts[panicAt]
	sdfCalls.Unlock()
	t.Logf("calls of the splittable DoFn: %d in the failed run, %d after the restore", first, second)
	if again != 0 || resumed != 1 {
		t.Errorf("after the restore: %d calls at position 0 and %d at %d; want none (its residual committed) and one (resumed from the residual)", again, resumed, panicAt)
	}
	got, dups := readSums(t, out)
	if dups > 0 {
		t.Errorf("%d sums were written more than once", dups)
	}
	if wrong, ex := compare(got, wantSums(sdfParts*sdfPerPart)); wrong > 0 {
		t.Errorf("%d of %d sums are wrong after the restore, e.g. %s", wrong, keys, ex)
	}
}

// TestSDFResumeDelay: a residual resumes once the delay its DoFn asked for
// has passed, and then at once, although the commit loop's polls wait up to
// commit_interval_ms (10 s here) for records: the loop polls no longer than
// until the first residual is due. No call of checkpointingFn comes earlier
// than 300 ms after the one whose residual it resumes, and the median gap
// is under 2.5 s (a poll of 10 s would make every gap 10 s; on a loaded
// machine a commit now and then takes seconds, which the median rides out:
// CI once saw one gap of 3.4 s in each part, all at the same moment).
func TestSDFResumeDelay(t *testing.T) {
	const delay = 300 * time.Millisecond
	calls := resetSDFCalls(nil)
	runDone(t, env.Marshal(t, sdfSumPipeline(delay, filepath.Join(t.TempDir(), "sums.txt"))), map[string]string{
		"commit_interval_ms": "10000",
	})
	if n, _ := calls(); n != sdfParts*sdfPerPart/sdfPerCall {
		t.Fatalf("%d calls of the splittable DoFn, want %d", n, sdfParts*sdfPerPart/sdfPerCall)
	}
	sdfCalls.Lock()
	defer sdfCalls.Unlock()
	var gaps []time.Duration
	for part := range sdfParts {
		for p := part*sdfPerPart + sdfPerCall; p < (part+1)*sdfPerPart; p += sdfPerCall {
			gap := sdfCalls.first[int64(p)].Sub(sdfCalls.first[int64(p-sdfPerCall)])
			gaps = append(gaps, gap)
			if gap < delay {
				t.Errorf("position %d: called %v after the call whose residual it resumes, want at least %v", p, gap, delay)
			}
		}
	}
	sorted := slices.Sorted(slices.Values(gaps))
	if median := sorted[len(sorted)/2]; median > 2500*time.Millisecond {
		t.Errorf("median gap between a call and the one resuming its residual: %v, want under 2.5s", median)
	}
	t.Logf("gaps between a call and the one resuming its residual: %v", gaps)
}
