package task

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/translate"
)

// groupFixture is a group-by-key task of a grouping pipeline on partition
// 2 of its input, the numbering of its input and its input's producer.
type groupFixture struct {
	te   *testEnv
	sub  *translate.SubTopology
	tk   *Task
	in   *input
	p    int32
	prod string
}

func newGroupFixture(t *testing.T) *groupFixture {
	return newGroupFixtureIn(t, newTestEnv(t, marshal(t, groupingPipeline(t)), 3), 2)
}

// newGroupFixtureIn is the group-by-key task of te for partition p.
func newGroupFixtureIn(t *testing.T, te *testEnv, p int32) *groupFixture {
	sub := groupTask(t, te)
	return &groupFixture{te: te, sub: sub, tk: te.task(sub, p), in: te.input(sub, p), p: p, prod: te.producer(sub, 0)}
}

// prepare handles recs and prepares the commit, without committing.
func (f *groupFixture) prepare(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	ctx := context.Background()
	if err := f.tk.Handle(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := f.tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
}

// reopen aborts the task and opens it again from the store.
func (f *groupFixture) reopen() {
	f.tk.Abort()
	f.tk = f.te.task(f.sub, f.p)
}

// A record delivered again after the cycle that stored its value
// committed (state applied, offsets not: the runtime then redelivers from
// the committed offset) is grouped once, however the redelivered records
// are cut into cycles.
func TestGroupByKeyRedelivered(t *testing.T) {
	w := interval(0, 60000)
	for _, tc := range []struct {
		name   string
		cycles [][]int // the offsets of the input records each cycle handles
	}{
		{"once", [][]int{{0, 1, 2}}},
		{"again whole", [][]int{{0, 1}, {0, 1, 2}}},
		{"again shorter", [][]int{{0, 1}, {0}, {1, 2}}},
		{"again longer", [][]int{{0}, {0, 1, 2}}},
		{"again after the next", [][]int{{0, 1}, {1, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGroupFixture(t)
			recs := f.in.data(wv(1000, kv("k", "a"), w), wv(1000, kv("k", "b"), w), wv(1000, kv("k", "c"), w))
			for _, c := range tc.cycles {
				var batch []*kgo.Record
				for _, off := range c {
					batch = append(batch, recs[off])
				}
				f.te.cycle(f.tk, batch...)
			}
			f.te.exec(f.sub).inputs()
			f.te.cycle(f.tk, f.in.wm(f.prod, maxWatermark))
			checkLines(t, "groups", f.te.exec(f.sub).inputs(), []string{`"k":["a" "b" "c"] @59999 [0,60000) ontime#0 first last`})
		})
	}
}

// A task aborted mid-cycle and opened again from the same store holds
// exactly the committed state: the aborted cycle's values, timers, firings
// and input watermark are gone, the committed ones are there.
func TestAbortKeepsCommittedState(t *testing.T) {
	f := newGroupFixture(t)
	w := interval(0, 60000)
	f.te.cycle(f.tk, append(f.in.data(wv(1000, kv("k1", "a"), w)), f.in.wm(f.prod, 30000))...)
	committed := storeContents(t, f.te.env.DB, f.tk.prefix)
	f.te.take()

	aborted := append(f.in.data(wv(2000, kv("k1", "b"), w), wv(3000, kv("k2", "x"), w)), f.in.wm(f.prod, 70000))
	f.prepare(t, aborted...)
	if got := f.te.exec(f.sub).inputs(); len(got) != 2 {
		t.Fatalf("the aborted cycle fired %v, want both keys", got)
	}
	f.te.take()
	f.reopen()
	if got := storeContents(t, f.te.env.DB, f.tk.prefix); !maps.Equal(got, committed) {
		t.Errorf("store after the abort:\n%q\nwant the committed one:\n%q", got, committed)
	}
	// The reopened task reports the committed input watermark at once.
	f.te.cycle(f.tk)
	checkLines(t, "first report", f.te.describe(f.te.take()), f.te.reports(f.tk, "30000"))

	f.te.cycle(f.tk, aborted...) // redelivered
	checkLines(t, "groups", f.te.exec(f.sub).inputs(), []string{
		`"k1":["a" "b"] @59999 [0,60000) ontime#0 first last`,
		`"k2":["x"] @59999 [0,60000) ontime#0 first last`,
	})
}

// ProduceChangelog produces one record per mutation of the cycle's state
// batch to the task's partition of its sub-topology's changelog: the key
// and 0x01 and the value for a set, a tombstone for a delete. Replayed in
// order onto an empty store they rebuild the task's store, and the commit
// records the offset after the last one.
func TestProduceChangelog(t *testing.T) {
	f := newGroupFixture(t)
	w := interval(0, 60000)
	ctx := context.Background()
	replayed := map[string]string{}
	var next int64 // the offset after the last changelog record
	for i, recs := range [][]*kgo.Record{
		append(f.in.data(wv(1000, kv("k1", "a"), w), wv(1000, kv("k2", "b"), w)), f.in.wm(f.prod, 30000)),
		f.in.data(wv(1000, kv("k1", "c"), w), wv(61000, kv("k1", "d"), interval(60000, 120000))),
		{f.in.wm(f.prod, 70000)}, // fires [0,60000): deletes
		{},                       // no mutation: no record
		{f.in.wm(f.prod, maxWatermark)},
	} {
		f.prepare(t, recs...)
		mutations := int(f.tk.batch.Count())
		if err := f.tk.ProduceChangelog(ctx); err != nil {
			t.Fatal(err)
		}
		cl := f.te.takeChangelog()
		if len(cl) != mutations {
			t.Errorf("cycle %d: %d changelog records for %d mutations", i, len(cl), mutations)
		}
		sets, deletes := 0, 0
		for _, r := range cl {
			if r.Topic != f.te.env.Topics.Full(f.te.env.Topics.Changelogs[f.sub.ID]) || r.Partition != 2 {
				t.Errorf("cycle %d: a changelog record to %s/%d, want partition 2 of the sub-topology's changelog", i, r.Topic, r.Partition)
			}
			next = r.Offset + 1
			if r.Value == nil {
				deletes++
				delete(replayed, string(r.Key))
				continue
			}
			sets++
			if r.Value[0] != 1 {
				t.Errorf("cycle %d: changelog value %x does not start with 0x01", i, r.Value)
			}
			replayed[string(r.Key)] = string(r.Value[1:])
		}
		if i == 2 && deletes == 0 {
			t.Errorf("cycle %d fired windows, and its changelog has no tombstone", i)
		}
		if i == 3 && sets+deletes != 0 {
			t.Errorf("cycle %d changed nothing, and its changelog has %d records", i, sets+deletes)
		}
		if err := f.tk.CommitState(); err != nil {
			t.Fatal(err)
		}
		store := storeContents(t, f.te.env.DB, f.tk.prefix)
		pos := string(state.Key(f.tk.prefix, state.Changelog))
		if got := store[pos]; len(got) != 8 || int64(binary.BigEndian.Uint64([]byte(got))) != next {
			t.Errorf("cycle %d: changelog position %x, want %d", i, got, next)
		}
		delete(store, pos)
		if !maps.Equal(store, replayed) {
			t.Errorf("cycle %d: the replayed changelog\n%q\nis not the store\n%q", i, replayed, store)
		}
	}
}

// A changelog record that fails to produce fails the instance (Env.Fail).
func TestProduceChangelogFailure(t *testing.T) {
	f := newGroupFixture(t)
	f.te.failProduce = errors.New("broker gone")
	f.prepare(t, f.in.data(wv(1000, kv("k1", "a"), interval(0, 60000)))...)
	if err := f.tk.ProduceChangelog(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.te.fails) == 0 || !strings.Contains(f.te.fails[0].Error(), "broker gone") || !strings.Contains(f.te.fails[0].Error(), "changelog") {
		t.Errorf("failures %v, want the produce error, naming the changelog", f.te.fails)
	}
}

// A group that is due in the cycle that read all its values is fired
// straight from memory (takeUnstored): nothing of it reaches the store or
// the changelog. Groups with stored runs fire from the store as before,
// the ones not due are stored, and all fired groups come out in
// key-window order whichever way they went.
func TestFireUnstoredGroups(t *testing.T) {
	f := newGroupFixture(t)
	w1, w2 := interval(0, 60000), interval(60000, 120000)
	f.te.cycle(f.tk, append(f.in.data(wv(1000, kv("k3", "a"), w1)), f.in.wm(f.prod, 30000))...)
	f.te.takeChangelog()
	f.te.cycle(f.tk, append(f.in.data(
		wv(2000, kv("k3", "b"), w1), // k3 has a stored run: fired from the store
		wv(2000, kv("k1", "x"), w1), // k1 and k2 came in this cycle: from memory
		wv(3000, kv("k2", "y"), w1),
		wv(4000, kv("k1", "z"), w1),
		wv(61000, kv("k2", "later"), w2), // not due: stored
	), f.in.wm(f.prod, 70000))...)
	checkLines(t, "groups", f.te.exec(f.sub).inputs(), []string{
		`"k1":["x" "z"] @59999 [0,60000) ontime#0 first last`,
		`"k2":["y"] @59999 [0,60000) ontime#0 first last`,
		`"k3":["a" "b"] @59999 [0,60000) ontime#0 first last`,
	})
	k2Sets := 0
	for _, r := range f.te.takeChangelog() {
		switch {
		case strings.Contains(string(r.Key), "k1"):
			t.Errorf("changelog record %q of k1, fired from memory", r.Key)
		case strings.Contains(string(r.Key), "k2") && r.Value == nil:
			t.Errorf("changelog tombstone %q of k2, whose due group was fired from memory", r.Key)
		case strings.Contains(string(r.Key), "k2"):
			k2Sets++
		}
	}
	if k2Sets != 2 {
		t.Errorf("%d changelog records of k2, want 2: the run and timer of its window not due", k2Sets)
	}
	var left []string
	for k := range storeContents(t, f.te.env.DB, f.tk.prefix) {
		if strings.Contains(k, "k1") || strings.Contains(k, "k2") || strings.Contains(k, "k3") {
			left = append(left, k)
		}
	}
	if len(left) != 2 { // k2's run in w2 and its timer
		t.Errorf("store holds %q, want only k2's run in [60000,120000) and its timer", left)
	}
	f.te.cycle(f.tk, f.in.wm(f.prod, maxWatermark))
	checkLines(t, "last groups", f.te.exec(f.sub).inputs(), []string{`"k2":["later"] @119999 [60000,120000) ontime#0 first last`})
}

// TestFireLimit: with Env.FireLimit a cycle fires at most that many
// stored groups (the runtime lowers it when a DoFn reading the groups is
// slow), besides those whose values all came in the cycle (its input
// bounds those); the stored groups left stay due, hold the output
// watermark and fire in the next cycles, which FirePending asks for;
// Env.Fired hears each cycle's count; every group fires once.
func TestFireLimit(t *testing.T) {
	f := newGroupFixture(t)
	f.te.env.FireLimit = func() int { return 2 }
	var counts []int
	f.te.env.Fired = func(groups int) { counts = append(counts, groups) }
	w1, w2 := interval(0, 60000), interval(60000, 120000)
	f.te.cycle(f.tk, append(f.in.data(
		wv(1000, kv("k1", "a"), w1), wv(1000, kv("k2", "b"), w1), wv(61000, kv("k1", "c"), w2),
		wv(62000, kv("k2", "d"), w2), wv(63000, kv("k3", "e"), w2),
	), f.in.wm(f.prod, 30000))...)
	if got := f.te.exec(f.sub).inputs(); len(got) != 0 {
		t.Fatalf("fired %q before any window ended", got)
	}
	// k4 comes in the cycle that makes all due: it fires from memory,
	// beside two stored groups.
	f.te.cycle(f.tk, append(f.in.data(wv(64000, kv("k4", "f"), w2)), f.in.wm(f.prod, maxWatermark))...)
	var got []string
	cycles := 0
	for ; cycles < 10; cycles++ {
		if cycles > 0 {
			f.te.cycle(f.tk)
		}
		fired := f.te.exec(f.sub).inputs()
		stored := slices.DeleteFunc(slices.Clone(fired), func(l string) bool { return strings.HasPrefix(l, `"k4"`) })
		if len(stored) > 2 {
			t.Errorf("cycle %d fired %d stored groups, limit 2: %q", cycles, len(stored), fired)
		}
		got = append(got, fired...)
		if !f.tk.FirePending() {
			break
		}
		if f.tk.reportedWM == maxWatermark {
			t.Errorf("cycle %d: output watermark at the maximum with groups left", cycles)
		}
	}
	slices.Sort(got) // which groups a cycle fires is free
	checkLines(t, "all cycles", got, []string{
		`"k1":["a"] @59999 [0,60000) ontime#0 first last`, `"k1":["c"] @119999 [60000,120000) ontime#0 first last`,
		`"k2":["b"] @59999 [0,60000) ontime#0 first last`, `"k2":["d"] @119999 [60000,120000) ontime#0 first last`,
		`"k3":["e"] @119999 [60000,120000) ontime#0 first last`, `"k4":["f"] @119999 [60000,120000) ontime#0 first last`,
	})
	if cycles != 2 || f.tk.reportedWM != maxWatermark {
		t.Errorf("done after %d more cycles with output watermark %s, want 2 and the maximum", cycles, FormatWatermark(f.tk.reportedWM))
	}
	if want := []int{3, 2, 1}; !slices.Equal(counts, want) {
		t.Errorf("Fired heard %v, want %v", counts, want)
	}
}

// TestFireInSlices: a cycle fires at most MaxFiredGroups groups from the
// store, the earliest windows first, and every due group whose values all
// came in the cycle (those are bounded by the cycle's input); the stored
// groups left stay due, hold the output watermark at the earliest of them
// and fire in the next cycles, which FirePending asks the runtime to run at
// once. Every group fires once.
func TestFireInSlices(t *testing.T) {
	f := newGroupFixture(t)
	f.te.env.MaxFiredGroups = 2
	w1, w2, w3, w4 := interval(0, 60000), interval(60000, 120000), interval(120000, 180000), interval(180000, 240000)
	f.te.cycle(f.tk, append(f.in.data(
		wv(1000, kv("k1", "a"), w1), wv(1000, kv("k2", "b"), w1), wv(61000, kv("k1", "c"), w2),
		wv(62000, kv("k2", "d"), w2), wv(121000, kv("k1", "e"), w3),
	), f.in.wm(f.prod, 30000))...)
	if got := f.te.exec(f.sub).inputs(); len(got) != 0 {
		t.Fatalf("fired %q before any window ended", got)
	}
	// k2 in w4 comes in the cycle that makes all due: it fires from memory.
	f.te.cycle(f.tk, append(f.in.data(wv(181000, kv("k2", "f"), w4)), f.in.wm(f.prod, maxWatermark))...)
	cycles := [][]string{
		{`"k1":["a"] @59999 [0,60000) ontime#0 first last`, `"k2":["b"] @59999 [0,60000) ontime#0 first last`,
			`"k2":["f"] @239999 [180000,240000) ontime#0 first last`},
		{`"k1":["c"] @119999 [60000,120000) ontime#0 first last`, `"k2":["d"] @119999 [60000,120000) ontime#0 first last`},
		{`"k1":["e"] @179999 [120000,180000) ontime#0 first last`},
	}
	holds := []int64{119999, 179999, maxWatermark}
	for i, want := range cycles {
		if i > 0 {
			f.te.cycle(f.tk) // no input: the runtime's cycle that FirePending asked for
		}
		checkLines(t, fmt.Sprintf("cycle %d", i), f.te.exec(f.sub).inputs(), want)
		if pending, last := f.tk.FirePending(), i == len(cycles)-1; pending == last {
			t.Errorf("cycle %d: FirePending %v", i, pending)
		}
		if f.tk.reportedWM != holds[i] {
			t.Errorf("cycle %d: output watermark %s, want %s (the earliest window left)", i, FormatWatermark(f.tk.reportedWM), FormatWatermark(holds[i]))
		}
	}
	f.te.cycle(f.tk)
	if got := f.te.exec(f.sub).inputs(); len(got) != 0 {
		t.Errorf("fired %q after every group had", got)
	}
}
