package task

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// groupTask is the group-by-key task of a grouping pipeline: its fake
// stage (formatFn) emits each group's key as a string in the group's
// window, to the Reshuffle's topic and the side input's.
func groupTask(t *testing.T, te *testEnv) *translate.SubTopology {
	t.Helper()
	sub := te.sub(translate.RootGroupByKey)
	codec := te.env.Codecs[sub.Root.Output]
	te.exec(sub).setFn(func(in shuffle.WindowedValue) [][]byte {
		k, _, err := codec.SplitKV(in.Elem)
		if err != nil {
			t.Error(err)
			return nil
		}
		return [][]byte{rewrap(in, k)}
	})
	return sub
}

// step is one commit cycle of a task: the records it handles, what its
// stage gets and what it produces.
type step struct {
	recs     []*kgo.Record
	inputs   []string
	produced []string
}

// runSteps runs each step as one commit cycle of tk.
func runSteps(t *testing.T, te *testEnv, tk *Task, stage *fakeExec, steps []step) {
	t.Helper()
	for i, st := range steps {
		te.cycle(tk, st.recs...)
		in, out := stage.inputs(), te.describe(te.take())
		checkLines(t, fmtStep("stage input", i), in, st.inputs)
		checkLines(t, fmtStep("produced", i), out, st.produced)
	}
}

func fmtStep(what string, i int) string { return fmt.Sprintf("%s (step %d)", what, i) }

// The GroupByKey fast path fires each key and window once, when the
// input watermark passes the window's maximum timestamp, with the values
// in arrival order, and holds its output watermark at the earliest window
// not fired; watermark reports follow the data they cover, to every
// partition of every topic the task writes.
func TestGroupByKeyFiresAtWindowEnd(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), 3)
	sub := groupTask(t, te)
	tk := te.task(sub, 1)
	in := te.input(sub, 1)
	prod := te.producer(sub, 0) // the input's one producer
	if len(sub.Sinks) != 2 || te.env.Topics.Producers[sub.Input] != 1 {
		t.Fatalf("sinks %v, %d producers of the input: the plan changed", sub.Sinks, te.env.Topics.Producers[sub.Input])
	}
	w0, w1 := interval(0, 60000), interval(60000, 120000)
	report := func(wm string) []string { return te.reports(tk, wm) }
	runSteps(t, te, tk, te.exec(sub), []step{{
		// Nothing reported yet: the first report is at once.
		produced: report("-inf"),
	}, {
		recs: append(in.data(
			wv(1000, kv("k1", "a"), w0),
			wv(2000, kv("k2", "b"), w0),
			wv(61000, kv("k1", "c"), w1),
			wv(5000, kv("k1", "d"), w0),
		), in.wm(prod, 30000)),
		produced: report("30000"),
	}, {
		// The window's maximum timestamp is 59999: not passed yet; the
		// output watermark is held there.
		recs:     []*kgo.Record{in.wm(prod, 59999)},
		produced: report("59999"),
	}, {
		recs: []*kgo.Record{in.wm(prod, 70000)},
		inputs: []string{
			`"k1":["a" "d"] @59999 [0,60000) ontime#0 first last`,
			`"k2":["b"] @59999 [0,60000) ontime#0 first last`,
		},
		produced: lines(te.sunk(sub,
			`"k1" @59999 [0,60000) ontime#0 first last`,
			`"k2" @59999 [0,60000) ontime#0 first last`),
			report("70000")),
	}, {
		// No movement: no report.
		recs: []*kgo.Record{in.wm(prod, 70000)},
	}, {
		// Late: its window fired. Dropped and counted, not a second pane.
		recs: in.data(wv(4000, kv("k1", "late"), w0)),
	}, {
		recs:     []*kgo.Record{in.wm(prod, maxWatermark)},
		inputs:   []string{`"k1":["c"] @119999 [60000,120000) ontime#0 first last`},
		produced: lines(te.sunk(sub, `"k1" @119999 [60000,120000) ontime#0 first last`), report("+inf")),
	}})
	if n := counter(t, te.env.Metrics.Attempted, sub.Root.TransformID, "dropped_late_elements"); n != 1 {
		t.Errorf("dropped_late_elements %d, want 1", n)
	}
}

// The fast path groups in every window of an element (sliding windows)
// and in the global window, which ends only at the end of time; its
// unkeyed output is spread round-robin over the partitions of the
// Reshuffle's topic.
func TestGroupByKeyWindowFns(t *testing.T) {
	eogw := timeString(endOfGlobalWindow)
	for _, tc := range []struct {
		name   string
		wfn    *window.Fn
		recs   func(in *input) []*kgo.Record
		before int64 // a watermark that fires nothing yet; then it goes to +inf
		groups []string
		late   int64 // the windows of recs, dropped when they come again after +inf
	}{{
		name:   "sliding",
		wfn:    window.NewSlidingWindows(time.Minute, 2*time.Minute),
		before: 119999,
		recs: func(in *input) []*kgo.Record {
			return in.data(
				wv(70000, kv("k", "a"), interval(60000, 180000), interval(0, 120000)),
				wv(130000, kv("k", "b"), interval(120000, 240000), interval(60000, 180000)))
		},
		groups: []string{
			`"k":["a"] @119999 [0,120000) ontime#0 first last`,
			`"k":["a" "b"] @179999 [60000,180000) ontime#0 first last`,
			`"k":["b"] @239999 [120000,240000) ontime#0 first last`,
		},
		late: 4,
	}, {
		name:   "global",
		wfn:    window.NewGlobalWindows(),
		before: endOfGlobalWindow,
		recs: func(in *input) []*kgo.Record {
			return in.data(wv(5, kv("k1", "a"), globalWindow), wv(7, kv("k2", "b"), globalWindow), wv(6, kv("k1", "c"), globalWindow), wv(8, kv("k3", "d"), globalWindow))
		},
		groups: []string{
			`"k1":["a" "c"] @` + eogw + ` GW ontime#0 first last`,
			`"k2":["b"] @` + eogw + ` GW ontime#0 first last`,
			`"k3":["d"] @` + eogw + ` GW ontime#0 first last`,
		},
		late: 4,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, marshal(t, groupingOver(tc.wfn)), 3)
			f := newGroupFixtureIn(t, te, 0)
			if f.sub.Root.Windowed {
				t.Fatal("not the fast path: the plan changed")
			}
			te.cycle(f.tk, append(tc.recs(f.in), f.in.wm(f.prod, tc.before))...)
			checkLines(t, "before the end", te.exec(f.sub).inputs(), nil)
			te.take()
			te.cycle(f.tk, f.in.wm(f.prod, maxWatermark))
			checkLines(t, "groups", te.exec(f.sub).inputs(), tc.groups)
			parts := map[int32]bool{}
			for _, r := range te.take() {
				if r.Value[0] == shuffle.KindData {
					parts[r.Partition] = true
				}
			}
			if len(parts) != 3 {
				t.Errorf("output in partitions %v, want all 3", parts)
			}
			// After the final watermark every window has fired, the
			// global window too: a value now (at_least_once redelivers a
			// producer's redone cycle after its final watermark) is late,
			// dropped and counted, not a second pane.
			te.cycle(f.tk, tc.recs(f.in)...)
			te.cycle(f.tk)
			checkLines(t, "after the final watermark", te.exec(f.sub).inputs(), nil)
			if n := counter(t, te.env.Metrics.Attempted, f.sub.Root.TransformID, "dropped_late_elements"); n != tc.late {
				t.Errorf("dropped_late_elements %d, want %d (each value in each of its windows)", n, tc.late)
			}
		})
	}
}
