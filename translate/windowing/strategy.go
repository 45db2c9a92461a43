package windowing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// ErrUnsupportedStrategy is returned (wrapped) for a windowing strategy the
// host cannot run (retracting accumulation). ErrUnsupportedWindowFn,
// ErrUnsupportedTrigger and ErrUnsupportedWindowCoder are wrapped as they are.
var ErrUnsupportedStrategy = errors.New("unsupported windowing strategy")

// TimestampCombiner decides the output timestamp of a pane.
type TimestampCombiner int

// Timestamp combiners (OutputTime in the proto).
const (
	EndOfWindow TimestampCombiner = iota // the window's max timestamp (default)
	EarliestInPane
	LatestInPane
)

// Strategy is the driver of a GroupByKey's windowing: a windowing strategy
// compiled from its proto. It is immutable; per key and window state lives
// in WindowState values the host stores.
type Strategy struct {
	WindowFn          WindowFn
	WindowCoder       *WindowCoder
	Trigger           *Trigger
	Accumulating      bool              // else discarding
	AllowedLateness   int64             // milliseconds
	ClosingFireAlways bool              // else emit the final pane only if non-empty
	OnTimeFireAlways  bool              // else emit the ON_TIME pane only if non-empty
	TimestampCombiner TimestampCombiner // output timestamp of panes
}

// NewStrategy compiles a windowing strategy; comps resolves its window coder.
func NewStrategy(ws *pipepb.WindowingStrategy, comps *pipepb.Components) (*Strategy, error) {
	if ws == nil {
		return nil, fmt.Errorf("windowing: nil windowing strategy: %w", ErrUnsupportedStrategy)
	}
	fn, err := WindowFnFromSpec(ws.GetWindowFn())
	if errors.Is(err, ErrUnsupportedWindowFn) && ws.GetWindowFn().GetUrn() != "" {
		fn = WindowFn{Kind: CustomWindows, URN: ws.GetWindowFn().GetUrn(), Merging: ws.GetMergeStatus() != pipepb.MergeStatus_NON_MERGING}
	} else if err != nil {
		return nil, err
	}
	c := comps.GetCoders()[ws.GetWindowCoderId()]
	if c == nil {
		return nil, fmt.Errorf("windowing: window coder %q not in components: %w", ws.GetWindowCoderId(), ErrUnsupportedWindowCoder)
	}
	wc, err := NewWindowCoder(c.GetSpec().GetUrn())
	if err != nil {
		return nil, err
	}
	tr, err := NewTrigger(ws.GetTrigger(), fn.IsMerging())
	if err != nil {
		return nil, err
	}
	s := &Strategy{
		WindowFn:          fn,
		WindowCoder:       wc,
		Trigger:           tr,
		AllowedLateness:   max(ws.GetAllowedLateness(), 0),
		ClosingFireAlways: ws.GetClosingBehavior() == pipepb.ClosingBehavior_EMIT_ALWAYS,
		// Java's default on-time behaviour is FIRE_ALWAYS.
		OnTimeFireAlways: ws.GetOnTimeBehavior() != pipepb.OnTimeBehavior_FIRE_IF_NONEMPTY,
	}
	switch m := ws.GetAccumulationMode(); m {
	case pipepb.AccumulationMode_UNSPECIFIED, pipepb.AccumulationMode_DISCARDING:
	case pipepb.AccumulationMode_ACCUMULATING:
		s.Accumulating = true
	default:
		return nil, fmt.Errorf("windowing: accumulation mode %v: %w", m, ErrUnsupportedStrategy)
	}
	switch o := ws.GetOutputTime(); o {
	case pipepb.OutputTime_UNSPECIFIED, pipepb.OutputTime_END_OF_WINDOW:
	case pipepb.OutputTime_EARLIEST_IN_PANE:
		s.TimestampCombiner = EarliestInPane
	case pipepb.OutputTime_LATEST_IN_PANE:
		s.TimestampCombiner = LatestInPane
	default:
		return nil, fmt.Errorf("windowing: output time %v: %w", o, ErrUnsupportedStrategy)
	}
	return s, nil
}

// GCTime is the garbage collection time of w: its max timestamp plus the
// allowed lateness, capped at the end of the global window (Beam's
// LateDataUtils.garbageCollectionTime). The window expires when the input
// watermark passes it (> GCTime).
func (s *Strategy) GCTime(w Window) mtime.Time {
	maxTs := w.MaxTimestamp()
	if maxTs > mtime.EndOfGlobalWindowTime-mtime.Time(s.AllowedLateness) {
		return mtime.EndOfGlobalWindowTime
	}
	return maxTs + mtime.Time(s.AllowedLateness)
}

// IsDroppable reports whether an element in w is too late to be processed:
// the window's max timestamp + allowed lateness is before the input
// watermark. The host counts such elements in dropped_late_elements. For
// merging windows check the element's own window, before merging.
func (s *Strategy) IsDroppable(w Window, inputWM mtime.Time) bool {
	return s.GCTime(w) < inputWM
}

// WindowState is the driver's state for one key and window. The host stores
// it (Marshal) next to the window's buffered values.
//
// Invariants: Count > 0 implies HasHold or HasExtraHold (every buffered
// element is held); Closed windows hold nothing and buffer nothing.
type WindowState struct {
	Trigger TriggerState
	Count   int64      // elements buffered since the last firing (non-empty pane tracking)
	Hold    mtime.Time // output timestamp hold of those elements, if HasHold
	HasHold bool
	// ExtraHold is Beam's end-of-window or garbage-collection hold, if
	// HasExtraHold: it keeps the output watermark back for an ON_TIME or
	// final pane that will fire even though empty, and for late elements.
	ExtraHold    mtime.Time
	HasExtraHold bool
	LastPane     PaneInfo // last emitted pane, if HasPane
	HasPane      bool
	Closed       bool // the trigger finished: drop elements until the window expires
}

const windowStateVersion = 1

// Marshal serializes the state.
func (st WindowState) Marshal() ([]byte, error) {
	var flags byte
	if st.HasHold {
		flags |= 1
	}
	if st.HasPane {
		flags |= 2
	}
	if st.Closed {
		flags |= 4
	}
	if st.HasExtraHold {
		flags |= 8
	}
	b := []byte{windowStateVersion, flags}
	b = binary.AppendVarint(b, st.Count)
	if st.HasHold {
		b = binary.AppendVarint(b, int64(st.Hold))
	}
	if st.HasExtraHold {
		b = binary.AppendVarint(b, int64(st.ExtraHold))
	}
	if st.HasPane {
		pb, err := EncodePane(st.LastPane)
		if err != nil {
			return nil, err
		}
		b = append(b, pb...)
	}
	return append(b, st.Trigger.Marshal()...), nil
}

// UnmarshalState decodes a WindowState written by Marshal. Empty input is
// the initial state.
func (s *Strategy) UnmarshalState(b []byte) (WindowState, error) {
	var st WindowState
	if len(b) == 0 {
		return st, nil
	}
	if len(b) < 2 || b[0] != windowStateVersion {
		return st, fmt.Errorf("windowing: window state: bad header %x", b[:min(len(b), 2)])
	}
	flags := b[1]
	b = b[2:]
	v, k := binary.Varint(b)
	if k <= 0 {
		return st, fmt.Errorf("windowing: window state: bad count")
	}
	st.Count, b = v, b[k:]
	if flags&1 != 0 {
		v, k := binary.Varint(b)
		if k <= 0 {
			return st, fmt.Errorf("windowing: window state: bad hold")
		}
		st.HasHold, st.Hold, b = true, mtime.Time(v), b[k:]
	}
	if flags&8 != 0 {
		v, k := binary.Varint(b)
		if k <= 0 {
			return st, fmt.Errorf("windowing: window state: bad extra hold")
		}
		st.HasExtraHold, st.ExtraHold, b = true, mtime.Time(v), b[k:]
	}
	if flags&2 != 0 {
		r := bytes.NewReader(b)
		p, err := coder.DecodePane(r)
		if err != nil {
			return st, fmt.Errorf("windowing: window state: %w", err)
		}
		st.HasPane, st.LastPane, b = true, p, b[len(b)-r.Len():]
	}
	st.Closed = flags&4 != 0
	ts, err := s.Trigger.UnmarshalState(b)
	if err != nil {
		return st, fmt.Errorf("windowing: window state: %w", err)
	}
	st.Trigger = ts
	return st, nil
}

// DropReason tells why OnElement refused an element.
type DropReason int

// Drop reasons.
const (
	NotDropped    DropReason = iota
	DroppedLate              // the window expired (count in dropped_late_elements)
	DroppedClosed            // the window's trigger finished (Beam's droppedDueToClosedWindow)
)

// Pane is one pane to emit: the window's buffered values (all of them) as
// one output with this pane info and timestamp.
type Pane struct {
	Info      PaneInfo
	Timestamp mtime.Time
	// ClearAfter: drop the buffered values once the pane is emitted
	// (discarding mode, or the final pane).
	ClearAfter bool
}

// Result is what the host does after a driver call, in this order: store
// State (unless Delete); emit Panes in order, clearing the buffer after those
// marked ClearAfter; clear the buffer if ClearBuffer; if Delete, delete the
// window's state, buffer and timers; else set Timers (replacing the window's
// previous timers).
type Result struct {
	State       WindowState
	Dropped     DropReason
	Panes       []Pane
	ClearBuffer bool
	Delete      bool
	Timers      Timers
}

// OnElement processes one element with timestamp ts in window c.Window
// (after merging, for merging windows). If Dropped is NotDropped the host
// appends the element to the window's buffer before emitting Panes.
// Triggers are evaluated after every element, as Beam's runners do for
// per-element processing.
func (s *Strategy) OnElement(st WindowState, ts mtime.Time, c Context) Result {
	w := c.Window
	if s.IsDroppable(w, c.InputWatermark) {
		return Result{State: st, Dropped: DroppedLate, Timers: s.timers(st, c)}
	}
	if st.Closed {
		return Result{State: st, Dropped: DroppedClosed, Timers: s.timers(st, c)}
	}
	st.Count++
	s.addHold(&st, ts, c)
	st.Trigger = s.Trigger.OnElement(st.Trigger, c)
	res := Result{State: st}
	if s.Trigger.ShouldFire(st.Trigger, c) {
		s.fire(&res, c)
	}
	res.Timers = s.timers(res.State, c)
	return res
}

// OnTimer evaluates the window when the input watermark or processing time
// moved (a timer of the window fired): it fires the trigger if ready and
// expires the window once the input watermark passes GCTime, emitting the
// final pane per the closing behaviour.
func (s *Strategy) OnTimer(st WindowState, c Context) Result {
	res := Result{State: st}
	if c.InputWatermark > s.GCTime(c.Window) {
		// ReduceFnRunner.onTimers: when the window expires, its timers
		// (end of window and garbage collection alike) make one final pane
		// (ON_TIME if the end of window is reached with it), whether or
		// not the trigger would fire.
		if !res.State.Closed {
			s.trigger(&res, c, true)
		}
		res.ClearBuffer, res.Delete = true, true
		return res
	}
	if !st.Closed && s.Trigger.ShouldFire(st.Trigger, c) {
		s.fire(&res, c)
	}
	res.Timers = s.timers(res.State, c)
	return res
}

// fire is Beam's ReduceFnRunner.emit: the trigger fires, maybe finishing;
// the pane is emitted if it has new elements or empty panes are wanted.
func (s *Strategy) fire(res *Result, c Context) {
	var finished bool
	res.State.Trigger, finished = s.Trigger.OnFire(res.State.Trigger, c)
	s.trigger(res, c, finished)
	if finished {
		// The window closes: only the trigger's finished bits are kept, to
		// drop later elements until the window expires.
		res.State = WindowState{Trigger: res.State.Trigger, LastPane: res.State.LastPane, HasPane: res.State.HasPane, Closed: true}
		res.ClearBuffer = true
	}
}

// trigger is Beam's ReduceFnRunner.onTrigger: compute the pane, emit it if
// needed, release the hold and reset the non-empty count.
func (s *Strategy) trigger(res *Result, c Context, isFinal bool) {
	st := &res.State
	isEmpty := st.Count == 0
	// WatermarkHold.extractAndRelease: the pane's timestamp is the minimum
	// of the holds, which are released; a window that is not finished
	// re-holds at its end (or expiry) for a pane that may fire empty. With
	// no hold, or a hold past the window (the garbage-collection hold of a
	// late pane), the pane is stamped at the window's end.
	outTs, ok := st.OutputHold()
	if !ok || outTs > c.Window.MaxTimestamp() {
		outTs = c.Window.MaxTimestamp()
	}
	st.Count, st.Hold, st.HasHold, st.ExtraHold, st.HasExtraHold = 0, 0, false, 0, false
	if !isFinal {
		s.addExtraHold(st, c, true)
	}
	if isEmpty && !s.ClosingFireAlways && !s.OnTimeFireAlways {
		return
	}
	p := nextPane(st.LastPane, st.HasPane, c.Window, c.InputWatermark, c.OutputWatermark, isFinal)
	// needToEmit: a pane with elements, an empty ON_TIME pane when asked
	// for, or an empty final pane when asked for.
	if !isEmpty || (p.Timing == OnTime && s.OnTimeFireAlways) || (isFinal && s.ClosingFireAlways) {
		st.LastPane, st.HasPane = p, true
		res.Panes = append(res.Panes, Pane{Info: p, Timestamp: outTs, ClearAfter: isFinal || !s.Accumulating})
	}
}

// addHold adds the output timestamp hold of an element at ts (Beam's
// WatermarkHold.addHolds): the combiner's timestamp, unless that is already
// behind the output watermark, in which case the element is held by the
// end-of-window or garbage-collection hold instead.
func (s *Strategy) addHold(st *WindowState, ts mtime.Time, c Context) {
	h := ts
	if s.TimestampCombiner == EndOfWindow {
		h = c.Window.MaxTimestamp()
	}
	if h < c.OutputWatermark {
		s.addExtraHold(st, c, false)
		return
	}
	if st.HasHold {
		h = s.combine(st.Hold, h, c.Window)
	}
	st.Hold, st.HasHold = h, true
}

// addExtraHold is WatermarkHold.addEndOfWindowOrGarbageCollectionHolds: hold
// at the window's max timestamp while the input watermark has not passed it
// (for an empty pane only if the ON_TIME pane fires always), else at the
// garbage collection time while not passed (for an empty pane only if the
// final pane fires always).
func (s *Strategy) addExtraHold(st *WindowState, c Context, paneIsEmpty bool) {
	var h mtime.Time
	switch maxTs, gc := c.Window.MaxTimestamp(), s.GCTime(c.Window); {
	case maxTs >= c.InputWatermark:
		if paneIsEmpty && !s.OnTimeFireAlways {
			return
		}
		h = maxTs
	case gc >= c.InputWatermark:
		if paneIsEmpty && !s.ClosingFireAlways {
			return
		}
		h = gc
	default:
		return
	}
	if st.HasExtraHold {
		h = min(h, st.ExtraHold)
	}
	st.ExtraHold, st.HasExtraHold = h, true
}

func (s *Strategy) combine(a, b mtime.Time, w Window) mtime.Time {
	switch s.TimestampCombiner {
	case EarliestInPane:
		return min(a, b)
	case LatestInPane:
		return max(a, b)
	default:
		return w.MaxTimestamp()
	}
}

// Merge combines the states of windows merging into c.Window (see
// MergeWindows). The host moves the merged windows' buffered values to
// c.Window and deletes their states and timers. Element counts add up, holds
// combine per the timestamp combiner (END_OF_WINDOW re-holds at the merged
// window's end), the pane index continues from the most advanced source and
// the trigger merges per Beam's onMerge rules.
func (s *Strategy) Merge(states []WindowState, c Context) Result {
	var out WindowState
	trig := make([]TriggerState, len(states))
	for i, st := range states {
		trig[i] = st.Trigger
		out.Count += st.Count
		if st.HasHold {
			h := st.Hold
			if s.TimestampCombiner == EndOfWindow {
				h = c.Window.MaxTimestamp()
			}
			if out.HasHold {
				h = s.combine(out.Hold, h, c.Window)
			}
			out.Hold, out.HasHold = h, true
		}
		if st.HasExtraHold && (!out.HasExtraHold || st.ExtraHold < out.ExtraHold) {
			out.ExtraHold, out.HasExtraHold = st.ExtraHold, true
		}
		if st.HasPane && (!out.HasPane || st.LastPane.Index > out.LastPane.Index) {
			out.LastPane, out.HasPane = st.LastPane, true
		}
	}
	out.Trigger = s.Trigger.OnMerge(trig, c)
	out.Closed = s.Trigger.IsFinished(out.Trigger)
	if out.Closed {
		out = WindowState{Trigger: out.Trigger, LastPane: out.LastPane, HasPane: out.HasPane, Closed: true}
	}
	return Result{State: out, ClearBuffer: out.Closed, Timers: s.timers(out, c)}
}

// timers are the trigger's timers plus the garbage collection timer.
func (s *Strategy) timers(st WindowState, c Context) Timers {
	var t Timers
	if !st.Closed {
		t = s.Trigger.NextTimers(st.Trigger, c)
	}
	t.addEvent(s.GCTime(c.Window))
	return t
}

// OutputHold returns the window's output watermark hold, if any: the host's
// output watermark must not pass it while the window holds it. It is the
// minimum of the element hold and the end-of-window/GC hold.
func (st WindowState) OutputHold() (mtime.Time, bool) {
	switch {
	case st.HasHold && st.HasExtraHold:
		return min(st.Hold, st.ExtraHold), true
	case st.HasHold:
		return st.Hold, true
	case st.HasExtraHold:
		return st.ExtraHold, true
	}
	return 0, false
}
