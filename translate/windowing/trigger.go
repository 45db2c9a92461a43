package windowing

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// This file is the trigger state machine interpreter. The rules follow Beam
// Java's runners-core TriggerStateMachine implementations (the reference
// semantics of the model; Prism's engine/strategy.go is a looser port):
//
//   - A trigger is a tree. Every node has a "finished" bit; a finished node
//     never fires again. A finished root closes the window: later elements
//     for it are dropped until it is garbage collected.
//   - "Once" triggers (AfterCount, AfterProcessingTime,
//     AfterSynchronizedProcessingTime, AfterWatermark without early/late
//     firings, AfterAll, AfterAny) finish when they fire.
//   - Repeat, Default, Always and AfterWatermark with late firings never
//     finish by themselves; Repeat resets a finished child.
//   - OnElement only reaches unfinished nodes; ShouldFire is false for a
//     finished node; OnFire must only be called when ShouldFire is true.
//
// State is a flat slice of per-node cells indexed by the node's pre-order
// position, so it serializes to a few bytes and needs no pointers.

// Context is what triggers observe besides their own state.
type Context struct {
	// Window is the window the trigger runs for.
	Window Window
	// InputWatermark is the GroupByKey's input watermark. The end of the
	// window is reached when InputWatermark > Window.MaxTimestamp().
	InputWatermark mtime.Time
	// OutputWatermark is the GroupByKey's output watermark (pane timing:
	// a pane is LATE once the output watermark has passed the window).
	OutputWatermark mtime.Time
	// ProcessingTime is the current processing time.
	ProcessingTime mtime.Time
	// SynchronizedProcessingTime is the processing time up to which all of
	// the input has been processed: the host passes the start time of the
	// current bundle while processing elements and the current time when it
	// evaluates timers after a bundle. AfterSynchronizedProcessingTime fires
	// once it is strictly after the value seen by the first element.
	SynchronizedProcessingTime mtime.Time
}

func (c Context) endOfWindowReached() bool { return c.InputWatermark > c.Window.MaxTimestamp() }

// Timers are the instants at which a trigger (or the driver) must be
// evaluated again. Event-time timer T fires when the input watermark
// becomes > T (Beam timer semantics); processing-time timer T fires when
// processing time becomes >= T.
type Timers struct {
	EventTime, ProcessingTime       mtime.Time
	HasEventTime, HasProcessingTime bool
}

func (t *Timers) addEvent(at mtime.Time) {
	if !t.HasEventTime || at < t.EventTime {
		t.EventTime, t.HasEventTime = at, true
	}
}

func (t *Timers) addProcessing(at mtime.Time) {
	if !t.HasProcessingTime || at < t.ProcessingTime {
		t.ProcessingTime, t.HasProcessingTime = at, true
	}
}

type triggerKind uint8

const (
	tDefault triggerKind = iota
	tAlways
	tNever
	tCount
	tProcessingTime
	tSyncProcessingTime
	tEndOfWindow // AfterWatermark without early or late firings
	tEarlyLate   // AfterWatermark with early and/or late firings
	tRepeat
	tAfterAll
	tAfterAny
	tAfterEach
	tOrFinally
)

var kindNames = [...]string{"Default", "Always", "Never", "AfterCount", "AfterProcessingTime",
	"AfterSynchronizedProcessingTime", "AfterEndOfWindow", "AfterEndOfWindow", "Repeat",
	"AfterAll", "AfterAny", "AfterEach", "OrFinally"}

type timestampTransform struct {
	delay          int64 // > 0 for a delay
	period, offset int64 // period > 0 for an alignment
}

type node struct {
	kind       triggerKind
	count      int64 // tCount
	transforms []timestampTransform
	children   []int // pre-order indices; tEarlyLate: [early, late?] (early defaults to Never)
	hasLate    bool  // tEarlyLate
	end        int   // one past the last index of the subtree
}

// Trigger is a compiled trigger tree. It is immutable and safe for
// concurrent use; all state lives in TriggerState values.
type Trigger struct {
	nodes   []node
	merging bool
}

// ErrUnsupportedTrigger is returned (wrapped) for a trigger the interpreter
// does not know.
var ErrUnsupportedTrigger = errors.New("unsupported trigger")

// NewTrigger compiles a trigger proto. A nil trigger is the default trigger.
// merging tells whether windows may merge (session windows): AfterEach then
// runs all its subtriggers on every element, as Beam does, since merging may
// revive a finished one.
func NewTrigger(t *pipepb.Trigger, merging bool) (*Trigger, error) {
	tr := &Trigger{merging: merging}
	if _, err := tr.compile(t); err != nil {
		return nil, err
	}
	return tr, nil
}

func (tr *Trigger) add(n node) int {
	tr.nodes = append(tr.nodes, n)
	return len(tr.nodes) - 1
}

func (tr *Trigger) compileChildren(i int, ts []*pipepb.Trigger, what string) error {
	if len(ts) == 0 {
		return fmt.Errorf("windowing: %s trigger without subtriggers: %w", what, ErrUnsupportedTrigger)
	}
	for _, sub := range ts {
		c, err := tr.compile(sub)
		if err != nil {
			return err
		}
		tr.nodes[i].children = append(tr.nodes[i].children, c)
	}
	return nil
}

func (tr *Trigger) compile(t *pipepb.Trigger) (int, error) {
	i := tr.add(node{})
	var err error
	switch t := t.GetTrigger().(type) {
	case nil:
		tr.nodes[i].kind = tDefault
	case *pipepb.Trigger_Default_:
		tr.nodes[i].kind = tDefault
	case *pipepb.Trigger_Always_:
		tr.nodes[i].kind = tAlways
	case *pipepb.Trigger_Never_:
		tr.nodes[i].kind = tNever
	case *pipepb.Trigger_ElementCount_:
		tr.nodes[i].kind = tCount
		tr.nodes[i].count = int64(t.ElementCount.GetElementCount())
	case *pipepb.Trigger_AfterProcessingTime_:
		tr.nodes[i].kind = tProcessingTime
		for _, tt := range t.AfterProcessingTime.GetTimestampTransforms() {
			switch x := tt.GetTimestampTransform().(type) {
			case *pipepb.TimestampTransform_Delay_:
				tr.nodes[i].transforms = append(tr.nodes[i].transforms, timestampTransform{delay: x.Delay.GetDelayMillis()})
			case *pipepb.TimestampTransform_AlignTo_:
				if x.AlignTo.GetPeriod() <= 0 {
					return 0, fmt.Errorf("windowing: AfterProcessingTime alignment period %dms must be positive: %w", x.AlignTo.GetPeriod(), ErrUnsupportedTrigger)
				}
				tr.nodes[i].transforms = append(tr.nodes[i].transforms, timestampTransform{period: x.AlignTo.GetPeriod(), offset: x.AlignTo.GetOffset()})
			default:
				return 0, fmt.Errorf("windowing: AfterProcessingTime timestamp transform %T: %w", x, ErrUnsupportedTrigger)
			}
		}
	case *pipepb.Trigger_AfterSynchronizedProcessingTime_:
		tr.nodes[i].kind = tSyncProcessingTime
	case *pipepb.Trigger_AfterEndOfWindow_:
		early, late := t.AfterEndOfWindow.GetEarlyFirings(), t.AfterEndOfWindow.GetLateFirings()
		if early == nil && late == nil {
			tr.nodes[i].kind = tEndOfWindow
			break
		}
		tr.nodes[i].kind = tEarlyLate
		if early == nil {
			early = &pipepb.Trigger{Trigger: &pipepb.Trigger_Never_{Never: &pipepb.Trigger_Never{}}}
		}
		subs := []*pipepb.Trigger{early}
		if late != nil {
			subs = append(subs, late)
			tr.nodes[i].hasLate = true
		}
		err = tr.compileChildren(i, subs, "AfterEndOfWindow")
	case *pipepb.Trigger_Repeat_:
		tr.nodes[i].kind = tRepeat
		err = tr.compileChildren(i, []*pipepb.Trigger{t.Repeat.GetSubtrigger()}, "Repeat")
	case *pipepb.Trigger_AfterAll_:
		tr.nodes[i].kind = tAfterAll
		err = tr.compileChildren(i, t.AfterAll.GetSubtriggers(), "AfterAll")
	case *pipepb.Trigger_AfterAny_:
		tr.nodes[i].kind = tAfterAny
		err = tr.compileChildren(i, t.AfterAny.GetSubtriggers(), "AfterAny")
	case *pipepb.Trigger_AfterEach_:
		tr.nodes[i].kind = tAfterEach
		err = tr.compileChildren(i, t.AfterEach.GetSubtriggers(), "AfterEach")
	case *pipepb.Trigger_OrFinally_:
		tr.nodes[i].kind = tOrFinally
		if t.OrFinally.GetMain() == nil || t.OrFinally.GetFinally() == nil {
			return 0, fmt.Errorf("windowing: OrFinally needs main and finally triggers: %w", ErrUnsupportedTrigger)
		}
		err = tr.compileChildren(i, []*pipepb.Trigger{t.OrFinally.GetMain(), t.OrFinally.GetFinally()}, "OrFinally")
	default:
		return 0, fmt.Errorf("windowing: trigger %T: %w", t, ErrUnsupportedTrigger)
	}
	if err != nil {
		return 0, err
	}
	tr.nodes[i].end = len(tr.nodes)
	return i, nil
}

func (tr *Trigger) String() string { return tr.str(0) }

func (tr *Trigger) str(i int) string {
	n := tr.nodes[i]
	s := kindNames[n.kind]
	switch n.kind {
	case tCount:
		s = fmt.Sprintf("%s(%d)", s, n.count)
	case tProcessingTime:
		s = fmt.Sprintf("%s%v", s, n.transforms)
	}
	if len(n.children) > 0 {
		s += "("
		for j, c := range n.children {
			if j > 0 {
				s += ", "
			}
			s += tr.str(c)
		}
		s += ")"
	}
	return s
}

// cell is the state of one trigger node.
type cell struct {
	finished    bool
	hasDeadline bool
	count       int64      // tCount: elements seen since the last reset
	deadline    mtime.Time // processing-time triggers: when to fire
}

// TriggerState is the state of a trigger for one key and window. It is a
// value: the interpreter's functions return new states and never modify
// their arguments. Store it with Marshal; the zero value is the initial
// state of any trigger.
type TriggerState struct {
	cells []cell
}

const triggerStateVersion = 1

// Marshal serializes the state: a version byte, the number of cells, then per
// cell a flag byte (1 finished, 2 deadline, 4 count) and the varints present.
// The initial state marshals to nil.
func (s TriggerState) Marshal() []byte {
	dirty := false
	for _, c := range s.cells {
		if c != (cell{}) {
			dirty = true
			break
		}
	}
	if !dirty {
		return nil
	}
	b := []byte{triggerStateVersion}
	b = binary.AppendUvarint(b, uint64(len(s.cells)))
	for _, c := range s.cells {
		var flags byte
		if c.finished {
			flags |= 1
		}
		if c.hasDeadline {
			flags |= 2
		}
		if c.count != 0 {
			flags |= 4
		}
		b = append(b, flags)
		if c.hasDeadline {
			b = binary.AppendVarint(b, int64(c.deadline))
		}
		if c.count != 0 {
			b = binary.AppendVarint(b, c.count)
		}
	}
	return b
}

// UnmarshalState decodes a state written by Marshal for this trigger.
func (tr *Trigger) UnmarshalState(b []byte) (TriggerState, error) {
	if len(b) == 0 {
		return TriggerState{}, nil
	}
	if b[0] != triggerStateVersion {
		return TriggerState{}, fmt.Errorf("windowing: trigger state version %d, want %d", b[0], triggerStateVersion)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n != uint64(len(tr.nodes)) {
		return TriggerState{}, fmt.Errorf("windowing: trigger state has %d cells, trigger %v has %d nodes", n, tr, len(tr.nodes))
	}
	b = b[k:]
	s := TriggerState{cells: make([]cell, n)}
	for i := range s.cells {
		if len(b) == 0 {
			return TriggerState{}, fmt.Errorf("windowing: trigger state truncated at cell %d", i)
		}
		flags := b[0]
		b = b[1:]
		c := &s.cells[i]
		c.finished = flags&1 != 0
		if flags&2 != 0 {
			v, k := binary.Varint(b)
			if k <= 0 {
				return TriggerState{}, fmt.Errorf("windowing: trigger state: bad deadline at cell %d", i)
			}
			c.hasDeadline, c.deadline, b = true, mtime.Time(v), b[k:]
		}
		if flags&4 != 0 {
			v, k := binary.Varint(b)
			if k <= 0 {
				return TriggerState{}, fmt.Errorf("windowing: trigger state: bad count at cell %d", i)
			}
			c.count, b = v, b[k:]
		}
	}
	if len(b) != 0 {
		return TriggerState{}, fmt.Errorf("windowing: trigger state: %d trailing bytes", len(b))
	}
	return s, nil
}

// run is one evaluation: the trigger, a private copy of the state, and the
// context.
type run struct {
	tr *Trigger
	s  []cell
	c  Context
}

func (tr *Trigger) start(s TriggerState, c Context) *run {
	cells := make([]cell, len(tr.nodes))
	copy(cells, s.cells)
	return &run{tr: tr, s: cells, c: c}
}

func (r *run) state() TriggerState { return TriggerState{cells: r.s} }

// IsFinished reports whether the root trigger finished (the window closed).
func (tr *Trigger) IsFinished(s TriggerState) bool {
	return len(s.cells) > 0 && s.cells[0].finished
}

// OnElement records one element.
func (tr *Trigger) OnElement(s TriggerState, c Context) TriggerState {
	r := tr.start(s, c)
	r.onElement(0)
	return r.state()
}

// ShouldFire reports whether the trigger is ready to fire.
func (tr *Trigger) ShouldFire(s TriggerState, c Context) bool {
	return tr.start(s, c).shouldFire(0)
}

// OnFire records that the trigger fired (ShouldFire was true) and reports
// whether it finished, closing the window.
func (tr *Trigger) OnFire(s TriggerState, c Context) (TriggerState, bool) {
	r := tr.start(s, c)
	r.onFire(0)
	return r.state(), r.s[0].finished
}

// OnMerge combines the states of windows merging into c.Window.
func (tr *Trigger) OnMerge(srcs []TriggerState, c Context) TriggerState {
	r := tr.start(TriggerState{}, c)
	m := make([][]cell, len(srcs))
	for j, s := range srcs {
		m[j] = make([]cell, len(tr.nodes))
		copy(m[j], s.cells)
	}
	r.onMerge(0, m)
	return r.state()
}

// NextTimers returns the earliest instants at which the trigger must be
// evaluated again (end of window, processing-time delays).
func (tr *Trigger) NextTimers(s TriggerState, c Context) Timers {
	var t Timers
	tr.start(s, c).timers(0, &t)
	return t
}

func (r *run) node(i int) *node { return &r.tr.nodes[i] }

func (r *run) finished(i int) bool { return r.s[i].finished }

// reset clears the subtree's state, finished bits included (Java resetTree /
// invokeClear followed by setFinished(false)).
func (r *run) reset(i int) {
	clear(r.s[i:r.node(i).end])
}

// finish marks a once-trigger finished and clears its data.
func (r *run) finish(i int) {
	r.s[i] = cell{finished: true}
}

func (r *run) firstUnfinished(i int) int {
	for _, ch := range r.node(i).children {
		if !r.finished(ch) {
			return ch
		}
	}
	return -1
}

func (r *run) onElement(i int) {
	if r.finished(i) {
		return
	}
	n := r.node(i)
	switch n.kind {
	case tCount:
		r.s[i].count++
	case tProcessingTime:
		// AfterDelayFromFirstElement: the first element sets the deadline.
		if !r.s[i].hasDeadline {
			r.s[i].hasDeadline, r.s[i].deadline = true, n.applyTransforms(r.c.ProcessingTime)
		}
	case tSyncProcessingTime:
		if !r.s[i].hasDeadline {
			r.s[i].hasDeadline, r.s[i].deadline = true, r.c.SynchronizedProcessingTime
		}
	case tEarlyLate:
		// Early firings run until the end of the window; then late firings.
		if early := n.children[0]; !r.finished(early) {
			r.onElement(early)
		} else if n.hasLate {
			r.onElement(n.children[1])
		}
	case tAfterEach:
		// Only the current subtrigger sees elements, unless windows merge.
		if r.tr.merging {
			for _, ch := range n.children {
				r.onElement(ch)
			}
		} else if ch := r.firstUnfinished(i); ch >= 0 {
			r.onElement(ch)
		}
	case tRepeat, tAfterAll, tAfterAny, tOrFinally:
		for _, ch := range n.children {
			r.onElement(ch)
		}
	}
}

func (n *node) applyTransforms(t mtime.Time) mtime.Time {
	v := int64(t)
	for _, tt := range n.transforms {
		if tt.period > 0 {
			// AlignTo: the next instant offset + k*period at or after v.
			if m := mod(v-tt.offset, tt.period); m != 0 {
				v += tt.period - m
			}
		} else {
			v += tt.delay
		}
	}
	return mtime.Time(v)
}

func (r *run) shouldFire(i int) bool {
	if r.finished(i) {
		return false
	}
	n := r.node(i)
	switch n.kind {
	case tDefault, tEndOfWindow:
		return r.c.endOfWindowReached()
	case tAlways:
		return true
	case tNever:
		return false
	case tCount:
		return r.s[i].count >= n.count
	case tProcessingTime:
		return r.s[i].hasDeadline && r.c.ProcessingTime >= r.s[i].deadline
	case tSyncProcessingTime:
		return r.s[i].hasDeadline && r.c.SynchronizedProcessingTime > r.s[i].deadline
	case tEarlyLate:
		if early := n.children[0]; !r.finished(early) {
			return r.shouldFire(early) || r.c.endOfWindowReached()
		}
		return n.hasLate && r.shouldFire(n.children[1])
	case tRepeat:
		return r.shouldFire(n.children[0])
	case tAfterAll:
		// Every subtrigger still running must be ready.
		for _, ch := range n.children {
			if !r.finished(ch) && !r.shouldFire(ch) {
				return false
			}
		}
		return true
	case tAfterAny:
		for _, ch := range n.children {
			if r.shouldFire(ch) {
				return true
			}
		}
		return false
	case tAfterEach:
		ch := r.firstUnfinished(i)
		return ch >= 0 && r.shouldFire(ch)
	case tOrFinally:
		return r.shouldFire(n.children[0]) || r.shouldFire(n.children[1])
	}
	return false
}

func (r *run) onFire(i int) {
	n := r.node(i)
	switch n.kind {
	case tDefault, tAlways, tNever:
		// Never finish.
	case tCount, tProcessingTime, tSyncProcessingTime, tEndOfWindow:
		r.finish(i)
	case tEarlyLate:
		early := n.children[0]
		switch {
		case !r.finished(early) && !r.c.endOfWindowReached():
			// Early firing; early firings repeat implicitly.
			r.onFire(early)
			r.reset(early)
		case !r.finished(early):
			// The ON_TIME firing: early firings are over for good, and the
			// late trigger starts afresh (it ran in parallel).
			if r.shouldFire(early) {
				r.onFire(early)
			}
			r.reset(early)
			r.s[early].finished = true
			if n.hasLate {
				r.reset(n.children[1])
			} else {
				r.finish(i)
			}
		case n.hasLate:
			// Late firing, implicitly repeated.
			r.onFire(n.children[1])
			r.reset(n.children[1])
		default:
			r.finish(i)
		}
	case tRepeat:
		ch := n.children[0]
		r.onFire(ch)
		if r.finished(ch) {
			r.reset(ch)
		}
	case tAfterAll, tAfterAny:
		for _, ch := range n.children {
			if r.shouldFire(ch) {
				r.onFire(ch)
			}
		}
		r.finish(i)
	case tAfterEach:
		if ch := r.firstUnfinished(i); ch >= 0 {
			r.onFire(ch)
		}
		r.s[i].finished = r.firstUnfinished(i) < 0
	case tOrFinally:
		main, fin := n.children[0], n.children[1]
		if r.shouldFire(fin) {
			r.onFire(fin)
			r.reset(main)
		} else {
			r.onFire(main)
		}
		// Finished as soon as either side finished.
		r.s[i].finished = r.finished(main) || r.finished(fin)
	}
}

// onMerge computes cell i (and its subtree) of the merged window from the
// merging windows' states m, following each Java trigger's onMerge.
func (r *run) onMerge(i int, m [][]cell) {
	n := r.node(i)
	anyFinished, allFinished := false, len(m) > 0
	for _, s := range m {
		anyFinished = anyFinished || s[i].finished
		allFinished = allFinished && s[i].finished
	}
	switch n.kind {
	case tDefault, tAlways, tNever:
		// Stateless, never finished.
	case tCount:
		// Finished in any merging window: finished. Else counts add up.
		if anyFinished {
			r.finish(i)
			return
		}
		for _, s := range m {
			r.s[i].count += s[i].count
		}
	case tProcessingTime, tSyncProcessingTime:
		// Finished in any: finished. Else the earliest deadline wins.
		if anyFinished {
			r.finish(i)
			return
		}
		for _, s := range m {
			if s[i].hasDeadline && (!r.s[i].hasDeadline || s[i].deadline < r.s[i].deadline) {
				r.s[i].hasDeadline, r.s[i].deadline = true, s[i].deadline
			}
		}
	case tEndOfWindow:
		// Still active in some window, or the merged window has not ended:
		// not finished.
		r.s[i].finished = allFinished && r.c.endOfWindowReached()
	case tEarlyLate:
		early := n.children[0]
		earlyAllFinished := len(m) > 0
		for _, s := range m {
			earlyAllFinished = earlyAllFinished && s[early].finished
		}
		if !earlyAllFinished || !r.c.endOfWindowReached() {
			r.onMerge(early, m)
			r.s[early].finished = false
			if n.hasLate {
				r.reset(n.children[1])
			}
		} else {
			r.s[early].finished = true
			if n.hasLate {
				r.onMerge(n.children[1], m)
			}
		}
		r.s[i].finished = allFinished && !n.hasLate
	case tRepeat:
		r.onMerge(n.children[0], m)
	case tAfterAll:
		all := true
		for _, ch := range n.children {
			r.onMerge(ch, m)
			all = all && r.finished(ch)
		}
		r.s[i].finished = all
	case tAfterAny:
		anyCh := false
		for _, ch := range n.children {
			r.onMerge(ch, m)
			anyCh = anyCh || r.finished(ch)
		}
		r.s[i].finished = anyCh
	case tAfterEach:
		// Subtriggers up to the first one unfinished after merging merge;
		// the following ones are retroactively not started.
		prior := true
		for _, ch := range n.children {
			if prior {
				r.onMerge(ch, m)
				prior = r.finished(ch)
			} else {
				r.reset(ch)
			}
		}
		r.s[i].finished = r.firstUnfinished(i) < 0
	case tOrFinally:
		main, fin := n.children[0], n.children[1]
		r.onMerge(main, m)
		r.onMerge(fin, m)
		r.s[i].finished = r.finished(main) || r.finished(fin)
	}
}

func (r *run) timers(i int, t *Timers) {
	if r.finished(i) {
		return
	}
	n := r.node(i)
	switch n.kind {
	case tDefault, tEndOfWindow:
		if !r.c.endOfWindowReached() {
			t.addEvent(r.c.Window.MaxTimestamp())
		}
	case tProcessingTime:
		if r.s[i].hasDeadline {
			t.addProcessing(r.s[i].deadline)
		}
	case tSyncProcessingTime:
		// Fires once synchronized processing time is strictly after the
		// deadline: evaluate at the next millisecond.
		if r.s[i].hasDeadline {
			t.addProcessing(r.s[i].deadline + 1)
		}
	case tEarlyLate:
		if early := n.children[0]; !r.finished(early) {
			if !r.c.endOfWindowReached() {
				t.addEvent(r.c.Window.MaxTimestamp())
			}
			r.timers(early, t)
		} else if n.hasLate {
			r.timers(n.children[1], t)
		}
	case tAfterEach:
		if r.tr.merging {
			for _, ch := range n.children {
				r.timers(ch, t)
			}
		} else if ch := r.firstUnfinished(i); ch >= 0 {
			r.timers(ch, t)
		}
	case tRepeat, tAfterAll, tAfterAny, tOrFinally:
		for _, ch := range n.children {
			r.timers(ch, t)
		}
	}
}
