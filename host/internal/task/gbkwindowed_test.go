package task

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
)

// A windowed GroupByKey with early and late firings emits the model's
// panes: early ones on the element count, the on-time one when the
// watermark passes the window, late ones per late element within the
// allowed lateness, accumulating; elements past it are dropped and
// counted. Its output watermark is held until the window is done.
func TestWindowedGroupByKeyTriggers(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t,
		beam.Trigger(trigger.AfterEndOfWindow().EarlyFiring(trigger.AfterCount(2)).LateFiring(trigger.AfterCount(1))),
		beam.AllowedLateness(time.Minute), beam.PanesAccumulate())), 1)
	f := newGroupFixtureIn(t, te, 0)
	if !f.sub.Root.Windowed {
		t.Fatal("the GroupByKey is not windowed: the plan changed")
	}
	w := interval(0, 60000)
	bugs := runSteps(t, te, f.tk, te.exec(f.sub), []step{{
		recs:     append(f.in.data(wv(1000, kv("k", "a"), w), wv(2000, kv("k", "b"), w)), f.in.wm(f.prod, 30000)),
		inputs:   []string{`"k":["a" "b"] @59999 [0,60000) early#0 first`},
		produced: lines(te.sunk(f.sub, `"k" @59999 [0,60000) early#0 first`), te.reports(f.tk, "30000")),
	}, {
		recs:     append(f.in.data(wv(3000, kv("k", "c"), w)), f.in.wm(f.prod, 60000)),
		inputs:   []string{`"k":["a" "b" "c"] @59999 [0,60000) ontime#1`},
		produced: lines(te.sunk(f.sub, `"k" @59999 [0,60000) ontime#1`), te.reports(f.tk, "60000")),
	}, {
		recs:     f.in.data(wv(4000, kv("k", "d"), w)),
		inputs:   []string{`"k":["a" "b" "c" "d"] @59999 [0,60000) late#2`},
		produced: te.sunk(f.sub, `"k" @59999 [0,60000) late#2`),
		bug: &knownBug{
			note:     "translate/windowing/strategy.go trigger: a late pane's timestamp is the garbage collection hold 119999, outside its window, where Beam's WatermarkHold.extractAndRelease clips it to the window's end",
			inputs:   []string{`"k":["a" "b" "c" "d"] @119999 [0,60000) late#2`},
			produced: te.sunk(f.sub, `"k" @119999 [0,60000) late#2`),
		},
	}, {
		recs:     []*kgo.Record{f.in.wm(f.prod, 120000)},
		produced: te.reports(f.tk, "120000"),
	}, {
		recs: f.in.data(wv(5000, kv("k", "e"), w)),
	}})
	if n := counter(t, te.env.Metrics.Attempted, f.sub.Root.TransformID, "dropped_late_elements"); n != 1 {
		t.Errorf("dropped_late_elements %d, want 1", n)
	}
	skipKnownBugs(t, bugs)
}

// Over sessions, the GroupByKey merges each key's windows as elements
// arrive, also across commits, and fires each session once, with every
// value merged into it, when the watermark passes its end; other keys'
// sessions stay apart.
func TestSessionsMerge(t *testing.T) {
	te := newTestEnv(t, marshal(t, sessionsPipeline()), 1)
	f := newGroupFixtureIn(t, te, 0)
	if !f.sub.Root.Windowed || f.sub.Root.MergeWindows != nil {
		t.Fatal("the GroupByKey is not windowed over sessions merged by the host: the plan changed")
	}
	session := func(ts int64) []byte { return interval(ts, ts+60000) }
	el := func(ts int64, k, v string) []byte { return wv(ts, kv(k, v), session(ts)) }
	skipKnownBugs(t, runSteps(t, te, f.tk, te.exec(f.sub), []step{{
		recs:     append(f.in.data(el(1000, "k", "a"), el(30000, "k", "b"), el(200000, "k", "c"), el(2000, "j", "x")), f.in.wm(f.prod, 50000)),
		produced: te.reports(f.tk, "50000"),
	}, {
		// In a later commit, d's session [70000,130000) overlaps k's
		// [1000,90000) (a and b merged): all merge.
		recs:     append(f.in.data(el(70000, "k", "d")), f.in.wm(f.prod, 100000)),
		inputs:   []string{`"j":["x"] @61999 [2000,62000) ontime#0 first last`},
		produced: lines(te.sunk(f.sub, `"j" @61999 [2000,62000) ontime#0 first last`), te.reports(f.tk, "100000")),
	}, {
		recs:     []*kgo.Record{f.in.wm(f.prod, 130000)},
		inputs:   []string{`"k":["a" "b" "d"] @129999 [1000,130000) ontime#0 first last`},
		produced: lines(te.sunk(f.sub, `"k" @129999 [1000,130000) ontime#0 first last`), te.reports(f.tk, "130000")),
	}, {
		recs:     []*kgo.Record{f.in.wm(f.prod, maxWatermark)},
		inputs:   []string{`"k":["c"] @259999 [200000,260000) ontime#0 first last`},
		produced: lines(te.sunk(f.sub, `"k" @259999 [200000,260000) ontime#0 first last`), te.reports(f.tk, "+inf")),
	}}))
}
