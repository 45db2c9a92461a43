package task

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ksrunner/ksrunner/host/internal/state"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/shuffle"
)

// The group-by-key root buffers every value under its key and window in the
// task's store (in runs: one entry per key, window and commit interval), and
// sets an end-of-window timer per key and window. When the
// input watermark passes a window's maximum timestamp, the timer fires: the
// values are read back in arrival order, emitted as one KV<K, Iterable<V>>
// with the ON_TIME pane at the end of the window, and deleted.
//
// Only the default trigger with non-merging windows and no allowed lateness
// reaches here (translate sends the rest to the windowed GroupByKey), so
// each key and window fires exactly once: an element whose window has
// expired (its maximum timestamp is behind the input watermark when it
// arrives) is late and dropped, counted in dropped_late_elements, as
// Beam's model says, instead of making a second pane. Upstream watermarks
// promise none arrives, but a Kafka record out of order by more than the
// source's bound is late by the source's own watermark.

// endOfGlobalWindow is the global window's maximum timestamp.
var endOfGlobalWindow = int64(mtime.EndOfGlobalWindowTime)

// windowMaxTimestamp reads a window's maximum timestamp from its encoding:
// the global window encodes as nothing, an interval window starts with its
// end in Beam's event-time encoding (the maximum timestamp is end-1).
func windowMaxTimestamp(win []byte) (int64, error) {
	switch {
	case len(win) == 0:
		return endOfGlobalWindow, nil
	case len(win) >= 8:
		// The encoding starts with the window's end (exclusive).
		return int64(binary.BigEndian.Uint64(win)^(1<<63)) - 1, nil
	}
	return 0, fmt.Errorf("window encoding of %d bytes", len(win))
}

// buffer takes one GBK input record (an encoded windowed KV) into the
// task's in-memory runs, one per key and window: within a commit interval a
// key's values are appended to one run, and flushBuffered writes each run as
// one state entry (and the key and window's timer once), so the store sees a
// write per key and interval instead of two per value.
func (t *Task) buffer(raw []byte, offset int64) error {
	g := &t.gbk
	codec := g.codec
	if codec == nil {
		codec = t.env.Codecs[t.sub.Root.Output+"#input"]
		if codec == nil {
			codec = t.env.Codecs[t.env.Topics.ByName[t.sub.Input].PCollection]
		}
		g.codec = codec
	}
	wv, err := codec.Next(raw)
	if err != nil {
		return err
	}
	key, value, err := codec.SplitKV(wv.Elem)
	if err != nil {
		return err
	}
	if wv.NWindows == 1 && codec.GlobalWindowOnly() {
		// The global window expires too: once the input watermark has
		// passed its end (the final watermark), its group has fired, and
		// a value after it (at_least_once redelivers the records of a
		// producer's redone cycle after its final watermark) is late. Kept,
		// it would fire a second pane of the window.
		if t.inputWatermark() > endOfGlobalWindow {
			g.droppedLate++
			return nil
		}
		g.add(key, nil, value, offset)
		return nil
	}
	windows, err := codec.SplitWindows(wv)
	if err != nil {
		return err
	}
	in := t.inputWatermark()
	for _, win := range windows {
		maxTs, err := windowMaxTimestamp(win)
		if err != nil {
			return err
		}
		if maxTs < in {
			g.droppedLate++
			continue
		}
		g.add(key, win, value, offset)
	}
	return nil
}

// gbkRuns are a group-by-key task's values of the current commit interval,
// not yet in the state batch.
type gbkRuns struct {
	codec *shuffle.ElementCodec // of the input, once looked up
	runs  map[string]*gbkRun    // by len key | key | len win | win
	full  []fullRun             // runs of this interval that reached maxStoredValue
	kw    []byte                // scratch
	key   []byte                // scratch state key
	// timers indexes the pending end-of-window timers (gbktimers.go).
	timers gbkTimers
	// droppedLate counts the late elements of this cycle (fire adds them
	// to the job's metrics).
	droppedLate int64
	// firePending: the last fire left due groups for the next cycle.
	firePending bool
}

// gbkRun is the values of one key and window, in arrival order, as stored
// under 'B' kw first: repeated { uvarint(offset - first), uvarint(len),
// value }. Each value keeps its record offset so that redelivered records
// can be recognised when the runs are read back (see emitGroup).
type gbkRun struct {
	first int64
	data  []byte
}

func (g *gbkRuns) add(key, win, value []byte, offset int64) {
	g.kw = state.AppendLP(state.AppendLP(g.kw[:0], key), win)
	r := g.runs[string(g.kw)]
	if r == nil {
		if g.runs == nil {
			g.runs = map[string]*gbkRun{}
		}
		// Small at first: a windowed input's groups mostly get one or
		// two values a cycle, and 600,000 of them may be buffered at once.
		r = &gbkRun{first: offset, data: make([]byte, 0, 16)}
		g.runs[string(g.kw)] = r
	}
	if len(r.data) >= maxStoredValue {
		// A run is one changelog record: a full one is kept apart (its key
		// has its own first offset) and a new one starts here.
		g.full = append(g.full, fullRun{kw: string(g.kw), run: r})
		r = &gbkRun{first: offset, data: make([]byte, 0, 16)}
		g.runs[string(g.kw)] = r
	}
	r.data = binary.AppendUvarint(r.data, uint64(offset-r.first))
	r.data = binary.AppendUvarint(r.data, uint64(len(value)))
	r.data = append(r.data, value...)
}

type fullRun struct {
	kw  string
	run *gbkRun
}

// flushBuffered writes the interval's runs, and the timer of each key and
// window, to the state batch. It runs before anything reads the buffer or
// the timers back (fire, earliestTimer).
func (t *Task) flushBuffered() error {
	g := &t.gbk
	if len(g.runs) == 0 {
		return nil
	}
	for _, f := range g.full {
		if err := t.writeRun(f.kw, f.run); err != nil {
			return err
		}
	}
	g.full = g.full[:0]
	// In key order: the batch's skiplist then finds each insert's place
	// next to the previous one's, in cache, rather than at random.
	kws := make([]string, 0, len(g.runs))
	for kw := range g.runs {
		kws = append(kws, kw)
	}
	slices.Sort(kws)
	for _, kw := range kws {
		if err := t.writeRun(kw, g.runs[kw]); err != nil {
			return err
		}
	}
	clear(g.runs)
	return nil
}

// writeRun writes a run, and the timer of its key and window, to the state
// batch.
func (t *Task) writeRun(kw string, r *gbkRun) error {
	g := &t.gbk
	_, _, maxTs, err := splitKeyWindow([]byte(kw))
	if err != nil {
		return err
	}
	// Batch.Set copies key and value, so the scratch key is reused.
	k := append(g.key[:0], t.prefix...)
	k = append(k, byte(state.Buffer))
	k = append(k, kw...)
	k = binary.BigEndian.AppendUint64(k, uint64(r.first))
	g.key = k
	if err := t.batch.Set(k, r.data, nil); err != nil {
		return err
	}
	if g.timers.has(maxTs, kw) {
		return nil // set by an earlier run of the window, not fired yet
	}
	k = append(k[:len(t.prefix)], byte(state.Timer))
	k = binary.BigEndian.AppendUint64(k, state.EventTimeBits(maxTs))
	k = append(k, kw...)
	g.key = k
	if err := t.batch.Set(k, nil, nil); err != nil {
		return err
	}
	g.timers.add(maxTs, kw)
	return nil
}

// earliestTimer is the smallest pending end-of-window timer, or the maximum
// watermark when none is pending: the hold on the output watermark.
func (t *Task) earliestTimer() (int64, error) {
	if err := t.flushBuffered(); err != nil {
		return 0, err
	}
	return t.gbk.timers.earliest(), nil
}

// fire emits the keys and windows whose maximum timestamp the input
// watermark has passed, in key-window order: every due group whose values
// all came in this cycle (takeUnstored: as many as the cycle's input
// holds, from memory) and at most maxFiredGroups groups from the store, the
// earliest windows first. The stored groups left stay due, hold the output
// watermark (earliestTimer) and fire in the next cycles, which the runtime
// runs at once (FirePending): a cycle's state batch, its list of due groups
// and the output in flight stay bounded however many stored groups a
// watermark makes due (the end of a bounded input makes every window of
// every key due at once). Left in memory, the fresh groups would be lost
// by a crash after the cycle commits their input; stored, each would cost
// writes, changelog records and a read back.
func (t *Task) fire(inputWM int64) error {
	fresh, err := t.takeUnstored(inputWM)
	if err != nil {
		return err
	}
	if err := t.flushBuffered(); err != nil {
		return err
	}
	if n := t.gbk.droppedLate; n > 0 {
		t.addMetrics([]*pipepb.MonitoringInfo{hostCounter(t.sub.Root.TransformID, "dropped_late_elements", n)})
		t.gbk.droppedLate = 0
	}
	timers := t.gbk.timers.takeBefore(inputWM, min(t.maxFiredGroups(), t.fireLimit())) // in time order, the timers' store order
	t.fired(len(fresh) + len(timers))
	t.gbk.firePending = t.gbk.timers.earliest() < inputWM
	if len(timers) == 0 && len(fresh) == 0 {
		return nil
	}
	due := slices.Clone(timers)
	for kw := range fresh {
		due = append(due, dueTimer{kw: kw})
	}
	// In store order ('B' is keyed key, then window), not the timers'
	// time order, so that the iterator only moves forward and mostly
	// steps rather than seeks (runCursor): the end of a 10-minute
	// windowed input fires 600,000 groups at once, and a seek per group,
	// back to the first key for each window, took most of a firing's
	// CPU. The order among the groups a cycle fires is free: they all go
	// out in this cycle, before its watermark report.
	slices.SortFunc(due, func(a, b dueTimer) int { return strings.Compare(a.kw, b.kw) })
	// One iterator over the buffered runs for every group: a new iterator
	// per group cost a seek through every level of the store each. It
	// sees the batch as of now; the runs read are deleted after it closes.
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(state.Buffer), UpperBound: t.key(state.Buffer + 1)})
	if err != nil {
		return err
	}
	cur := &runCursor{it: it}
	var stored [][]byte
	for _, d := range due {
		if r := fresh[d.kw]; r != nil {
			err = t.emitUnstored(d.kw, r)
		} else {
			stored, err = t.emitGroup(cur, []byte(d.kw), stored)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	// Point deletions of the runs read, not a range deletion: every range
	// deletion in a batch makes the next iterator on it fragment all of
	// them again, which made firing many keys quadratic.
	for _, k := range stored {
		if err := t.batch.Delete(k, nil); err != nil {
			return err
		}
	}
	k := append([]byte(nil), t.prefix...)
	for _, d := range timers {
		k = append(k[:len(t.prefix)], byte(state.Timer))
		k = binary.BigEndian.AppendUint64(k, state.EventTimeBits(d.maxTs))
		k = append(k, d.kw...)
		if err := t.batch.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// takeUnstored takes out of the interval's buffer the groups that are due
// and whose values all came in this interval (one run, no timer stored:
// nothing of theirs is in the store), for fire to emit straight from
// memory. Written to the state batch, each would cost a run and a timer
// put, their deletions, four changelog records and a read back, all to
// leave nothing behind; a backlog of windowed input (windows that close
// within the cycle that read them) is mostly such groups. Groups with
// stored runs, or a full run kept apart, go the stored way. They are not
// bounded by fireLimit: the cycle's input bounds them, and storing those
// past a limit would cost what they save (`windowed-1m`, whose firing
// cycle's groups are mostly such, took a fifth longer with them stored
// past a fire limit of 1,000).
func (t *Task) takeUnstored(inputWM int64) (map[string]*gbkRun, error) {
	g := &t.gbk
	var split map[string]bool // kws with a full run kept apart
	if len(g.full) > 0 {
		split = make(map[string]bool, len(g.full))
		for _, f := range g.full {
			split[f.kw] = true
		}
	}
	var fresh map[string]*gbkRun
	for kw, r := range g.runs {
		if split[kw] {
			continue
		}
		_, _, maxTs, err := splitKeyWindow([]byte(kw))
		if err != nil {
			return nil, err
		}
		if maxTs >= inputWM || g.timers.has(maxTs, kw) {
			continue
		}
		if fresh == nil {
			fresh = map[string]*gbkRun{}
		}
		fresh[kw] = r
		delete(g.runs, kw)
	}
	return fresh, nil
}

// maxFiredGroups is how many stored groups a cycle fires at most (Env).
func (t *Task) maxFiredGroups() int {
	if t.env.MaxFiredGroups > 0 {
		return t.env.MaxFiredGroups
	}
	return DefaultMaxFiredGroups
}

// fireLimit is how many stored groups (windows, on the windowed path) a
// cycle fires at most (Env.FireLimit; without it, as many as
// maxFiredGroups allows).
func (t *Task) fireLimit() int {
	if t.env.FireLimit != nil {
		return max(1, t.env.FireLimit())
	}
	return math.MaxInt
}

// fired tells the runtime how many groups a firing fired (Env.Fired).
func (t *Task) fired(groups int) {
	if t.env.Fired != nil && groups > 0 {
		t.env.Fired(groups)
	}
}

// FirePending reports whether groups that are due were left for the next
// cycle (fire's limit): the runtime runs it without waiting for input.
func (t *Task) FirePending() bool {
	return t.gbk.firePending || (t.ev != nil && t.ev.gbk != nil && t.ev.gbk.firePending)
}

// emitUnstored emits the group of key-window kw whose values are all in
// run r (takeUnstored).
func (t *Task) emitUnstored(kw string, r *gbkRun) error {
	key, win, maxTs, err := splitKeyWindow([]byte(kw))
	if err != nil {
		return err
	}
	out, countAt := groupHeader(key, win, maxTs)
	last := int64(-1)
	out, n, _, _, err := appendRun(out, r.data, r.first, 0, &last, math.MaxInt)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(out[countAt:], uint32(n))
	return t.route(t.sub.Root.Output, out)
}

// groupHeader starts the encoded KV<key, iterable> of a fired group, one
// pane (first, last, ON_TIME) in window win at its maximum timestamp,
// with a zero count at countAt for the caller to set.
func groupHeader(key, win []byte, maxTs int64) (out []byte, countAt int) {
	out = binary.BigEndian.AppendUint64(make([]byte, 0, 256), state.EventTimeBits(maxTs))
	out = binary.BigEndian.AppendUint32(out, 1)
	out = append(out, win...)
	out = append(out, 0x07) // pane: first, last, ON_TIME, index 0
	out = append(out, key...)
	countAt = len(out)
	return append(out, 0, 0, 0, 0), countAt
}

// splitKeyWindow splits a state reference "len key | key | len win | win"
// into the encoded key and window and the window's maximum timestamp.
func splitKeyWindow(kw []byte) (key, win []byte, maxTs int64, err error) {
	key, rest, err := state.ReadLP(kw)
	if err != nil {
		return nil, nil, 0, err
	}
	if win, _, err = state.ReadLP(rest); err != nil {
		return nil, nil, 0, err
	}
	maxTs, err = windowMaxTimestamp(win)
	return key, win, maxTs, err
}

// emitGroup emits KV<key, [values...]> for one key and window, reading its
// runs with it (an iterator over the task's 'B' range), and returns stored
// with the state keys of the runs it read appended, for the caller to
// delete.
func (t *Task) emitGroup(cur *runCursor, kw []byte, stored [][]byte) ([][]byte, error) {
	it := cur.it
	key, win, maxTs, err := splitKeyWindow(kw)
	if err != nil {
		return stored, err
	}
	lower := t.key(state.Buffer, kw)
	out, countAt := groupHeader(key, win, maxTs)
	// Runs come in the order of their first offsets. A record delivered
	// again after its run was stored (state applied, offsets not committed)
	// shows up in a later run with an offset at or below the last one
	// taken, so it is skipped: every value counts once.
	n, last := 0, int64(-1)
	var paged *pagedGroup
	for valid := cur.seekGE(lower); valid; valid = cur.next() {
		k := it.Key()
		if !bytes.HasPrefix(k, lower) {
			break
		}
		if len(k) != len(lower)+8 {
			continue // a longer key sharing this prefix
		}
		first := int64(binary.BigEndian.Uint64(k[len(lower):]))
		if paged == nil && t.sub.Root.PagedGroups && len(out)-countAt-4 >= inlineGroupBytes {
			paged = &pagedGroup{last: last}
		}
		if paged != nil {
			r, err := t.pagedRun(k, it.Value(), first)
			if err != nil {
				return stored, err
			}
			paged.runs = append(paged.runs, r)
		} else {
			var m int
			out, m, _, _, err = appendRun(out, it.Value(), first, 0, &last, math.MaxInt)
			if err != nil {
				return stored, err
			}
			n += m
		}
		stored = append(stored, append([]byte(nil), k...))
	}
	if err := it.Error(); err != nil {
		return stored, err
	}
	if paged != nil {
		out = pagedIterable(out, countAt, n, t.pages.add(paged))
	} else {
		binary.BigEndian.PutUint32(out[countAt:], uint32(n))
	}
	return stored, t.route(t.sub.Root.Output, out)
}

// runCursor positions an iterator over the 'B' range at the runs of groups
// visited in increasing key order. Invariant: once started, every key
// before the iterator's position is below the lower bound of the next
// group asked for (its groups came earlier in the order, and a group's
// runs share its length-prefixed key-window, which no other group's
// extends), so a position at or past that bound is the group's first run.
// Pebble forgets a seek's position for its own next-seek shortcut once
// Next is called, so stepping is what keeps a forward walk cheap.
type runCursor struct {
	it             *pebble.Iterator
	started, valid bool
}

// maxSteps bounds how many runs of groups not fired seekGE steps over
// before it seeks instead.
const maxSteps = 16

func (c *runCursor) seekGE(lower []byte) bool {
	if c.started {
		for steps := 0; c.valid && bytes.Compare(c.it.Key(), lower) < 0; steps++ {
			if steps == maxSteps {
				c.valid = c.it.SeekGE(lower)
				break
			}
			c.valid = c.it.Next()
		}
		return c.valid
	}
	c.started = true
	c.valid = c.it.SeekGE(lower)
	return c.valid
}

func (c *runCursor) next() bool {
	c.valid = c.it.Next()
	return c.valid
}

// appendRun appends to out the values of a stored run (gbkRun.data) whose
// first value has offset first, from byte pos of the run on, skipping
// values at or below *last, until out holds budget bytes; *last becomes
// the offset of the last one appended. It returns how many it appended,
// the run's byte position after the last value read, and whether it
// stopped at the budget (paged groups read a run a page at a time).
func appendRun(out, run []byte, first int64, pos int, last *int64, budget int) (_ []byte, n, next int, full bool, err error) {
	for b := run[pos:]; len(b) > 0; {
		if len(out) >= budget {
			return out, n, len(run) - len(b), true, nil
		}
		d, l1 := binary.Uvarint(b)
		vl, l2 := uint64(0), 0
		if l1 > 0 {
			vl, l2 = binary.Uvarint(b[l1:])
		}
		if l1 <= 0 || l2 <= 0 || vl > uint64(len(b)-l1-l2) {
			return out, n, 0, false, fmt.Errorf("corrupt buffered run of %d bytes", len(run))
		}
		b = b[l1+l2:]
		if off := first + int64(d); off > *last {
			out = append(out, b[:vl]...)
			n++
			*last = off
		}
		b = b[vl:]
	}
	return out, n, len(run), len(out) >= budget, nil
}

// eventTimeBits is Beam's event-time encoding of ms: shifted so that the
// big-endian bytes sort like the timestamps.
