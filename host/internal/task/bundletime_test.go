package task

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Bundles by time (Env.MaxBundleTime): a fake clock, read by the task
// through Env.Now, advances only when the fake executor processes an
// element, so a bundle's age is a count of elements, not of the machine's
// speed.

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Element sizes of these tests: a chunk (processBatchBytes) holds
// perChunk of them.
const (
	elemSize = 64 << 10
	perChunk = 15
	// elemTime is how long the fake executor takes per element.
	elemTime = 10 * time.Millisecond
)

// bundleTimeTask is the task of the stage after the Reshuffle of
// Create | Reshuffle | pairFn | GroupByKey | formatFn: a passthrough root
// handing its records to one stage (pairFn), which writes the GroupByKey's
// repartition topic. The stage's executor takes elemTime of the clock per
// element and emits one KV per element; the time bound is maxTime.
func bundleTimeTask(t *testing.T, maxTime time.Duration) (*testEnv, *Task, *input, *fakeExec, *fakeClock) {
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo(s, formatFn, beam.GroupByKey(s, beam.ParDo(s, pairFn, beam.Reshuffle(s, beam.Create(s, "a")))))
	te := newTestEnv(t, marshal(t, p), 1)
	sub := te.find("reading the Reshuffle with one stage", func(st *translate.SubTopology) bool {
		return st.Root.Kind == translate.RootPassthrough && len(st.Stages) == 1 && te.writes(st, translate.TopicRepartition)
	})
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	te.env.Now = clock.Now
	te.env.MaxBundleTime = maxTime
	f := te.exec(sub)
	f.each = func(*fakeBundle, shuffle.WindowedValue) error { clock.advance(elemTime); return nil }
	f.setFn(func(in shuffle.WindowedValue) [][]byte { return [][]byte{rewrap(in, kv("k", "v"))} })
	return te, te.task(sub, 0), te.input(sub, 0), f, clock
}

// elems are data records of the elements numbered from..to-1, each of
// elemSize bytes and starting with its number.
func elems(in *input, from, to int) []*kgo.Record {
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		v := fmt.Sprintf("%04d", i) + strings.Repeat("x", elemSize-4)
		recs = append(recs, in.data(wv(1000, strEl(v), globalWindow))...)
	}
	return recs
}

// bundleIDs are the element numbers of each bundle since the last call.
func bundleIDs(t *testing.T, f *fakeExec) [][]int {
	t.Helper()
	var out [][]int
	for _, b := range f.takeBundles() {
		var ids []int
		for _, e := range b {
			n, err := strconv.Atoi(e[1:5]) // `"0042xxx…" @… GW nofiring`
			if err != nil {
				t.Fatalf("element %.20q…: %v", e, err)
			}
			ids = append(ids, n)
		}
		out = append(out, ids)
	}
	return out
}

// sizes are the lengths of bundles.
func sizes(bundles [][]int) []int {
	var out []int
	for _, b := range bundles {
		out = append(out, len(b))
	}
	return out
}

// dataRecords counts the data records among recs.
func dataRecords(recs []*kgo.Record) int {
	n := 0
	for _, r := range recs {
		if len(r.Value) > 0 && r.Value[0] == shuffle.KindData {
			n++
		}
	}
	return n
}

// A bundle open MaxBundleTime closes at the next chunk boundary, within
// one Handle of many records (one poll): 100 elements of 15 per chunk at
// 10 ms each close bundles after 45 elements (450 ms, the first boundary
// past 400 ms), not before; the rest closes at the commit. Without a time
// bound (and MaxBundleSize 1000) the cycle is one bundle. Every element is
// processed once and its output produced once, in the cycle.
func TestBundleClosesOnTime(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxTime     time.Duration
		afterHandle []int // sizes of the bundles Handle finished
		all         []int // and of every bundle of the cycle
	}{
		{"400ms", 400 * time.Millisecond, []int{45, 45}, []int{45, 45, 10}},
		{"none", 0, nil, []int{100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te, tk, in, f, _ := bundleTimeTask(t, tc.maxTime)
			ctx := context.Background()
			if err := tk.Handle(ctx, elems(in, 0, 100)); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			finished := f.finished
			f.mu.Unlock()
			if finished != len(tc.afterHandle) {
				t.Errorf("Handle finished %d bundles, want %d", finished, len(tc.afterHandle))
			}
			if err := tk.PrepareCommit(ctx); err != nil {
				t.Fatal(err)
			}
			bundles := bundleIDs(t, f)
			if got := sizes(bundles); !slices.Equal(got, tc.all) {
				t.Errorf("bundles of %v elements, want %v", got, tc.all)
			}
			var ids []int
			for _, b := range bundles {
				ids = append(ids, b...)
			}
			if want := seq(0, 100); !slices.Equal(ids, want) {
				t.Errorf("elements processed %v, want each of 0..99 once, in order", ids)
			}
			if n := dataRecords(te.take()); n != 100 {
				t.Errorf("the cycle produced %d outputs, want 100", n)
			}
		})
	}
}

// seq is from..to-1.
func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// A bundle that gets no new chunk closes by age at the end of the next
// Handle (a cycle may take more than one poll): 16 elements (two chunks,
// so the stage gets them in Handle) open a bundle; after the clock moved
// past the bound, a Handle of one element (less than a chunk, kept
// pending) closes it without adding that element, which goes into the
// next bundle.
func TestOldBundleClosesWithoutNewInput(t *testing.T) {
	_, tk, in, f, clock := bundleTimeTask(t, time.Second)
	ctx := context.Background()
	if err := tk.Handle(ctx, elems(in, 0, 16)); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Second)
	if err := tk.Handle(ctx, elems(in, 16, 17)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	finished := f.finished
	f.mu.Unlock()
	if finished != 1 {
		t.Errorf("after the second Handle %d bundles finished, want 1 (the old one)", finished)
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := bundleIDs(t, f), [][]int{seq(0, 16), {16}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("bundles %v, want %v", got, want)
	}
}

// No bundle straddles a commit: a bundle younger than MaxBundleTime, and
// smaller than MaxBundleSize, still closes in PrepareCommit, and the next
// cycle's elements go into new bundles, however soon that cycle starts.
func TestBundleNeverStraddlesCommit(t *testing.T) {
	te, tk, in, f, _ := bundleTimeTask(t, time.Hour)
	for c := range 3 {
		from := 20 * c
		te.cycle(tk, elems(in, from, from+20)...) // two chunks: the stage gets them in Handle
		if got := bundleIDs(t, f); len(got) != 1 || !slices.Equal(got[0], seq(from, from+20)) {
			t.Errorf("cycle %d: bundles %v, want one of its own elements %d..%d", c, got, from, from+19)
		}
		f.mu.Lock()
		started, finished := f.started, f.finished
		f.mu.Unlock()
		if started != c+1 || finished != c+1 {
			t.Errorf("after cycle %d: %d bundles started, %d finished; want %d and %d", c, started, finished, c+1, c+1)
		}
		if n := dataRecords(te.take()); n != 20 {
			t.Errorf("cycle %d produced %d outputs, want 20", c, n)
		}
	}
}

// Bundles closed on time within a cycle count their metrics as attempted
// when they close, and are finalized, their metrics committed, only once
// the cycle committed (Finalize); an aborted cycle's bundles never are.
func TestBundlesClosedOnTimeFinalizeAfterCommit(t *testing.T) {
	te, tk, in, f, _ := bundleTimeTask(t, 400*time.Millisecond)
	var mu sync.Mutex
	var finalized []int
	f.finish = func() (executor.Result, error) {
		n := f.finished // Finish counted this bundle before calling finish
		return executor.Result{
			Metrics: []*pipepb.MonitoringInfo{hostCounter("t", "bundles", 1)},
			Finalize: func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				finalized = append(finalized, n)
				return nil
			},
		}, nil
	}
	check := func(when string, attempted, committed int64, fin []int) {
		t.Helper()
		if a, c := counter(t, te.env.Metrics.Attempted, "t", "bundles"), counter(t, te.env.Metrics.Committed, "t", "bundles"); a != attempted || c != committed {
			t.Errorf("%s: bundles attempted %d, committed %d; want %d, %d", when, a, c, attempted, committed)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(finalized, fin) {
			t.Errorf("%s: finalized bundles %v, want %v", when, finalized, fin)
		}
	}
	ctx := context.Background()
	if err := tk.Handle(ctx, elems(in, 0, 100)); err != nil {
		t.Fatal(err)
	}
	check("after Handle", 2, 0, nil)
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tk.ProduceChangelog(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tk.CommitState(); err != nil {
		t.Fatal(err)
	}
	check("committed, before Finalize", 3, 0, nil)
	tk.Finalize(ctx)
	check("finalized", 3, 3, []int{1, 2, 3})

	// An aborted cycle: its bundles closed on time are dropped with the
	// task, and the task reopened from the store finalizes nothing of them.
	if err := tk.Handle(ctx, elems(in, 100, 200)); err != nil {
		t.Fatal(err)
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	tk.Abort()
	tk = te.task(tk.sub, 0)
	tk.Finalize(ctx)
	check("aborted", 6, 3, []int{1, 2, 3})
}
