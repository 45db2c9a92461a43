package task

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

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
	for i, st := range []struct {
		sideWM   int64
		reopen   bool // abort (after the last commit) and open the task again
		recs     []*kgo.Record
		inputs   []string
		reported string
	}{{
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
	}} {
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
