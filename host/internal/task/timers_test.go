package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// timer encodes a timer of key k (a string) in window win in Beam's timer
// coder.
func timer(k string, win []byte, fire, hold int64) []byte {
	b := append(strEl(k), 0) // the key, an empty tag
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, win...)
	b = append(b, 0) // not cleared
	b = binary.BigEndian.AppendUint64(b, state.EventTimeBits(fire))
	b = binary.BigEndian.AppendUint64(b, state.EventTimeBits(hold))
	return append(b, noFiringPane...)
}

// windowEndTimer is a timer of in's key at the end of its window, held at
// hold (at the window's end if hold is -1).
func windowEndTimer(codec *shuffle.ElementCodec, in shuffle.WindowedValue, hold int64) ([]byte, error) {
	k, _, err := codec.SplitKV(in.Elem)
	if err != nil {
		return nil, err
	}
	end, err := windowMaxTimestamp(in.Windows)
	if err != nil {
		return nil, err
	}
	if hold == -1 {
		hold = end
	}
	key, _, _ := state.ReadLP(k)
	return timer(string(key), in.Windows, end, hold), nil
}

// A stateful stage's timers are stored as the bundle sets them (a timer
// replaces the one of its key, window and tag), fire once the input
// watermark passes them, in rounds while firing sets more that are due,
// and hold the output watermark at their output timestamps. They are
// state: committed ones outlive the task, aborted ones are gone.
func TestUserTimers(t *testing.T) {
	te := newTestEnv(t, marshal(t, timerPipeline()), 1)
	sub := te.find("with a stateful stage", func(st *translate.SubTopology) bool {
		return len(st.Stages) == 1 && st.Stages[0].Stateful
	})
	fam := sub.Stages[0].TimerFamilies[0]
	if len(sub.Stages[0].TimerFamilies) != 1 || !fam.EventTime {
		t.Fatalf("timer families %v: the plan changed", sub.Stages[0].TimerFamilies)
	}
	codec := te.env.Codecs[sub.Stages[0].Input]
	f := te.exec(sub)
	// Each element sets a timer at the end of its window, held at its
	// timestamp, in two chunks cut inside the timer.
	f.each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		tm, err := windowEndTimer(codec, in, in.Timestamp)
		if err != nil {
			return err
		}
		if err := b.io.Timers(fam.TransformID, fam.FamilyID, tm[:5]); err != nil {
			return err
		}
		return b.io.Timers(fam.TransformID, fam.FamilyID, tm[5:])
	}
	// Firing k2's first timer sets one more, due at once.
	fired := 0
	f.timers = func(b *fakeBundle, _, _ string, data []byte) error {
		if fired++; fired == 2 {
			return b.io.Timers(fam.TransformID, fam.FamilyID, timer("k2", interval(60000, 120000), 65000, 65000))
		}
		return nil
	}
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	prod := te.producer(sub, 0)
	w0, w1 := interval(0, 60000), interval(60000, 120000)
	check := func(what string, bundles [][]string, status string) {
		t.Helper()
		got := f.takeBundles()
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", bundles) {
			t.Errorf("%s: bundles\n%q\nwant\n%q", what, got, bundles)
		}
		var want []string
		if status != "" {
			want = []string{"status " + tk.ID() + " " + status}
		}
		checkLines(t, what+": produced", te.describe(te.take()), want)
	}

	te.cycle(tk, append(in.data(wv(1000, kv("k1", "a"), w0), wv(2000, kv("k2", "b"), w0), wv(61000, kv("k1", "c"), w1), wv(5000, kv("k1", "d"), w0)), in.wm(prod, 30000))...)
	check("set", [][]string{{
		`"k1":"a" @1000 [0,60000) nofiring`, `"k2":"b" @2000 [0,60000) nofiring`,
		`"k1":"c" @61000 [60000,120000) nofiring`, `"k1":"d" @5000 [0,60000) nofiring`,
	}}, "2000")

	// An aborted cycle's timer is gone.
	ctx := context.Background()
	if err := tk.Handle(ctx, in.data(wv(1500, kv("k3", "x"), w0))); err != nil {
		t.Fatal(err)
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	f.takeBundles()
	te.take()
	tk.Abort()
	tk = te.task(sub, 0)

	te.cycle(tk, in.wm(prod, 70000))
	check("fired", [][]string{
		{`timer fire "\x02k1" fire 59999 hold 5000`, `timer fire "\x02k2" fire 59999 hold 2000`},
		{`timer fire "\x02k2" fire 65000 hold 65000`},
	}, "61000")

	te.cycle(tk, in.wm(prod, maxWatermark))
	check("at the end", [][]string{{`timer fire "\x02k1" fire 119999 hold 61000`}}, "+inf")
}

// An element that arrives for a stateful stage after every one of its
// windows expired (the input watermark past the window's end plus the
// allowed lateness, none here), so after the window's user state went
// (state.User.ExpireState), is dropped and counted in dropped_late_elements,
// as Beam's runners do; one that came before the watermark report expiring
// its window is not, nor one of a window still open. One in an expired and
// an open window goes on in the open one only, its expired window counted.
func TestStatefulStageDropsExpiredElements(t *testing.T) {
	te := newTestEnv(t, marshal(t, timerPipeline()), 1)
	sub := te.find("with a stateful stage", func(st *translate.SubTopology) bool {
		return len(st.Stages) == 1 && st.Stages[0].Stateful
	})
	stage := sub.Stages[0]
	if _, ok := stage.StateExpiry[stage.Transforms[0]]; !ok {
		t.Fatalf("state expiry %v: the plan changed", stage.StateExpiry)
	}
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	prod := te.producer(sub, 0)
	w0, w1 := interval(0, 60000), interval(60000, 120000)
	recs := in.data(wv(1000, kv("k1", "a"), w0))
	recs = append(recs, in.wm(prod, 59999)) // w0's end: not expired yet
	recs = append(recs, in.data(wv(2000, kv("k1", "b"), w0))...)
	recs = append(recs, in.wm(prod, 60000)) // past it
	recs = append(recs, in.data(wv(3000, kv("k1", "late"), w0), wv(61000, kv("k1", "c"), w1))...)
	// In both windows (as sliding windows put it): it goes on in w1 only.
	recs = append(recs, in.data(wv(59000, kv("k1", "both"), w0, w1), wv(59500, kv("k1", "both2"), w1, w0))...)
	te.cycle(tk, recs...)
	want := []string{
		`"k1":"a" @1000 [0,60000) nofiring`,
		`"k1":"b" @2000 [0,60000) nofiring`,
		`"k1":"c" @61000 [60000,120000) nofiring`,
		`"k1":"both" @59000 [60000,120000) nofiring`,
		`"k1":"both2" @59500 [60000,120000) nofiring`,
	}
	checkLines(t, "stage input", te.exec(sub).inputs(), want)
	if n := counter(t, te.env.Metrics.Attempted, stage.Transforms[0], "dropped_late_elements"); n != 3 {
		t.Errorf("dropped_late_elements %d, want 3 (one element, and two in one of their windows)", n)
	}
}

// setsWindowEndTimers makes sub's one stage set a timer at the window's end
// of each element it gets, of its first timer family; its executor records
// what the stage got.
func setsWindowEndTimers(te *testEnv, sub *translate.SubTopology) *fakeExec {
	fam := sub.Stages[0].TimerFamilies[0]
	codec := te.env.Codecs[sub.Stages[0].Input]
	f := te.exec(sub)
	f.each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		tm, err := windowEndTimer(codec, in, -1)
		if err != nil {
			return err
		}
		return b.io.Timers(fam.TransformID, fam.FamilyID, tm)
	}
	return f
}

// A stateful ParDo that stays with a windowed GroupByKey (allowed
// lateness), beside another reader of the groups, gets each pane before the
// timer it sets at the window's end fires: the pane the watermark makes due
// fires first in the cycle, then the timers due by the root's output
// watermark. A late pane (within the allowed lateness) reaches it too, not
// dropped as expired, and its timer, behind the watermark, fires at once.
func TestWindowedGroupReaderTimers(t *testing.T) {
	te := newTestEnv(t, marshal(t, lateGroupTimerPipeline()), 1)
	sub := te.sub(translate.RootGroupByKey)
	if !sub.Root.Windowed || len(sub.Stages) != 1 || !sub.Stages[0].Stateful || len(sub.Stages[0].Transforms) != 2 {
		t.Fatalf("the stateful reader is not in the windowed GroupByKey's sub-topology with the plain one (windowed %v, %d stages)", sub.Root.Windowed, len(sub.Stages))
	}
	if te.plan.Layout != translate.LayoutStatefulReaders {
		t.Fatalf("layout %d, want %d", te.plan.Layout, translate.LayoutStatefulReaders)
	}
	f := setsWindowEndTimers(te, sub)
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	prod := te.producer(sub, 0)
	w0 := interval(0, 60000)
	te.cycle(tk, append(in.data(wv(1000, kv("k1", "a"), w0)), in.wm(prod, 30000))...)
	checkLines(t, "before the window's end", f.inputs(), nil)
	te.cycle(tk, in.wm(prod, 70000))
	checkLines(t, "at the window's end", f.inputs(), []string{
		`"k1":["a"] @59999 [0,60000) ontime#0 first`, `timer fire "\x02k1" fire 59999 hold 59999`,
	})
	te.cycle(tk, in.data(wv(2000, kv("k1", "late"), w0))...)
	checkLines(t, "a late element", f.inputs(), []string{
		`"k1":["late"] @59999 [0,60000) late#1`, `timer fire "\x02k1" fire 59999 hold 59999`,
	})
}

// A stateful ParDo reading a GroupByKey's groups in its sub-topology gets
// its input watermark from the root: its timers fire (and its state
// expires) only once every group of their window came. Here a cycle fires
// one group at most (Env.MaxFiredGroups): the timer that the first group
// sets at the window's end must wait for the other group, which the next
// cycle fires.
func TestGroupReaderTimersWaitForGroups(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupTimerPipeline()), 1)
	te.env.MaxFiredGroups = 1
	sub := te.sub(translate.RootGroupByKey)
	if len(sub.Stages) != 1 || !sub.Stages[0].Stateful || !sub.Stages[0].PagedGroups {
		t.Fatalf("stages %d: the stateful group reader is not in the GroupByKey's sub-topology, paged", len(sub.Stages))
	}
	f := setsWindowEndTimers(te, sub)
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	prod := te.producer(sub, 0)
	w0 := interval(0, 60000)
	// Stored first: groups whose values all came in the cycle that fires
	// them fire whatever the limit.
	te.cycle(tk, append(in.data(wv(1000, kv("k1", "a"), w0), wv(2000, kv("k2", "b"), w0)), in.wm(prod, 30000))...)
	checkLines(t, "stored", f.inputs(), nil)
	groups := []string{`"k1":["a"] @59999 [0,60000) ontime#0 first last`, `"k2":["b"] @59999 [0,60000) ontime#0 first last`}
	te.cycle(tk, in.wm(prod, 70000))
	first := f.inputs()
	if len(first) != 1 || !slices.Contains(groups, first[0]) {
		t.Fatalf("first firing: %q, want one of the groups %q and no timer", first, groups)
	}
	other := groups[0]
	if first[0] == other {
		other = groups[1]
	}
	te.cycle(tk)
	checkLines(t, "second firing", f.inputs(), []string{
		other, `timer fire "\x02k1" fire 59999 hold 59999`, `timer fire "\x02k2" fire 59999 hold 59999`,
	})
}

// A stateful stage's timers wait for its input parked for side inputs, as
// pushed-back elements hold a ParDo's input watermark on Beam's runners. In
// sliding windows an element parked (its latest window not yet ready)
// shares a window with one handed over already: that window's timer fires
// only after the parked element reached the stage, although the input
// watermark passed the timer long before.
func TestTimersWaitForParkedInput(t *testing.T) {
	te := newTestEnv(t, marshal(t, slidingSideTimerPipeline()), 1)
	sub := te.find("with a stateful stage reading a side input", func(st *translate.SubTopology) bool {
		return len(st.Stages) == 1 && st.Stages[0].Stateful && len(st.Stages[0].SideInputs) == 1
	})
	side := sub.Stages[0].SideInputs[0].Topic
	f := setsWindowEndTimers(te, sub)
	sets := f.each
	f.each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		if in.NWindows > 1 {
			return nil // the fake's timers take one window; a's is the one that counts
		}
		return sets(b, in)
	}
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	prod := te.producer(sub, 0)
	wB, wC := interval(0, 120000), interval(60000, 180000)
	te.setSideWatermark(side, 120000) // past wB, not wC
	te.cycle(tk, append(in.data(wv(30000, kv("k", "a"), wB)), in.wm(prod, 50000))...)
	checkLines(t, "a ready", f.inputs(), []string{`"k":"a" @30000 [0,120000) nofiring`})
	te.cycle(tk, append(in.data(wv(70000, kv("k", "b"), wB, wC)), in.wm(prod, 130000))...)
	checkLines(t, "b parked, wB's timer waiting for it", f.inputs(), nil)
	te.setSideWatermark(side, maxWatermark)
	te.cycle(tk)
	checkLines(t, "b released", f.inputs(), []string{
		`"k":"b" @70000 [0,120000),[60000,180000) nofiring`,
		`timer fire "\x01k" fire 119999 hold 119999`,
	})
}
