package task

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ksrunner/ksrunner/host/internal/executor"

	"github.com/ksrunner/ksrunner/host/internal/state"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate/windowing"
)

// windowedGBK is the group-by-key root for every strategy the fast path
// (gbk.go) does not run: triggers, merging windows (sessions), allowed
// lateness, timestamp combiners. It drives translate/windowing.Strategy as its
// doc.go describes ("Using the driver"), keeping everything in the task's
// Pebble batch (layout in eventtime.go):
//
//   - per key and window: the marshalled WindowState, prefixed by the
//     window's current timers and output hold so that replacing them can
//     delete their index entries: flags byte (1 event timer, 2 processing
//     timer, 4 hold), then 8 bytes each for those present, then the state;
//   - the buffered values of the window, in arrival order (record offset);
//   - ordered indexes of event-time timers, processing-time timers and
//     holds, so firing and the output watermark are range scans.
//
// For merging windows the key's active windows are its window states (a
// prefix scan); merged windows' values move to the merge result.
//
// Panes are KV<K, Iterable<V>> in the pane's window with the pane's
// timestamp and exact PaneInfo. Elements past the allowed lateness are
// counted in the dropped_late_elements counter (user counter namespace
// "ksrunner" of the GroupByKey transform), elements of closed windows in
// dropped_closed_window_elements.
type windowedGBK struct {
	t     *Task
	s     *windowing.Strategy
	codec *shuffle.ElementCodec

	droppedLate, droppedClosed int64

	// Custom merging WindowFn only (see mergewindows.go): the executor of
	// the merge stage, the codec of its output, the length of an encoded
	// window, and the records waiting for their windows to merge.
	merger   executor.Executor
	mergeOut *shuffle.ElementCodec
	winLen   func([]byte) (int, error)
	pending  []pendingElement

	// floors bound the times in the event-timer, processing-timer and
	// hold indexes (state.Floor), so firing and the output watermark do
	// not walk what those indexes deleted before. Writes to the indexes
	// go through store, which keeps them; the windowedGBK lives for one
	// opening of its task (an aborted cycle reopens it).
	floors map[state.Kind]*state.Floor

	// firePending: the last fire stopped at Task.maxFiredGroups windows
	// with more due, for the next cycle (Task.FirePending).
	firePending bool
}

// floor is the floor of one of the indexes.
func (g *windowedGBK) floor(store state.Kind) *state.Floor {
	f := g.floors[store]
	if f == nil {
		if g.floors == nil {
			g.floors = map[state.Kind]*state.Floor{}
		}
		f = &state.Floor{}
		g.floors[store] = f
	}
	return f
}

// setIndex sets an index entry and keeps the index's floor.
func (g *windowedGBK) setIndex(store state.Kind, at mtime.Time, key, win []byte) error {
	if err := g.t.batch.Set(g.indexKey(store, at, key, win), nil, nil); err != nil {
		return err
	}
	g.floor(store).Wrote(int64(at))
	return nil
}

func newWindowedGBK(t *Task) (*windowedGBK, error) {
	comps := t.env.Plan.Pipeline.GetComponents()
	ws := comps.GetWindowingStrategies()[t.sub.Root.WindowingStrategy]
	s, err := windowing.NewStrategy(ws, comps)
	if err != nil {
		return nil, fmt.Errorf("group-by-key %s: %w", t.sub.Root.TransformID, err)
	}
	codec := t.env.Codecs[t.env.Topics.ByName[t.sub.Input].PCollection]
	if codec == nil {
		return nil, fmt.Errorf("group-by-key %s: no input codec", t.sub.Root.TransformID)
	}
	g := &windowedGBK{t: t, s: s, codec: codec}
	if ms := t.sub.Root.MergeWindows; ms != nil {
		exec := t.env.Execs[ms.ID]
		if exec == nil {
			return nil, fmt.Errorf("group-by-key %s: merge stage %s has no executor", t.sub.Root.TransformID, ms.ID)
		}
		g.merger = exec
		if g.mergeOut = t.env.Codecs[ms.Outputs[0]]; g.mergeOut == nil {
			return nil, fmt.Errorf("group-by-key %s: merge stage %s: no output codec", t.sub.Root.TransformID, ms.ID)
		}
		if g.winLen, err = shuffle.ValueLength(comps.GetCoders(), ws.GetWindowCoderId()); err != nil {
			return nil, fmt.Errorf("group-by-key %s: window coder: %w", t.sub.Root.TransformID, err)
		}
	}
	return g, nil
}

// storedWindow is one key and window's stored record.
type storedWindow struct {
	st      windowing.WindowState
	timers  windowing.Timers
	hold    mtime.Time
	hasHold bool
	exists  bool
}

func (g *windowedGBK) stateKey(key, win []byte) []byte {
	return g.t.key(state.WindowState, state.AppendLP(nil, key), win)
}

func (g *windowedGBK) valuePrefix(key, win []byte) []byte {
	return g.t.key(state.Value, state.AppendLP(state.AppendLP(nil, key), win))
}

func (g *windowedGBK) load(key, win []byte) (storedWindow, error) {
	v, closer, err := g.t.batch.Get(g.stateKey(key, win))
	if err == pebble.ErrNotFound {
		return storedWindow{}, nil
	}
	if err != nil {
		return storedWindow{}, err
	}
	defer closer.Close()
	var sw storedWindow
	sw.exists = true
	if len(v) < 1 {
		return sw, fmt.Errorf("window state: empty")
	}
	flags, b := v[0], v[1:]
	next := func() (mtime.Time, error) {
		if len(b) < 8 {
			return 0, fmt.Errorf("window state: truncated")
		}
		x := mtime.Time(int64(binary.BigEndian.Uint64(b) ^ (1 << 63)))
		b = b[8:]
		return x, nil
	}
	if flags&1 != 0 {
		if sw.timers.EventTime, err = next(); err != nil {
			return sw, err
		}
		sw.timers.HasEventTime = true
	}
	if flags&2 != 0 {
		if sw.timers.ProcessingTime, err = next(); err != nil {
			return sw, err
		}
		sw.timers.HasProcessingTime = true
	}
	if flags&4 != 0 {
		if sw.hold, err = next(); err != nil {
			return sw, err
		}
		sw.hasHold = true
	}
	sw.st, err = g.s.UnmarshalState(b)
	return sw, err
}

// indexKey is an index entry: store | time | len key | key | window.
func (g *windowedGBK) indexKey(store state.Kind, at mtime.Time, key, win []byte) []byte {
	return g.t.key(store, binary.BigEndian.AppendUint64(nil, state.EventTimeBits(int64(at))), state.AppendLP(nil, key), win)
}

// store replaces a window's state, timers and hold, keeping the indexes in
// step.
func (g *windowedGBK) store(key, win []byte, old storedWindow, st windowing.WindowState, timers windowing.Timers) error {
	b := g.t.batch
	hold, hasHold := st.OutputHold()
	if err := g.dropIndexes(key, win, old, timers, hold, hasHold); err != nil {
		return err
	}
	var flags byte
	v := []byte{0}
	if timers.HasEventTime {
		flags |= 1
		v = binary.BigEndian.AppendUint64(v, state.EventTimeBits(int64(timers.EventTime)))
		if !old.timers.HasEventTime || old.timers.EventTime != timers.EventTime {
			if err := g.setIndex(state.EventTimer, timers.EventTime, key, win); err != nil {
				return err
			}
		}
	}
	if timers.HasProcessingTime {
		flags |= 2
		v = binary.BigEndian.AppendUint64(v, state.EventTimeBits(int64(timers.ProcessingTime)))
		if !old.timers.HasProcessingTime || old.timers.ProcessingTime != timers.ProcessingTime {
			if err := g.setIndex(state.ProcTimer, timers.ProcessingTime, key, win); err != nil {
				return err
			}
		}
	}
	if hasHold {
		flags |= 4
		v = binary.BigEndian.AppendUint64(v, state.EventTimeBits(int64(hold)))
		if !old.hasHold || old.hold != hold {
			if err := g.setIndex(state.Hold, hold, key, win); err != nil {
				return err
			}
		}
	}
	v[0] = flags
	sb, err := st.Marshal()
	if err != nil {
		return err
	}
	return b.Set(g.stateKey(key, win), append(v, sb...), nil)
}

// dropIndexes deletes the index entries of old that differ from the new
// timers and hold (all of them for a deleted window: pass zero values).
func (g *windowedGBK) dropIndexes(key, win []byte, old storedWindow, timers windowing.Timers, hold mtime.Time, hasHold bool) error {
	b := g.t.batch
	if old.timers.HasEventTime && (!timers.HasEventTime || timers.EventTime != old.timers.EventTime) {
		if err := b.Delete(g.indexKey(state.EventTimer, old.timers.EventTime, key, win), nil); err != nil {
			return err
		}
	}
	if old.timers.HasProcessingTime && (!timers.HasProcessingTime || timers.ProcessingTime != old.timers.ProcessingTime) {
		if err := b.Delete(g.indexKey(state.ProcTimer, old.timers.ProcessingTime, key, win), nil); err != nil {
			return err
		}
	}
	if old.hasHold && (!hasHold || hold != old.hold) {
		if err := b.Delete(g.indexKey(state.Hold, old.hold, key, win), nil); err != nil {
			return err
		}
	}
	return nil
}

func (g *windowedGBK) deleteWindow(key, win []byte, old storedWindow) error {
	if err := g.dropIndexes(key, win, old, windowing.Timers{}, 0, false); err != nil {
		return err
	}
	if err := g.clearValues(key, win); err != nil {
		return err
	}
	return g.t.batch.Delete(g.stateKey(key, win), nil)
}

func (g *windowedGBK) clearValues(key, win []byte) error {
	lower := g.valuePrefix(key, win)
	return state.DeleteRange(g.t.batch, lower, state.PrefixEnd(lower))
}

func (g *windowedGBK) ctx(w windowing.Window, now int64, sync int64) windowing.Context {
	return windowing.Context{
		Window:                     w,
		InputWatermark:             mtime.Time(g.t.inputWatermark()),
		OutputWatermark:            mtime.Time(g.t.reportedWM),
		ProcessingTime:             mtime.Time(now),
		SynchronizedProcessingTime: mtime.Time(sync),
	}
}

// add processes one input record (an encoded windowed KV) per the driver's
// element steps. With a custom merging WindowFn the record waits in pending
// until flushPending merges the windows of all waiting records at once.
func (g *windowedGBK) add(raw []byte, offset int64) error {
	wv, err := g.codec.Next(raw)
	if err != nil {
		return err
	}
	key, value, err := g.codec.SplitKV(wv.Elem)
	if err != nil {
		return err
	}
	windows, err := g.codec.SplitWindows(wv)
	if err != nil {
		return err
	}
	if g.merger != nil {
		g.pending = append(g.pending, pendingElement{
			key: bytes.Clone(key), value: bytes.Clone(value), ts: mtime.Time(wv.Timestamp),
			windows: cloneAll(windows), offset: offset,
		})
		return nil
	}
	ev := g.t.ev
	now, sync := ev.now(), ev.syncTime
	if ev.synthetic {
		sync = now
	}
	in := mtime.Time(g.t.inputWatermark())
	for i, winBytes := range windows {
		w, err := g.s.WindowCoder.Decode(winBytes)
		if err != nil {
			return err
		}
		if g.s.IsDroppable(w, in) {
			g.droppedLate++
			continue
		}
		if g.s.WindowFn.IsMerging() {
			if w, winBytes, err = g.merge(key, w, winBytes, now, sync); err != nil {
				return err
			}
		}
		if err := g.addToWindow(key, value, mtime.Time(wv.Timestamp), offset, i, len(windows), w, winBytes, now, sync); err != nil {
			return err
		}
	}
	return nil
}

// addToWindow buffers one element's value in one of its (merged) windows
// and runs the trigger. i of n tells the element's windows apart in the
// buffer.
func (g *windowedGBK) addToWindow(key, value []byte, ts mtime.Time, offset int64, i, n int, w windowing.Window, winBytes []byte, now, sync int64) error {
	old, err := g.load(key, winBytes)
	if err != nil {
		return err
	}
	res := g.s.OnElement(old.st, ts, g.ctx(w, now, sync))
	switch res.Dropped {
	case windowing.NotDropped:
		vk := binary.BigEndian.AppendUint64(g.valuePrefix(key, winBytes), uint64(offset))
		if n > 1 {
			vk = binary.BigEndian.AppendUint32(vk, uint32(i))
		}
		if err := g.t.batch.Set(vk, value, nil); err != nil {
			return err
		}
	case windowing.DroppedLate:
		g.droppedLate++
	case windowing.DroppedClosed:
		g.droppedClosed++
	}
	return g.apply(key, winBytes, w, old, res)
}

// merge merges w into the key's active windows with the host's merging
// (sessions); it returns the window the element belongs to afterwards.
func (g *windowedGBK) merge(key []byte, w windowing.Window, winBytes []byte, now, sync int64) (windowing.Window, []byte, error) {
	active, enc, err := g.activeWindows(key)
	if err != nil {
		return w, nil, err
	}
	if _, ok := enc[w]; !ok {
		active = append(active, w)
		enc[w] = winBytes
	}
	into, err := g.applyMerges(key, windowing.MergeWindows(active), enc, now, sync)
	if err != nil {
		return w, nil, err
	}
	if to, ok := into[w]; ok {
		return to, enc[to], nil
	}
	return w, winBytes, nil
}

// activeWindows returns the key's windows that have state, and the
// encoding of each.
func (g *windowedGBK) activeWindows(key []byte) ([]windowing.Window, map[windowing.Window][]byte, error) {
	prefix := g.t.key(state.WindowState, state.AppendLP(nil, key))
	it, err := g.t.batch.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: state.PrefixEnd(prefix)})
	if err != nil {
		return nil, nil, err
	}
	var active []windowing.Window
	enc := map[windowing.Window][]byte{}
	for it.First(); it.Valid(); it.Next() {
		wb := append([]byte(nil), it.Key()[len(prefix):]...)
		aw, err := g.s.WindowCoder.Decode(wb)
		if err != nil {
			it.Close()
			return nil, nil, err
		}
		active = append(active, aw)
		enc[aw] = wb
	}
	return active, enc, it.Close()
}

// applyMerges carries out merges of the key's windows: each merge's windows
// give their buffered values, and their states merged, to its result. enc
// holds the encoding of every window the merges mention (results are
// encoded when missing). It returns the result of every merged window.
func (g *windowedGBK) applyMerges(key []byte, merges []windowing.Merge, enc map[windowing.Window][]byte, now, sync int64) (map[windowing.Window]windowing.Window, error) {
	into := map[windowing.Window]windowing.Window{}
	for _, m := range merges {
		toBytes, ok := enc[m.To]
		if !ok {
			var err error
			if toBytes, err = g.s.WindowCoder.Encode(m.To); err != nil {
				return nil, err
			}
			enc[m.To] = toBytes
		}
		var states []windowing.WindowState
		var toOld storedWindow
		for _, from := range m.From {
			into[from] = m.To
			fb, ok := enc[from]
			if !ok {
				return nil, fmt.Errorf("group-by-key %s: merging window %v, which is not one of the key's windows", g.t.sub.Root.TransformID, from)
			}
			sw, err := g.load(key, fb)
			if err != nil {
				return nil, err
			}
			states = append(states, sw.st)
			if from == m.To {
				toOld = sw
				continue
			}
			if err := g.moveValues(key, fb, toBytes); err != nil {
				return nil, err
			}
			if err := g.deleteWindow(key, fb, sw); err != nil {
				return nil, err
			}
		}
		res := g.s.Merge(states, g.ctx(m.To, now, sync))
		if err := g.apply(key, toBytes, m.To, toOld, res); err != nil {
			return nil, err
		}
	}
	return into, nil
}

// moveValues moves a window's buffered values to another window of the key,
// keeping their arrival keys (so the merged pane stays in arrival order).
func (g *windowedGBK) moveValues(key, from, to []byte) error {
	lower := g.valuePrefix(key, from)
	it, err := g.t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: state.PrefixEnd(lower)})
	if err != nil {
		return err
	}
	dst := g.valuePrefix(key, to)
	for it.First(); it.Valid(); it.Next() {
		suffix := it.Key()[len(lower):]
		if err := g.t.batch.Set(append(append([]byte(nil), dst...), suffix...), append([]byte(nil), it.Value()...), nil); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	return state.DeleteRange(g.t.batch, lower, state.PrefixEnd(lower))
}

// apply carries out a driver Result for one key and window, in the order
// windowing.Result documents.
func (g *windowedGBK) apply(key, winBytes []byte, w windowing.Window, old storedWindow, res windowing.Result) error {
	for _, p := range res.Panes {
		if err := g.emit(key, winBytes, p); err != nil {
			return err
		}
		if p.ClearAfter {
			if err := g.clearValues(key, winBytes); err != nil {
				return err
			}
		}
	}
	if res.ClearBuffer {
		if err := g.clearValues(key, winBytes); err != nil {
			return err
		}
	}
	if res.Delete {
		if !old.exists {
			return g.clearValues(key, winBytes)
		}
		return g.deleteWindow(key, winBytes, old)
	}
	return g.store(key, winBytes, old, res.State, res.Timers)
}

// emit sends one pane: KV<key, [buffered values...]> in the window, with the
// pane's timestamp and info. Where translate allows (Root.PagedGroups), a
// pane's values past inlineGroupBytes are served in pages (gbkpages.go,
// paneRuns).
func (g *windowedGBK) emit(key, winBytes []byte, p windowing.Pane) error {
	pane, err := windowing.EncodePane(p.Info)
	if err != nil {
		return err
	}
	lower := g.valuePrefix(key, winBytes)
	it, err := g.t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: state.PrefixEnd(lower)})
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint64(make([]byte, 0, 256), state.EventTimeBits(int64(p.Timestamp)))
	out = binary.BigEndian.AppendUint32(out, 1)
	out = append(out, winBytes...)
	out = append(out, pane...)
	out = append(out, key...)
	countAt := len(out)
	out = append(out, 0, 0, 0, 0)
	n := 0
	var paged *pagedGroup
	for it.First(); it.Valid(); it.Next() {
		if g.t.sub.Root.PagedGroups && len(out)-countAt-4 >= inlineGroupBytes {
			if paged, err = paneRuns(g.t.env.DB, it, state.PrefixEnd(lower)); err != nil {
				it.Close()
				return err
			}
			break
		}
		out = append(out, it.Value()...)
		n++
	}
	if err := it.Close(); err != nil {
		return err
	}
	if paged != nil {
		out = pagedIterable(out, countAt, n, g.t.pages.add(paged))
	} else {
		binary.BigEndian.PutUint32(out[countAt:], uint32(n))
	}
	return g.t.route(g.t.sub.Root.Output, out)
}

// fire evaluates every window whose event-time timer the input watermark
// passed (timer < in) or whose processing-time timer is due (timer <= now),
// until none is or it has evaluated Task.maxFiredGroups windows: the rest
// wait for the next cycle (firePending), which the runtime runs without
// waiting for input, so that a cycle's batch and output stay bounded when
// the end of an input makes every window due at once. A window left
// unfired keeps its output hold, so the output watermark waits for it.
func (g *windowedGBK) fire(in, now int64) error {
	limit := g.t.maxFiredGroups()
	if g.merger == nil && !g.s.WindowFn.IsMerging() {
		// Over merging windows a firing is not cut by time: the output
		// watermark would pass the windows fired, and a GroupByKey after
		// this one that merges the windows again (Python's regrouping of
		// sessions, which carry their windows) would close one that a
		// window fired in the next cycle reaches back into, where a
		// firing of them all merges the two (pythontest
		// TestCustomWindowFns at internal_parallelism=1).
		limit = min(limit, g.t.fireLimit())
	}
	fired := 0
	defer func() { g.t.fired(fired) }()
	g.firePending = false
	for round := 0; ; round++ {
		if round > 1000 {
			return fmt.Errorf("group-by-key %s: timers keep firing", g.t.sub.Root.TransformID)
		}
		budget := limit - fired
		if budget <= 0 {
			// The limit: is anything still due?
			more, err := g.anyDue(in, now)
			g.firePending = more
			return err
		}
		due, err := g.due(state.EventTimer, in, budget)
		if err != nil {
			return err
		}
		if now < maxWatermark && len(due) < budget {
			pd, err := g.due(state.ProcTimer, now+1, budget-len(due))
			if err != nil {
				return err
			}
			due = append(due, pd...)
		}
		if len(due) == 0 {
			return nil
		}
		seen := map[string]bool{}
		for _, kw := range due {
			if seen[string(kw)] {
				continue
			}
			seen[string(kw)] = true
			fired++
			key, win, err := state.ReadLP(kw)
			if err != nil {
				return err
			}
			old, err := g.load(key, win)
			if err != nil {
				return err
			}
			if !old.exists {
				continue
			}
			w, err := g.s.WindowCoder.Decode(win)
			if err != nil {
				return err
			}
			res := g.s.OnTimer(old.st, g.ctx(w, now, now))
			// A timer re-armed at an instant already passed would be due
			// again at once: it has just been evaluated (timers are
			// idempotent), so drop it.
			if res.Timers.HasEventTime && int64(res.Timers.EventTime) < in {
				res.Timers.HasEventTime = false
			}
			if res.Timers.HasProcessingTime && int64(res.Timers.ProcessingTime) <= now {
				res.Timers.HasProcessingTime = false
			}
			if err := g.apply(key, win, w, old, res); err != nil {
				return err
			}
		}
	}
}

// anyDue reports whether an event-time timer before in or a processing-time
// timer at or before now is set.
func (g *windowedGBK) anyDue(in, now int64) (bool, error) {
	due, err := g.due(state.EventTimer, in, 1)
	if err != nil || len(due) > 0 || now >= maxWatermark {
		return len(due) > 0, err
	}
	due, err = g.due(state.ProcTimer, now+1, 1)
	return len(due) > 0, err
}

// due returns the key|window of the first limit timers of store before
// upper, in time order.
func (g *windowedGBK) due(store state.Kind, upper int64, limit int) ([][]byte, error) {
	lo := g.t.key(store)
	hi := g.t.key(store, binary.BigEndian.AppendUint64(nil, state.EventTimeBits(upper)))
	floor := g.floor(store)
	lower := floor.Lower(lo)
	if bytes.Compare(lower, hi) >= 0 {
		return nil, nil
	}
	it, err := g.t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	first := upper // nothing live before the first entry found, or before upper
	for it.First(); it.Valid() && len(out) < limit; it.Next() {
		if out == nil {
			first = int64(binary.BigEndian.Uint64(it.Key()[len(lo):]) ^ (1 << 63))
		}
		out = append(out, append([]byte(nil), it.Key()[len(lo)+8:]...))
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	floor.Raise(first)
	return out, nil
}

// earliestHold is the smallest output watermark hold, or the maximum
// watermark when no window holds.
func (g *windowedGBK) earliestHold() (int64, error) {
	lo := g.t.key(state.Hold)
	floor := g.floor(state.Hold)
	it, err := g.t.batch.NewIter(&pebble.IterOptions{LowerBound: floor.Lower(lo), UpperBound: g.t.key(state.Hold + 1)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.First() {
		if err := it.Error(); err != nil {
			return 0, err
		}
		floor.Raise(math.MaxInt64) // no hold at all
		return maxWatermark, nil
	}
	h := int64(binary.BigEndian.Uint64(it.Key()[len(lo):]) ^ (1 << 63))
	floor.Raise(h)
	return h, nil
}

// flushMetrics adds the dropped-element counts to the job's metrics.
func (g *windowedGBK) flushMetrics() {
	var infos []*pipepb.MonitoringInfo
	for _, c := range []struct {
		name string
		n    int64
	}{{"dropped_late_elements", g.droppedLate}, {"dropped_closed_window_elements", g.droppedClosed}} {
		if c.n > 0 {
			infos = append(infos, hostCounter(g.t.sub.Root.TransformID, c.name, c.n))
		}
	}
	g.droppedLate, g.droppedClosed = 0, 0
	g.t.addMetrics(infos)
}
