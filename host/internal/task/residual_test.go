package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// residualFixture is the impulse task of impulseTask with a fake clock,
// whose stage acts as a splittable DoFn: for each input element (a string,
// or the impulse's empty bytes) it outputs "k":element, and its bundle
// returns the residuals that checkpoints[element] says.
type residualFixture struct {
	te    *testEnv
	sub   *translate.SubTopology
	tk    *Task
	f     *fakeExec
	clock *fakeClock

	mu          sync.Mutex
	checkpoints map[string][]executor.Residual
	seen        []string // the input elements of the open bundle
	finalized   []string // the first input element of each finalized bundle
}

func newResidualFixture(t *testing.T) *residualFixture {
	te, sub := impulseTask(t, 1)
	x := &residualFixture{te: te, sub: sub, f: te.exec(sub), clock: &fakeClock{now: time.Unix(1e9, 0)}, checkpoints: map[string][]executor.Residual{}}
	te.env.Now = x.clock.Now
	x.f.setFn(func(in shuffle.WindowedValue) [][]byte {
		return [][]byte{wv(1000, kv("k", elemString(t, in)), interval(0, 60000))}
	})
	x.f.each = func(_ *fakeBundle, in shuffle.WindowedValue) error {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.seen = append(x.seen, elemString(t, in))
		return nil
	}
	x.f.finish = func() (executor.Result, error) {
		x.mu.Lock()
		defer x.mu.Unlock()
		var res executor.Result
		for _, e := range x.seen {
			res.Residuals = append(res.Residuals, x.checkpoints[e]...)
		}
		if len(x.seen) > 0 {
			first := x.seen[0]
			res.Finalize = func(context.Context) error {
				x.mu.Lock()
				defer x.mu.Unlock()
				x.finalized = append(x.finalized, first)
				return nil
			}
		}
		x.seen = nil
		return res, nil
	}
	x.tk = te.task(sub, 0)
	return x
}

// elemString is the string (or bytes) element of an impulse task's input.
func elemString(t *testing.T, in shuffle.WindowedValue) string {
	n, l := binary.Uvarint(in.Elem)
	if l <= 0 || uint64(len(in.Elem)-l) != n {
		t.Fatalf("input element %x is not a string", in.Elem)
	}
	return string(in.Elem[l:])
}

// residual is a checkpoint whose rest is the element name at timestamp ts.
func residual(name string, ts int64, delay time.Duration) executor.Residual {
	return executor.Residual{Element: wv(ts, strEl(name), globalWindow), Delay: delay}
}

// out is the line of the stage's output for input element name.
func (x *residualFixture) out(name string) string {
	return fmt.Sprintf(`CoGBK-repartition/0 key "\x01k" "k":%q @1000 [0,60000) nofiring`, name)
}

func (x *residualFixture) takeFinalized() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.finalized
	x.finalized = nil
	return f
}

// restore opens the task again on a new store rebuilt from every changelog
// record produced so far, as a task moving to another instance is.
func (x *residualFixture) restore(t *testing.T, changelog []*kgo.Record) {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b := db.NewBatch()
	for _, r := range changelog {
		if r.Value == nil {
			err = b.Delete(r.Key, nil)
		} else {
			err = b.Set(r.Key, r.Value[1:], nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	x.tk.Abort()
	x.te.env.DB = db
	x.tk = x.te.task(x.sub, 0)
}

// storedResiduals are the residual keys of the task in the store.
func (x *residualFixture) storedResiduals(t *testing.T) int {
	return len(storeContents(t, x.te.env.DB, state.Key(x.tk.prefix, state.Residual)))
}

func (x *residualFixture) checkResumeAt(t *testing.T, want time.Time) {
	t.Helper()
	at, ok := x.tk.ResumeAt()
	switch {
	case want.IsZero() && ok:
		t.Errorf("ResumeAt %v, want none pending", at)
	case !want.IsZero() && (!ok || !at.Equal(want)):
		t.Errorf("ResumeAt %v (pending %v), want %v", at, ok, want)
	}
}

// A splittable DoFn's residuals are kept in the task's state across the
// commit of the cycle that made them: the cycle commits, with its output,
// and its bundle finalizers run, before the residual resumes (in a new
// bundle) once its delay has passed, never in the cycle that made it. While
// a residual is pending it holds the task's output watermark at its
// element's timestamp, or at the SDK's estimate of its output watermark. It
// is in the changelog: a task restored from it resumes it, and one
// restored after it was processed does not (nor does a task reopened after
// an aborted cycle that had processed it lose it).
func TestResidualsAcrossCommits(t *testing.T) {
	x := newResidualFixture(t)
	te := x.te
	start := x.clock.Now()
	x.checkpoints[""] = []executor.Residual{residual("rest", 5, 10*time.Second)}
	rest2 := residual("rest2", 5, 0)
	rest2.OutputWatermark, rest2.Estimated = 7, true
	x.checkpoints["rest"] = []executor.Residual{rest2}
	var changelog []*kgo.Record
	cycle := func(recs ...*kgo.Record) {
		t.Helper()
		te.cycle(x.tk, recs...)
		changelog = append(changelog, te.takeChangelog()...)
	}

	// The impulse checkpoints: the cycle commits, holding the watermark
	// at the residual's timestamp, and finalizes the bundle.
	cycle(te.input(x.sub, 0).data(nil)...)
	checkLines(t, "cycle 1 bundles", x.f.inputs(), []string{impulseInput(t)})
	checkLines(t, "cycle 1 produced", te.describe(te.take()), lines(x.out(""), te.reports(x.tk, "5")))
	checkLines(t, "cycle 1 finalized", x.takeFinalized(), []string{""})
	if n := x.storedResiduals(t); n != 1 {
		t.Errorf("after cycle 1: %d residuals stored, want 1", n)
	}
	x.checkResumeAt(t, start.Add(10*time.Second))

	// Not due yet: nothing runs, the watermark stays.
	x.clock.advance(9 * time.Second)
	cycle()
	checkLines(t, "cycle 2 bundles", x.f.inputs(), nil)
	checkLines(t, "cycle 2 produced", te.describe(te.take()), nil)

	// Restored from the changelog, the task finds it (and reports the
	// held watermark at once, as a new task does).
	x.restore(t, changelog)
	x.checkResumeAt(t, start.Add(10*time.Second))
	x.clock.advance(time.Second)
	cycle()
	checkLines(t, "cycle 3 bundles", x.f.inputs(), []string{`"rest" @5 GW nofiring`})
	// Its own residual (no delay) waits for the next cycle, holding the
	// watermark at the SDK's estimate.
	checkLines(t, "cycle 3 produced", te.describe(te.take()), lines(x.out("rest"), te.reports(x.tk, "7")))
	checkLines(t, "cycle 3 finalized", x.takeFinalized(), []string{"rest"})
	x.checkResumeAt(t, start.Add(10*time.Second))

	// A cycle that processes it aborts: the reopened task still has it.
	ctx := context.Background()
	if err := x.tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	checkLines(t, "aborted cycle bundles", x.f.inputs(), []string{`"rest2" @5 GW nofiring`})
	te.take()
	te.takeChangelog()
	x.tk.Abort()
	x.tk = te.task(x.sub, 0)
	x.takeFinalized()

	cycle()
	checkLines(t, "cycle 4 bundles", x.f.inputs(), []string{`"rest2" @5 GW nofiring`})
	checkLines(t, "cycle 4 produced", te.describe(te.take()), lines(x.out("rest2"), te.reports(x.tk, "+inf")))
	if n := x.storedResiduals(t); n != 0 {
		t.Errorf("after cycle 4: %d residuals stored, want none", n)
	}
	x.checkResumeAt(t, time.Time{})

	// Restored after it was processed: nothing runs again.
	x.restore(t, changelog)
	x.checkResumeAt(t, time.Time{})
	cycle()
	checkLines(t, "after the restore, bundles", x.f.inputs(), nil)
	checkLines(t, "after the restore, produced", te.describe(te.take()), te.reports(x.tk, "+inf"))
}

// A residual due at once, of a bundle closed before PrepareCommit (as by a
// bundle bound in Handle), still waits for the next cycle: the cycle that
// made it must commit and run its finalizers first.
func TestResidualNotResumedInItsCycle(t *testing.T) {
	x := newResidualFixture(t)
	te := x.te
	x.checkpoints[""] = []executor.Residual{residual("rest", 5, 0)}
	ctx := context.Background()
	if err := x.tk.Handle(ctx, te.input(x.sub, 0).data(nil)); err != nil {
		t.Fatal(err)
	}
	if err := x.tk.flushStages(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := x.tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	checkLines(t, "bundles of the cycle", x.f.inputs(), []string{impulseInput(t)})
	if err := x.tk.CommitState(); err != nil {
		t.Fatal(err)
	}
	x.tk.Finalize(ctx)
	checkLines(t, "finalized", x.takeFinalized(), []string{""})
	x.checkResumeAt(t, x.clock.Now())
	te.cycle(x.tk)
	checkLines(t, "bundles of the next cycle", x.f.inputs(), []string{`"rest" @5 GW nofiring`})
}

// Residuals are resumed in the order they were made, those due together in
// one bundle; a residual's hold is never the maximum watermark, even if the
// SDK estimates it so, since a task at the maximum is done.
func TestResidualsOrderAndHold(t *testing.T) {
	x := newResidualFixture(t)
	te := x.te
	late := residual("late", 3, 2*time.Second)
	late.OutputWatermark, late.Estimated = maxWatermark, true
	x.checkpoints[""] = []executor.Residual{residual("b", 4, time.Second), late, residual("a", 6, time.Second)}
	te.cycle(x.tk, te.input(x.sub, 0).data(nil)...)
	x.f.inputs()
	checkLines(t, "cycle 1 reports", te.describe(te.take())[1:], te.reports(x.tk, "4"))
	x.clock.advance(time.Second)
	te.cycle(x.tk)
	bundles := x.f.takeBundles()
	if len(bundles) != 1 {
		t.Errorf("%d bundles, want the two residuals due in one", len(bundles))
	}
	checkLines(t, "cycle 2 input", flat(bundles), []string{`"b" @4 GW nofiring`, `"a" @6 GW nofiring`})
	checkLines(t, "cycle 2 reports", te.describe(te.take())[2:], te.reports(x.tk, timeString(maxWatermark-1)))
	x.clock.advance(time.Second)
	te.cycle(x.tk)
	checkLines(t, "cycle 3 input", x.f.inputs(), []string{`"late" @3 GW nofiring`})
	checkLines(t, "cycle 3 reports", te.describe(te.take())[1:], te.reports(x.tk, "+inf"))
	x.checkResumeAt(t, time.Time{})
}

func flat(bundles [][]string) []string {
	var out []string
	for _, b := range bundles {
		out = append(out, b...)
	}
	return out
}

// Draining drops residuals: those a bundle returns and those stored, so the
// watermark goes to the maximum and a drained job ends.
func TestResidualsDroppedOnDrain(t *testing.T) {
	x := newResidualFixture(t)
	te := x.te
	x.checkpoints[""] = []executor.Residual{residual("rest", 5, time.Hour)}
	te.cycle(x.tk, te.input(x.sub, 0).data(nil)...)
	x.f.inputs()
	te.take()
	te.env.Draining = &atomic.Bool{}
	te.env.Draining.Store(true)
	if at, ok := x.tk.ResumeAt(); !ok || !at.Equal(x.clock.Now()) {
		t.Errorf("draining: ResumeAt %v, %v; want now, to drop them", at, ok)
	}
	te.cycle(x.tk)
	checkLines(t, "drained bundles", x.f.inputs(), nil)
	checkLines(t, "drained produced", te.describe(te.take()), te.reports(x.tk, "+inf"))
	if n := x.storedResiduals(t); n != 0 {
		t.Errorf("%d residuals stored after the drain, want none", n)
	}
}

// A residual that is not one whole element of the stage's input, or is too
// large for a changelog record, fails the bundle's stage, naming it.
func TestBadResidual(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    executor.Residual
		want string
	}{
		{"truncated", executor.Residual{Element: wv(5, strEl("rest"), globalWindow)[:10]}, "a residual"},
		{"trailing bytes", executor.Residual{Element: append(wv(5, strEl("rest"), globalWindow), 1, 2)}, "2 bytes after its element"},
		{"too large", residual(strings.Repeat("x", maxResidualBytes), 5, 0), "changelog record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newResidualFixture(t)
			x.checkpoints[""] = []executor.Residual{tc.r}
			ctx := context.Background()
			err := x.tk.Handle(ctx, x.te.input(x.sub, 0).data(nil))
			if err == nil {
				err = x.tk.PrepareCommit(ctx)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), x.sub.Stages[0].ID) {
				t.Errorf("%v, want an error of stage %s saying %q", err, x.sub.Stages[0].ID, tc.want)
			}
		})
	}
}

// A stored residual of a stage the sub-topology does not have (a store of
// another job) fails the task's opening, saying so.
func TestStoredResidualOfUnknownStage(t *testing.T) {
	x := newResidualFixture(t)
	k := state.Key(x.tk.prefix, state.Residual, []byte{9}, make([]byte, 8))
	if err := x.te.env.DB.Set(k, make([]byte, residualHeader), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_, err := New(x.te.env, x.sub, 0)
	if err == nil || !strings.Contains(err.Error(), "stage #9") || !strings.Contains(err.Error(), "not this job's") {
		t.Errorf("New: %v, want an error naming stage #9", err)
	}
}
