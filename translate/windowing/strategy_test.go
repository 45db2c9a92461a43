package windowing

import (
	"errors"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

func lateness(d time.Duration) func(*window.WindowingStrategy) {
	return func(ws *window.WindowingStrategy) { ws.AllowedLateness = int(d.Milliseconds()) }
}

func accumulating(ws *window.WindowingStrategy) { ws.AccumulationMode = window.Accumulating }

// Allowed lateness: an element is droppable when its window's max timestamp
// + allowed lateness is before the input watermark; until then late elements
// fire LATE panes (default trigger: one per element) and the last pane comes
// at expiry.
func TestAllowedLateness(t *testing.T) {
	g := newGBK(t, strategyOf(t, window.NewFixedWindows(windowSize), trigger.Default(), lateness(5*time.Second)))
	g.add(1000, 1)
	g.advanceWatermark(10000) // past max timestamp 9999: ON_TIME
	g.add(2000, 2)            // late, within lateness: LATE pane
	g.advanceWatermark(15000) // gc time 14999 passed: window expires
	g.add(3000, 3)            // droppable
	g.finish()
	checkSums(t, g, 1, 2)
	if g.late != 1 {
		t.Errorf("late drops %d, want 1", g.late)
	}
	if p := g.out[0].pane; p.Timing != OnTime || !p.IsFirst || p.IsLast || p.NonSpeculativeIndex != 0 {
		t.Errorf("first pane %+v, want ON_TIME first, not last", p)
	}
	if p := g.out[1].pane; p.Timing != Late || p.Index != 1 || p.NonSpeculativeIndex != 1 {
		t.Errorf("second pane %+v, want LATE index 1 on-time index 1", p)
	}
	s := g.s
	w := IntervalWindow(0, 10000)
	if s.GCTime(w) != 14999 || s.IsDroppable(w, 14999) || !s.IsDroppable(w, 15000) {
		t.Errorf("GCTime %v; droppable at 14999/15000 wrong", s.GCTime(w))
	}
	if gw := GlobalWindow(); s.GCTime(gw) != mtime.EndOfGlobalWindowTime {
		t.Errorf("global GC time %v, want end of global window", s.GCTime(gw))
	}
}

// Accumulating mode: every pane carries all elements so far; EARLY panes
// have on-time index -1, the ON_TIME pane 0, LATE panes count on. With
// on-time behaviour FIRE_ALWAYS the ON_TIME pane is emitted although no
// element arrived since the last early pane; with the Go SDK's
// FIRE_IF_NONEMPTY it is not, and the next pane is LATE with on-time index 0.
func TestAccumulatingEarlyOnTimeLate(t *testing.T) {
	tr := trigger.AfterEndOfWindow().EarlyFiring(trigger.AfterCount(1)).LateFiring(trigger.AfterCount(1))
	s := strategyOf(t, window.NewFixedWindows(windowSize), tr, accumulating, lateness(time.Minute))
	s.OnTimeFireAlways = true
	g := newGBK(t, s)
	g.add(1000, 1)
	g.add(2000, 2)
	g.advanceWatermark(10000)
	g.add(3000, 3)
	g.finish()
	checkCount(t, g, 4)
	want := []struct {
		sum    float64
		timing PaneTiming
		nsi    int64
	}{{1, Early, -1}, {3, Early, -1}, {3, OnTime, 0}, {6, Late, 1}}
	for i, w := range want {
		o := g.out[i]
		if o.sum() != w.sum || o.pane.Timing != w.timing || o.pane.NonSpeculativeIndex != w.nsi || o.pane.Index != int64(i) {
			t.Errorf("pane %d: sum %v %+v, want sum %v timing %v on-time index %d", i, o.sum(), o.pane, w.sum, w.timing, w.nsi)
		}
	}

	s.OnTimeFireAlways = false
	g = newGBK(t, s)
	g.add(1000, 1)
	g.advanceWatermark(10000)
	g.add(3000, 3)
	g.finish()
	checkCount(t, g, 2)
	if p := g.out[1].pane; p.Timing != Late || p.NonSpeculativeIndex != 0 || g.out[1].sum() != 4 {
		t.Errorf("pane after an unemitted ON_TIME firing: %+v sum %v, want LATE on-time index 0 sum 4", p, g.out[1].sum())
	}
}

// Closing behaviour EMIT_ALWAYS: an empty final pane is still emitted at
// expiry; ON_TIME FIRE_ALWAYS: an empty ON_TIME pane is emitted.
func TestClosingAndOnTimeBehaviour(t *testing.T) {
	s := strategyOf(t, window.NewFixedWindows(windowSize), trigger.Repeat(trigger.AfterCount(1)))
	s.ClosingFireAlways = true
	g := newGBK(t, s)
	g.add(1000, 1)
	g.finish()
	checkCount(t, g, 2)
	if p := g.out[1]; len(p.values) != 0 || !p.pane.IsLast {
		t.Errorf("final pane %+v with %v, want empty last pane", p.pane, p.values)
	}

	s = strategyOf(t, window.NewFixedWindows(windowSize), trigger.Default())
	s.OnTimeFireAlways = true
	st, _ := s.UnmarshalState(nil)
	c := Context{Window: IntervalWindow(0, 10000), InputWatermark: 10000, OutputWatermark: 9000}
	res := s.OnTimer(st, c)
	if len(res.Panes) != 1 || res.Panes[0].Info.Timing != OnTime {
		t.Errorf("empty ON_TIME firing: %+v, want one ON_TIME pane", res.Panes)
	}
}

// Timestamp combiners: END_OF_WINDOW holds at the window's max timestamp;
// EARLIEST at the earliest element; LATEST at the latest. The hold is
// released when the pane fires.
func TestTimestampCombinerHolds(t *testing.T) {
	w := IntervalWindow(0, 10000)
	c := Context{Window: w, InputWatermark: 0, OutputWatermark: 0}
	for _, tc := range []struct {
		comb TimestampCombiner
		want mtime.Time
	}{{EndOfWindow, 9999}, {EarliestInPane, 2000}, {LatestInPane, 5000}} {
		s := strategyOf(t, window.NewFixedWindows(windowSize), trigger.Repeat(trigger.AfterCount(3)))
		s.TimestampCombiner = tc.comb
		var st WindowState
		for _, ts := range []mtime.Time{5000, 2000} {
			st = s.OnElement(st, ts, c).State
		}
		if h, ok := st.OutputHold(); !ok || h != tc.want {
			t.Errorf("combiner %v: hold %v %v, want %v", tc.comb, h, ok, tc.want)
		}
		res := s.OnElement(st, 3000, c)
		if len(res.Panes) != 1 {
			t.Fatalf("combiner %v: %d panes", tc.comb, len(res.Panes))
		}
		if res.Panes[0].Timestamp != tc.want {
			t.Errorf("combiner %v: pane timestamp %v, want %v", tc.comb, res.Panes[0].Timestamp, tc.want)
		}
		if _, ok := res.State.OutputHold(); ok {
			t.Errorf("combiner %v: hold not released by the firing", tc.comb)
		}
	}
	// An element behind the output watermark holds at the end of the window.
	s := strategyOf(t, window.NewFixedWindows(windowSize), trigger.Default())
	s.TimestampCombiner = EarliestInPane
	st := s.OnElement(WindowState{}, 100, Context{Window: w, InputWatermark: 500, OutputWatermark: 500}).State
	if h, _ := st.OutputHold(); h != 9999 {
		t.Errorf("late element hold %v, want 9999", h)
	}
}

func TestSessionsMergeWithTriggerState(t *testing.T) {
	// Sessions with AfterCount(3): the counts of merged sessions add up.
	g := newGBK(t, strategyOf(t, window.NewSessions(time.Second), trigger.AfterCount(3)))
	g.add(0, 1)
	g.add(5000, 2)
	g.add(500, 3) // joins the first session: count 2
	g.add(1200, 4)
	g.finish()
	checkSums(t, g, 8, 2)
	if g.out[0].w != IntervalWindow(0, 2200) {
		t.Errorf("merged session %v, want [0,2200)", g.out[0].w)
	}
}

func TestWindowStateSerialization(t *testing.T) {
	s := strategyOf(t, window.NewFixedWindows(windowSize), trigger.Repeat(trigger.AfterCount(5)))
	st := WindowState{Count: 3, Hold: -42, HasHold: true, LastPane: PaneInfo{Timing: Late, Index: 9, NonSpeculativeIndex: 4}, HasPane: true}
	st.Trigger = s.Trigger.OnElement(st.Trigger, Context{Window: IntervalWindow(0, 10)})
	b, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.UnmarshalState(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := got.Marshal()
	if string(b) != string(b2) || got.Count != 3 || got.Hold != -42 || got.LastPane != st.LastPane {
		t.Errorf("round trip: %+v -> %+v", st, got)
	}
	if _, err := s.UnmarshalState(b[:3]); err == nil {
		t.Error("truncated state accepted")
	}
}

func TestUnsupportedStrategy(t *testing.T) {
	cm := graphx.NewCoderMarshaller()
	pb, err := graphx.MarshalWindowingStrategy(cm, window.DefaultWindowingStrategy())
	if err != nil {
		t.Fatal(err)
	}
	comps := &pipepb.Components{Coders: cm.Build()}
	pb.AccumulationMode = pipepb.AccumulationMode_RETRACTING
	if _, err := NewStrategy(pb, comps); !errors.Is(err, ErrUnsupportedStrategy) {
		t.Errorf("retracting: %v, want ErrUnsupportedStrategy", err)
	}
	pb.AccumulationMode = pipepb.AccumulationMode_DISCARDING
	pb.WindowFn = nil
	if _, err := NewStrategy(pb, comps); !errors.Is(err, ErrUnsupportedWindowFn) {
		t.Errorf("missing window fn: %v, want ErrUnsupportedWindowFn", err)
	}
	pb.WindowFn = &pipepb.FunctionSpec{Urn: "beam:window_fn:custom:v1"}
	for _, ms := range []pipepb.MergeStatus_Enum{pipepb.MergeStatus_NON_MERGING, pipepb.MergeStatus_NEEDS_MERGE, pipepb.MergeStatus_ALREADY_MERGED} {
		pb.MergeStatus = ms
		s, err := NewStrategy(pb, comps)
		if err != nil {
			t.Fatalf("custom window fn, %v: %v", ms, err)
		}
		if s.WindowFn.Kind != CustomWindows || s.WindowFn.URN != "beam:window_fn:custom:v1" || s.WindowFn.IsMerging() != (ms != pipepb.MergeStatus_NON_MERGING) {
			t.Errorf("custom window fn, %v: %+v", ms, s.WindowFn)
		}
	}
	comps.Coders[pb.WindowCoderId] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: "beam:coder:my_window:v1"}}
	if _, err := NewStrategy(pb, comps); !errors.Is(err, ErrUnsupportedWindowCoder) {
		t.Errorf("custom window coder: %v, want ErrUnsupportedWindowCoder", err)
	}
}
