package task

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
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
	runSteps(t, te, f.tk, te.exec(f.sub), []step{{
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
	}, {
		recs:     []*kgo.Record{f.in.wm(f.prod, 120000)},
		produced: te.reports(f.tk, "120000"),
	}, {
		recs: f.in.data(wv(5000, kv("k", "e"), w)),
	}})
	if n := counter(t, te.env.Metrics.Attempted, f.sub.Root.TransformID, "dropped_late_elements"); n != 1 {
		t.Errorf("dropped_late_elements %d, want 1", n)
	}
}

// Over sessions, the GroupByKey merges each key's windows as elements
// arrive, also across commits, and fires each session once, with every
// value merged into it, when the watermark passes its end; other keys'
// sessions stay apart. The host merges sessions itself; a custom merging
// WindowFn (here: sessions the host does not know) merges in the SDK's
// merge stage, one bundle per poll batch with one element per key that
// has windows to merge: its active windows and the new ones.
func TestSessionsMerge(t *testing.T) {
	for _, tc := range []struct {
		name     string
		custom   bool
		requests []string // the merge stage's input
	}{
		{name: "host"},
		{name: "custom WindowFn", custom: true, requests: []string{
			`"\x01k":[[1000,61000) [30000,90000) [200000,260000)]`,
			`"\x01k":[[1000,90000) [200000,260000) [70000,130000)]`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pp := marshal(t, sessionsPipeline())
			if tc.custom {
				customMerging(t, pp)
			}
			te := newTestEnv(t, pp, 1)
			f := newGroupFixtureIn(t, te, 0)
			if ms := f.sub.Root.MergeWindows; !f.sub.Root.Windowed || (ms != nil) != tc.custom {
				t.Fatalf("the GroupByKey is not windowed, merged by the %s: the plan changed", tc.name)
			}
			var merger *fakeExec
			if tc.custom {
				merger = te.execs[f.sub.Root.MergeWindows.ID]
				merger.setFn(mergeSessions())
			}
			session := func(ts int64) []byte { return interval(ts, ts+60000) }
			el := func(ts int64, k, v string) []byte { return wv(ts, kv(k, v), session(ts)) }
			runSteps(t, te, f.tk, te.exec(f.sub), []step{{
				recs:     append(f.in.data(el(1000, "k", "a"), el(30000, "k", "b"), el(200000, "k", "c"), el(2000, "j", "x")), f.in.wm(f.prod, 50000)),
				produced: te.reports(f.tk, "50000"),
			}, {
				// In a later commit, d's session [70000,130000) overlaps
				// k's [1000,90000) (a and b merged): all merge.
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
			}})
			if merger != nil {
				var got []string
				for _, b := range merger.takeBundles() {
					if len(b) != 1 {
						t.Errorf("merge bundle %q: want one element", b)
					}
					for _, r := range b {
						elem, _, _ := strings.Cut(r, " @") // the header: see TestImpulseElementPane
						got = append(got, elem)
					}
				}
				checkLines(t, "merge requests", got, tc.requests)
			}
		})
	}
}

// customMerging makes the sessions of pp a merging WindowFn the host does
// not know, defined by the pipeline's environment.
func customMerging(t *testing.T, pp *pipepb.Pipeline) {
	var env string
	for id := range pp.GetComponents().GetEnvironments() {
		env = id
	}
	n := 0
	for _, ws := range pp.GetComponents().GetWindowingStrategies() {
		if ws.GetMergeStatus() == pipepb.MergeStatus_NEEDS_MERGE {
			ws.WindowFn = &pipepb.FunctionSpec{Urn: "beam:window_fn:custom_sessions:v1"}
			ws.EnvironmentId = env
			n++
		}
	}
	if n == 0 {
		t.Fatal("no merging windowing strategy")
	}
}

// mergeSessions is a fake of the SDK's merge_windows over interval
// windows: overlapping windows merge into their span.
func mergeSessions() func(in shuffle.WindowedValue) [][]byte {
	return func(in shuffle.WindowedValue) [][]byte {
		n, l := binary.Uvarint(in.Elem)
		nonce, b := in.Elem[:l+int(n)], in.Elem[l+int(n):]
		type win struct{ start, end int64 }
		var wins []win
		count := int(binary.BigEndian.Uint32(b))
		b = b[4:]
		for range count {
			end := int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
			d, l := binary.Uvarint(b[8:])
			wins = append(wins, win{end - int64(d), end})
			b = b[8+l:]
		}
		slices.SortFunc(wins, func(a, b win) int { return cmp.Compare(a.start, b.start) })
		iterable := func(ws []win) []byte {
			out := binary.BigEndian.AppendUint32(nil, uint32(len(ws)))
			for _, w := range ws {
				out = append(out, interval(w.start, w.end)...)
			}
			return out
		}
		var unmerged []win
		var results []byte
		nResults := 0
		for i := 0; i < len(wins); {
			j, span := i+1, wins[i]
			for ; j < len(wins) && wins[j].start < span.end; j++ {
				span.end = max(span.end, wins[j].end)
			}
			if j-i == 1 {
				unmerged = append(unmerged, wins[i])
			} else {
				results = append(results, interval(span.start, span.end)...)
				results = append(results, iterable(wins[i:j])...)
				nResults++
			}
			i = j
		}
		out := append(append([]byte(nil), nonce...), iterable(unmerged)...)
		out = binary.BigEndian.AppendUint32(out, uint32(nResults))
		return [][]byte{rewrap(in, append(out, results...))}
	}
}

// A windowed GroupByKey fires at most MaxFiredGroups windows a cycle, the
// earliest first, and asks for the next cycle (FirePending) while windows
// are left due; its output watermark waits for the earliest window left.
func TestWindowedFireInSlices(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t,
		beam.Trigger(trigger.AfterEndOfWindow().EarlyFiring(trigger.AfterCount(10))))), 1)
	te.env.MaxFiredGroups = 2
	f := newGroupFixtureIn(t, te, 0)
	if !f.sub.Root.Windowed {
		t.Fatal("the GroupByKey is not windowed: the plan changed")
	}
	w1, w2, w3 := interval(0, 60000), interval(60000, 120000), interval(120000, 180000)
	te.cycle(f.tk, append(f.in.data(
		wv(1000, kv("k1", "a"), w1), wv(1000, kv("k2", "b"), w1), wv(61000, kv("k1", "c"), w2),
		wv(62000, kv("k2", "d"), w2), wv(121000, kv("k1", "e"), w3),
	), f.in.wm(f.prod, 30000))...)
	if got := te.exec(f.sub).inputs(); len(got) != 0 {
		t.Fatalf("fired %q before any window ended", got)
	}
	te.cycle(f.tk, f.in.wm(f.prod, maxWatermark))
	cycles := [][]string{
		{`"k1":["a"] @59999 [0,60000) ontime#0 first last`, `"k2":["b"] @59999 [0,60000) ontime#0 first last`},
		{`"k1":["c"] @119999 [60000,120000) ontime#0 first last`, `"k2":["d"] @119999 [60000,120000) ontime#0 first last`},
		{`"k1":["e"] @179999 [120000,180000) ontime#0 first last`},
	}
	holds := []int64{119999, 179999, maxWatermark}
	for i, want := range cycles {
		if i > 0 {
			te.cycle(f.tk) // no input: the runtime's cycle that FirePending asked for
		}
		checkLines(t, fmt.Sprintf("cycle %d", i), te.exec(f.sub).inputs(), want)
		if pending, last := f.tk.FirePending(), i == len(cycles)-1; pending == last {
			t.Errorf("cycle %d: FirePending %v", i, pending)
		}
		if f.tk.reportedWM != holds[i] {
			t.Errorf("cycle %d: output watermark %s, want %s (the earliest window left)", i, FormatWatermark(f.tk.reportedWM), FormatWatermark(holds[i]))
		}
	}
	te.cycle(f.tk)
	if got := te.exec(f.sub).inputs(); len(got) != 0 {
		t.Errorf("fired %q after every window had", got)
	}
}
