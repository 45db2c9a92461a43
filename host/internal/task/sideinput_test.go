package task

import (
	"bytes"
	"testing"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// A stage reading a side input gets its input only once the side input's
// watermark (Env.SideWatermark) has passed the input's windows; until then
// the input is parked in the store, durably, and holds the task's output
// watermark at its earliest timestamp. (A cycle's input is parked in one
// piece, under the latest window of its elements: m1 and m2 come in
// different cycles.)
func TestSideInputGate(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), 2)
	sub, stage := te.subWithSideInput()
	if sub.Root.Kind != translate.RootPassthrough || len(stage.SideInputs) != 1 {
		t.Fatalf("root %d, side inputs %v: the plan changed", sub.Root.Kind, stage.SideInputs)
	}
	side := stage.SideInputs[0].Topic
	prod := te.producer(sub, 0)
	tk := te.task(sub, 1)
	in := te.input(sub, 1)
	w0, w1, w2 := interval(0, 60000), interval(60000, 120000), interval(120000, 180000)
	const (
		m1 = `"m1" @1000 [0,60000) nofiring`
		m2 = `"m2" @70000 [60000,120000) nofiring`
		m3 = `"m3" @80000 [60000,120000) nofiring`
		m4 = `"m4" @130000 [120000,180000) nofiring`
	)
	runSideSteps(t, te, sub, side, tk, []sideStep{{
		recs:     append(in.data(wv(70000, strEl("m2"), w1)), in.wm(prod, 100000)),
		reported: "70000",
	}, {
		// Late (behind the input watermark): the hold cannot take back
		// what was reported, and nothing is reported.
		sideWM: 59999, // not past the window's maximum timestamp yet
		recs:   in.data(wv(1000, strEl("m1"), w0)),
	}, {
		sideWM: 60000,
		inputs: []string{m1},
	}, {
		// Parked input outlives the task; more parked in the same window
		// does not replace it.
		sideWM: 60000,
		reopen: true,
		recs:   in.data(wv(80000, strEl("m3"), w1)),
		// A reopened task reports at once.
		reported: "70000",
	}, {
		sideWM:   maxWatermark,
		recs:     append(in.data(wv(130000, strEl("m4"), w2)), in.wm(prod, maxWatermark)),
		inputs:   []string{m2, m3, m4},
		reported: "+inf",
	}})
}

// sideStep is one commit cycle of a task whose stage reads a side input.
type sideStep struct {
	sideWM   int64 // the side input's watermark during the cycle
	reopen   bool  // abort (after the last commit) and open the task again
	recs     []*kgo.Record
	inputs   []string // what the stage gets
	reported string   // the output watermark reported, if any
}

// runSideSteps runs each step as one commit cycle of tk (partition 1 of
// sub), the side input topic side at the step's watermark.
func runSideSteps(t *testing.T, te *testEnv, sub *translate.SubTopology, side string, tk *Task, steps []sideStep) {
	t.Helper()
	for i, st := range steps {
		te.setSideWatermark(side, st.sideWM)
		if st.reopen {
			tk.Abort()
			tk = te.task(sub, 1)
		}
		te.cycle(tk, st.recs...)
		checkLines(t, fmtStep("stage input", i), te.exec(sub).inputs(), st.inputs)
		var want []string
		if st.reported != "" {
			want = te.reports(tk, st.reported)
		}
		checkLines(t, fmtStep("produced", i), te.describe(te.take()), want)
	}
}

// A GroupByKey whose groups are read by a ParDo with side inputs in its own
// sub-topology (translate: Root.SideInputTopics) fires a key and window
// only once the side inputs are complete for it. Until then the group
// stays in the store, durably, its timer holding the output watermark.
func TestGroupByKeyWaitsForSideInputs(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupsWithSidePipeline()), 2)
	sub := te.sub(translate.RootGroupByKey)
	if len(sub.Stages) != 1 || len(sub.Root.SideInputTopics) != 1 || !sub.Root.PagedGroups {
		t.Fatalf("stages %d, root side inputs %q, paged %v: the plan changed", len(sub.Stages), sub.Root.SideInputTopics, sub.Root.PagedGroups)
	}
	side := sub.Root.SideInputTopics[0]
	prod := te.producer(sub, 0)
	tk := te.task(sub, 1)
	in := te.input(sub, 1)
	w0, w1 := interval(0, 60000), interval(60000, 120000)
	runSideSteps(t, te, sub, side, tk, []sideStep{{
		// Both windows are due by the input watermark, neither by the
		// side input's: the output watermark stays at the first.
		recs: append(in.data(
			wv(1000, kv("k1", "a"), w0),
			wv(61000, kv("k2", "b"), w1),
			wv(2000, kv("k1", "c"), w0),
		), in.wm(prod, 130000)),
		reported: "59999",
	}, {
		sideWM: 59999, // not past the first window's maximum timestamp yet
	}, {
		sideWM:   60000,
		inputs:   []string{`"k1":["a" "c"] @59999 [0,60000) ontime#0 first last`},
		reported: "119999",
	}, {
		// The group held back outlives the task.
		sideWM:   60000,
		reopen:   true,
		reported: "119999", // a reopened task reports at once
	}, {
		sideWM:   maxWatermark,
		inputs:   []string{`"k2":["b"] @119999 [60000,120000) ontime#0 first last`},
		reported: "130000",
	}})
}

// A bundle of a stage with side inputs carries a cache token for each of
// them, the same across bundles until a side input write, and a new one
// after: the SDK may then keep side input reads between bundles and never
// serves a read older than the last write.
func TestSideInputCacheTokens(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), 1)
	te.env.MaxBundleSize = 1
	te.env.SideCache = state.NewSideCache(1 << 20)
	sub, stage := te.subWithSideInput()
	te.setSideWatermark(stage.SideInputs[0].Topic, maxWatermark)
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	f := te.exec(sub)
	var tokens [][]*fnpb.ProcessBundleRequest_CacheToken
	f.each = func(b *fakeBundle, _ shuffle.WindowedValue) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(tokens) <= b.idx {
			tokens = append(tokens, b.io.CacheTokens)
		}
		return nil
	}
	handle := func(v string) {
		t.Helper()
		te.cycle(tk, in.data(wv(1000, strEl(v), interval(0, 60000)))...)
	}
	handle("a")
	handle("b")
	te.env.SideCache.Invalidate() // a side input write
	handle("c")
	if len(tokens) != 3 {
		t.Fatalf("%d bundles saw elements, want 3 (one each)", len(tokens))
	}
	for i, toks := range tokens {
		if len(toks) != len(stage.SideInputs) {
			t.Fatalf("bundle %d: %d cache tokens, want one per side input (%d)", i, len(toks), len(stage.SideInputs))
		}
		for j, tok := range toks {
			si := tok.GetSideInput()
			want := stage.SideInputs[j]
			if si == nil || si.TransformId != want.TransformID || si.SideInputId != want.LocalName {
				t.Errorf("bundle %d token %d names %v, want side input %s/%s", i, j, tok.Type, want.TransformID, want.LocalName)
			}
		}
	}
	if !bytes.Equal(tokens[0][0].Token, tokens[1][0].Token) {
		t.Errorf("tokens differ without a side input write: %x, %x", tokens[0][0].Token, tokens[1][0].Token)
	}
	if bytes.Equal(tokens[1][0].Token, tokens[2][0].Token) {
		t.Errorf("token %x unchanged after a side input write", tokens[2][0].Token)
	}
}
