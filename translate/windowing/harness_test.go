package windowing

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// strategyOf builds a Strategy from the proto the Go SDK marshals for a
// window fn and trigger, as the host receives it.
func strategyOf(t *testing.T, fn *window.Fn, tr trigger.Trigger, mods ...func(*window.WindowingStrategy)) *Strategy {
	t.Helper()
	ws := &window.WindowingStrategy{Fn: fn, Trigger: tr, AccumulationMode: window.Discarding}
	for _, m := range mods {
		m(ws)
	}
	cm := graphx.NewCoderMarshaller()
	pb, err := graphx.MarshalWindowingStrategy(cm, ws)
	if err != nil {
		t.Fatalf("MarshalWindowingStrategy: %v", err)
	}
	s, err := NewStrategy(pb, &pipepb.Components{Coders: cm.Build()})
	if err != nil {
		t.Fatalf("NewStrategy: %v", err)
	}
	return s
}

type output struct {
	w      Window
	pane   PaneInfo
	ts     mtime.Time
	values []float64
}

func (o output) sum() float64 {
	var s float64
	for _, v := range o.values {
		s += v
	}
	return s
}

// gbk simulates the host's GroupByKey for one key on top of the driver:
// it stores every state marshalled (so each step round-trips the bytes),
// buffers values, keeps one timer per domain per window and fires them as
// the clocks advance.
type gbk struct {
	t         *testing.T
	s         *Strategy
	states    map[Window][]byte
	buffers   map[Window][]float64
	timers    map[Window]Timers
	inputWM   mtime.Time
	procTime  mtime.Time
	syncTime  mtime.Time
	out       []output
	late      int
	closed    int
	lastPanes map[Window]PaneInfo
}

func newGBK(t *testing.T, s *Strategy) *gbk {
	return &gbk{t: t, s: s, states: map[Window][]byte{}, buffers: map[Window][]float64{},
		timers: map[Window]Timers{}, inputWM: mtime.MinTimestamp, lastPanes: map[Window]PaneInfo{}}
}

func (g *gbk) state(w Window) WindowState {
	st, err := g.s.UnmarshalState(g.states[w])
	if err != nil {
		g.t.Fatalf("UnmarshalState(%v): %v", w, err)
	}
	return st
}

func (g *gbk) outputWM() mtime.Time {
	wm := g.inputWM
	for w := range g.states {
		if h, ok := g.state(w).OutputHold(); ok {
			wm = min(wm, h)
		}
	}
	return wm
}

func (g *gbk) ctx(w Window) Context {
	return Context{Window: w, InputWatermark: g.inputWM, OutputWatermark: g.outputWM(),
		ProcessingTime: g.procTime, SynchronizedProcessingTime: g.syncTime}
}

func (g *gbk) apply(w Window, res Result) {
	if !res.Delete {
		b, err := res.State.Marshal()
		if err != nil {
			g.t.Fatalf("Marshal(%+v): %v", res.State, err)
		}
		g.states[w] = b
	}
	for _, p := range res.Panes {
		if prev, ok := g.lastPanes[w]; ok && p.Info.Index != prev.Index+1 {
			g.t.Errorf("window %v: pane index %d after %d", w, p.Info.Index, prev.Index)
		}
		g.lastPanes[w] = p.Info
		g.out = append(g.out, output{w: w, pane: p.Info, ts: p.Timestamp, values: slices.Clone(g.buffers[w])})
		if p.ClearAfter {
			delete(g.buffers, w)
		}
	}
	if res.ClearBuffer {
		delete(g.buffers, w)
	}
	if res.Delete {
		delete(g.states, w)
		delete(g.buffers, w)
		delete(g.timers, w)
		return
	}
	g.timers[w] = res.Timers
}

// add processes elements at ts, one at a time.
func (g *gbk) add(ts mtime.Time, values ...float64) {
	for _, v := range values {
		for _, w := range g.s.WindowFn.AssignWindows(ts) {
			if g.s.IsDroppable(w, g.inputWM) {
				g.late++
				continue
			}
			if g.s.WindowFn.IsMerging() {
				active := []Window{w}
				for a := range g.states {
					active = append(active, a)
				}
				for _, m := range MergeWindows(active) {
					var sts []WindowState
					var vals []float64
					for _, from := range m.From {
						sts = append(sts, g.state(from))
						vals = append(vals, g.buffers[from]...)
						delete(g.states, from)
						delete(g.buffers, from)
						delete(g.timers, from)
					}
					res := g.s.Merge(sts, g.ctx(m.To))
					g.buffers[m.To] = vals
					g.apply(m.To, res)
					if slices.Contains(m.From, w) {
						w = m.To
					}
				}
			}
			res := g.s.OnElement(g.state(w), ts, g.ctx(w))
			switch res.Dropped {
			case DroppedLate:
				g.late++
			case DroppedClosed:
				g.closed++
			default:
				g.buffers[w] = append(g.buffers[w], v)
			}
			g.apply(w, res)
		}
	}
}

// fireTimers evaluates every window whose timer is due, in window order,
// until none is.
func (g *gbk) fireTimers() {
	for {
		var due []Window
		for w, t := range g.timers {
			if (t.HasEventTime && g.inputWM > t.EventTime) || (t.HasProcessingTime && g.procTime >= t.ProcessingTime) {
				due = append(due, w)
			}
		}
		if len(due) == 0 {
			return
		}
		slices.SortFunc(due, func(a, b Window) int { return cmpTime(a.Start, b.Start) })
		for _, w := range due {
			g.apply(w, g.s.OnTimer(g.state(w), g.ctx(w)))
		}
	}
}

func (g *gbk) advanceWatermark(wm mtime.Time) {
	g.inputWM = wm
	g.fireTimers()
}

func (g *gbk) advanceProcessingTime(d time.Duration) {
	g.procTime = g.procTime.Add(d)
	g.syncTime = g.procTime
	g.fireTimers()
}

// finish is the end of a bounded input: the watermark jumps to +inf.
func (g *gbk) finish() { g.advanceWatermark(mtime.MaxTimestamp) }

func (g *gbk) sums() []float64 {
	var s []float64
	for _, o := range g.out {
		s = append(s, o.sum())
	}
	return s
}

func (g *gbk) String() string {
	s := ""
	for _, o := range g.out {
		s += fmt.Sprintf("%v %+v ts=%d %v\n", o.w, o.pane, int64(o.ts), o.values)
	}
	return s
}

func sorted(xs []float64) []float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs
}
