// Package eostest checks the processing guarantees of the host with faults
// injected into its commit loop (host.WithTestHooks, jobtest.Hooks): a GroupByKey + sum
// pipeline's sums must be exact under exactly_once however many commit
// cycles abort, a job restarted on a wiped state_dir must restore its
// GroupByKey state from the changelog, and a ParDo requiring stable input
// must see the same elements on every retry. The hooks are process-wide, so these
// tests live apart from the other end-to-end tests and do not run in
// parallel.
package eostest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function1x2(toKV)
	register.Function2x1(sumValues)
	register.Function1x2(toHotKV)
	register.Function2x1(sumPadded)
	register.Iter1[string]()
	register.Iter1[int]()
	register.DoFn6x0[beam.Window, state.Provider, timers.Provider, int, int, func(string)](&statefulSumFn{})
	register.Emitter1[string]()
}

// statefulSumFn sums each key's values in user state and emits "key:sum"
// when the window ends (an event-time timer).
type statefulSumFn struct {
	Sum  state.Value[int]
	Fire timers.EventTime
}

func (fn *statefulSumFn) ProcessElement(w beam.Window, sp state.Provider, tp timers.Provider, k, v int, _ func(string)) {
	s, _, err := fn.Sum.Read(sp)
	if err != nil {
		panic(err)
	}
	if err := fn.Sum.Write(sp, s+v); err != nil {
		panic(err)
	}
	fn.Fire.Set(tp, w.MaxTimestamp().ToTime())
}

func (fn *statefulSumFn) OnTimer(_ context.Context, _ beam.EventTime, sp state.Provider, _ timers.Provider, k int, _ timers.Context, emit func(string)) {
	s, _, err := fn.Sum.Read(sp)
	if err != nil {
		panic(err)
	}
	emit(fmt.Sprintf("%d:%d", k, s))
}

const keys = 1000

func toKV(i int) (int, int) { return i % keys, i }

// toHotKV puts every value under key 7, as a 100-byte string.
func toHotKV(i int) (int, string) { return 7, fmt.Sprintf("%0100d", i) }

func sumPadded(k int, vs func(*string) bool) string {
	s, v := 0, ""
	for vs(&v) {
		n, err := strconv.Atoi(v)
		if err != nil {
			panic(err)
		}
		s += n
	}
	return fmt.Sprintf("%d:%d", k, s)
}

func sumValues(k int, vs func(*int) bool) string {
	s, v := 0, 0
	for vs(&v) {
		s += v
	}
	return fmt.Sprintf("%d:%d", k, s)
}

var env *jobtest.Env

// hooks are the fault-injection hooks of the package's job server.
var hooks jobtest.Hooks

func TestMain(m *testing.M) { jobtest.Main(m, host.DefaultOptions(), &env, hooks.ServerOption()) }

// sumPipeline is 0..n-1 keyed by i%keys, grouped and summed per key, written
// as "key:sum" lines to out.
func sumPipeline(n int, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	kvs := beam.ParDo(s, toKV, beam.CreateList(s, in))
	sums := beam.ParDo(s, sumValues, beam.GroupByKey(s, kvs))
	textio.Write(s, out, sums)
	return p
}

// statefulSumPipeline is sumPipeline with the sums kept in user state.
func statefulSumPipeline(n int, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	kvs := beam.ParDo(s, toKV, beam.CreateList(s, in))
	textio.Write(s, out, beam.ParDo(s, &statefulSumFn{}, kvs))
	return p
}

func wantSums(n int) map[int]int {
	want := map[int]int{}
	for i := 0; i < n; i++ {
		want[i%keys] += i
	}
	return want
}

// readSums reads the "key:sum" lines; dups counts keys written more than
// once (the last line wins in got).
func readSums(t *testing.T, out string) (got map[int]int, dups int) {
	t.Helper()
	files, _ := filepath.Glob(out + "*")
	got = map[int]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			ki, err1 := strconv.Atoi(k)
			vi, err2 := strconv.Atoi(v)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("%s: bad line %q", f, sc.Text())
			}
			if _, dup := got[ki]; dup {
				dups++
			}
			got[ki] = vi
		}
		fh.Close()
	}
	return got, dups
}

// compare reports how many keys have a sum other than the wanted one (a
// missing key counts).
func compare(got, want map[int]int) (wrong int, example string) {
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if wrong == 0 {
				example = fmt.Sprintf("key %d: sum %d (present %v), want %d", k, g, ok, w)
			}
			wrong++
		}
	}
	return wrong, example
}

// abortCycles makes commit cycles that consumed records abort after their
// output, watermarks and changelog reached the broker: the first (the one
// that runs the pipeline's Create) and every even one (the second is the
// GroupByKey's), maxAborts times.
// (Each abort reopens the tasks, which report their watermarks again: the
// next cycles always consume records, so without a bound the aborts would
// go on for as long as the job runs.)
func abortCycles(t *testing.T) (aborted func() int) {
	var mu sync.Mutex
	cycles, aborts := 0, 0
	restore := hooks.Set(host.TestHooks{BeforeCommit: func(int) error {
		mu.Lock()
		defer mu.Unlock()
		cycles++
		if (cycles == 1 || cycles%2 == 0) && aborts < maxAborts {
			aborts++
			return host.ErrAbortCycle
		}
		return nil
	}})
	t.Cleanup(restore)
	return func() int { mu.Lock(); defer mu.Unlock(); return aborts }
}

const (
	elements  = 50_000
	maxAborts = 12
)

// runAborting runs the GroupByKey + sum pipeline under guarantee with every
// other commit cycle aborted (abortCycles), requiring it to end DONE. It
// returns the count of aborted cycles, the sums file, the broker and the
// application id.
func runAborting(t *testing.T, guarantee string, packBytes int) (aborted func() int, out, bootstrap, appID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	aborted = abortCycles(t)
	out = filepath.Join(t.TempDir(), "sums.txt")
	bootstrap, appID = kafkatest.Broker(t), kafkatest.UniqueName(t, "app")
	id, r := env.Run(ctx, t, env.Marshal(t, sumPipeline(elements, out)), map[string]string{
		"bootstrap_servers":    bootstrap,
		"application_id":       appID,
		"keep_internal_topics": "true",
		"processing_guarantee": guarantee,
		"commit_interval_ms":   "20",
		"record_pack_bytes":    strconv.Itoa(packBytes),
	})
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	return aborted, out, bootstrap, appID
}

// TestExactlyOnceSumsUnderAbortedCycles aborts every other commit cycle (after
// flushing its records to the broker) of a GroupByKey + sum pipeline: under
// exactly_once every sum is exact, whether the internal records carry one
// element each or are packed (an aborted cycle's packs must vanish with
// it, and no pack may straddle a commit).
func TestExactlyOnceSumsUnderAbortedCycles(t *testing.T) {
	for _, pack := range []int{0, host.DefaultRecordPackBytes} {
		t.Run(fmt.Sprintf("record_pack_bytes=%d", pack), func(t *testing.T) { testExactlyOnceSums(t, pack) })
	}
}

func testExactlyOnceSums(t *testing.T, packBytes int) {
	aborted, out, bootstrap, appID := runAborting(t, "exactly_once", packBytes)
	if n := aborted(); n < 3 {
		t.Fatalf("only %d commit cycles were aborted, want at least 3", n)
	} else {
		t.Logf("%d commit cycles aborted", n)
	}
	got, dups := readSums(t, out)
	if dups > 0 {
		t.Errorf("%d sums were written more than once", dups)
	}
	if wrong, ex := compare(got, wantSums(elements)); wrong > 0 {
		t.Errorf("%d of %d sums are wrong, e.g. %s", wrong, keys, ex)
	}
	// What read_committed consumers see of the internal topics: the
	// impulse, the GroupByKey's input and the file writer's input, each
	// record once although aborted copies are in the logs.
	if counts, want := committedData(t, bootstrap, appID), []int{1, keys, elements}; !slices.Equal(counts, want) {
		t.Errorf("committed data records per internal topic %v, want %v", counts, want)
	}
}

// TestAtLeastOnceRepeatsUnderAbortedCycles is the same run with
// at_least_once: an aborted cycle's output stays in Kafka while its input is
// processed again: the internal topics hold the GroupByKey's input twice
// (and, depending on timing, sums come out wrong). It shows the fault
// injection really repeats work that exactly_once then hides.
func TestAtLeastOnceRepeatsUnderAbortedCycles(t *testing.T) {
	aborted, out, bootstrap, appID := runAborting(t, "at_least_once", host.DefaultRecordPackBytes)
	if aborted() == 0 {
		t.Fatal("no commit cycle was aborted")
	}
	// The first aborted cycle ran the Create: its output stayed, and the
	// Create ran again. (Whether the final sums show it depends on timing:
	// a copy that arrives after the GroupByKey fired is late data.)
	counts := committedData(t, bootstrap, appID)
	if len(counts) == 0 || counts[len(counts)-1] < 2*elements {
		t.Errorf("committed data records per internal topic %v: want the GroupByKey's input (%d values) at least twice", counts, elements)
	}
	got, dups := readSums(t, out)
	wrong, _ := compare(got, wantSums(elements))
	t.Logf("at_least_once after %d aborted cycles: data records per internal topic %v; %d sums written more than once, %d wrong", aborted(), counts, dups, wrong)
}

var errInjected = errors.New("injected instance failure")

// TestRestoreFromChangelog fails a job's instance in its third commit cycle
// that consumed records (the first ran the Create, the second committed
// part of the GroupByKey's input into its state), then runs the same
// pipeline again with the same application_id and a new, empty state_dir:
// the GroupByKey's state comes back from the changelog, and every sum is
// exact (without the changelog the values consumed before the failure would
// be missing: their offsets are committed).
func TestRestoreFromChangelog(t *testing.T) { testRestore(t, sumPipeline) }

// TestRestoreUserStateFromChangelog is TestRestoreFromChangelog with the
// sums in a stateful DoFn's value state, flushed by event-time timers: user
// state and timers come back from the changelog.
func TestRestoreUserStateFromChangelog(t *testing.T) { testRestore(t, statefulSumPipeline) }

func testRestore(t *testing.T, build func(n int, out string) *beam.Pipeline) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 20_000 // at most 2,000 records per poll: the stateful stage's input takes several cycles
	bootstrap := kafkatest.Broker(t)
	appID := kafkatest.UniqueName(t, "app")
	out := filepath.Join(t.TempDir(), "sums.txt")
	pipe := env.Marshal(t, build(n, out))
	opts := map[string]string{
		"bootstrap_servers":    bootstrap,
		"application_id":       appID,
		"keep_internal_topics": "true",
		"processing_guarantee": "exactly_once",
		// The failure is placed by records consumed, which packing
		// (record_pack_bytes) would make a few per cycle.
		"record_pack_bytes": "0",
	}

	// The first run fails in the first cycle after cycles that consumed at
	// least one full poll of records (the impulse and Create consume one
	// record each) have committed: by then the stateful stage has state,
	// however the cycles fell under the machine's load.
	var mu sync.Mutex
	committed, restored, failed := 0, 0, false
	restore := hooks.Set(host.TestHooks{
		BeforeCommit: func(records int) error {
			mu.Lock()
			defer mu.Unlock()
			if !failed && committed >= 2000 {
				failed = true
				return errInjected
			}
			committed += records
			return nil
		},
		Restored: func(_ int, _ int32, records int) {
			mu.Lock()
			defer mu.Unlock()
			restored += records
		},
		MaxPollRecords: func() int { return 2000 },
	})
	defer restore()
	id, r := env.Run(ctx, t, pipe, opts)
	if r.State != jobpb.JobState_FAILED {
		t.Fatalf("first run: job %s ended %v, want FAILED by the injected failure; errors: %q", id, r.State, r.Errors)
	}
	mu.Lock()
	restoredFirst := restored
	mu.Unlock()
	if restoredFirst != 0 {
		t.Errorf("first run restored %d changelog records, want 0", restoredFirst)
	}

	// Without its GroupByKey state (watermark reports included) the second
	// run would never finish: bound it. Generously: with user state every
	// element is a state request, and under -race on a loaded 2-core CI
	// machine the run took 60-85 s (8 s without -race).
	ctx2, cancel2 := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel2()
	id, r = env.Run(ctx2, t, pipe, opts)
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("second run: job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	mu.Lock()
	got := restored
	mu.Unlock()
	// A GroupByKey buffer entry (or value state and timers) per key seen in
	// the committed cycle (2,000 records of 1,000 keys, maybe from one
	// partition only), besides a few watermark and bookkeeping keys.
	if got < keys/10 {
		t.Errorf("second run restored %d changelog records, want the stateful stage's state (at least %d)", got, keys/10)
	}
	t.Logf("second run restored %d changelog records", got)
	got2, dups := readSums(t, out)
	if dups > 0 {
		t.Errorf("%d sums were written more than once", dups)
	}
	if wrong, ex := compare(got2, wantSums(n)); wrong > 0 {
		t.Errorf("%d of %d sums are wrong after the restore, e.g. %s", wrong, keys, ex)
	}
}

// TestHotKeyState groups 100,000 values of 100 bytes under one key, about
// 10 MB of GroupByKey state in one commit cycle: it reaches the changelog in
// records Kafka accepts (runs are split at maxStoredValue), and the sum is
// exact.
func TestHotKeyState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 100_000
	out := filepath.Join(t.TempDir(), "sums.txt")
	p, s := beam.NewPipelineWithRoot()
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	textio.Write(s, out, beam.ParDo(s, sumPadded, beam.GroupByKey(s, beam.ParDo(s, toHotKV, beam.CreateList(s, in)))))
	id, r := env.Run(ctx, t, env.Marshal(t, p), map[string]string{"bootstrap_servers": kafkatest.Broker(t)})
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	got, _ := readSums(t, out)
	if want := n * (n - 1) / 2; len(got) != 1 || got[7] != want {
		t.Errorf("sums %v, want {7: %d}", got, want)
	}
}
