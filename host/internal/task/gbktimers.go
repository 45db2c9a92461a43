package task

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/host/internal/state"
)

// gbkTimers is the in-memory index of a group-by-key task's pending
// end-of-window timers: the 'T' keys (maxTs | kw) its store and its cycle's
// batch hold together. Firing and the output watermark's hold read it
// instead of iterating the 'T' range: a fired timer is deleted, and in an
// LSM a deleted key stays behind as a tombstone (in the memtable, then in
// the sstables until a compaction reaches the bottom), so a range scan
// from the start of 'T' at every cycle walked every timer fired since —
// with 2,000 keys per 1 s window that was a third of an instance's CPU.
//
// Invariants (the store and its changelog stay the truth; this is a cache
// of them):
//   - The index holds exactly the 'T' keys visible through the task's
//     batch (the committed store plus this cycle's writes): writeRun adds
//     a timer only together with its batch Set, fire removes one only
//     together with its batch Delete, and nothing else writes 'T'.
//   - It is built from the store when the task opens (New, after any
//     restore from the changelog). An aborted cycle drops the task and the
//     runtime opens a new one from the store (Abort, then New), so the
//     index never outlives writes that did not commit; a committed cycle
//     applies the batch, after which the store holds what the index says.
//   - Because the index says which timers exist, writeRun writes a timer
//     key only when it is new: a run written every cycle no longer rewrites
//     (and logs to the changelog) its window's timer each time.
type gbkTimers struct {
	byTime map[int64]map[string]struct{} // window maximum timestamp → kws
	times  []int64                       // keys of byTime, ascending
}

// has reports whether the timer of kw (whose window ends at maxTs) is
// pending.
func (x *gbkTimers) has(maxTs int64, kw string) bool {
	_, ok := x.byTime[maxTs][kw]
	return ok
}

// add records the timer of kw; the caller has written it to the batch.
func (x *gbkTimers) add(maxTs int64, kw string) {
	set := x.byTime[maxTs]
	if set == nil {
		if x.byTime == nil {
			x.byTime = map[int64]map[string]struct{}{}
		}
		set = map[string]struct{}{}
		x.byTime[maxTs] = set
		i, _ := slices.BinarySearch(x.times, maxTs)
		x.times = slices.Insert(x.times, i, maxTs)
	}
	set[kw] = struct{}{}
}

// earliest is the smallest pending timer, or maxWatermark when none is.
func (x *gbkTimers) earliest() int64 {
	if len(x.times) == 0 {
		return maxWatermark
	}
	return x.times[0]
}

// dueTimer is a timer that fires: its window's maximum timestamp and its
// key and window (len key | key | len win | win).
type dueTimer struct {
	maxTs int64
	kw    string
}

// takeBefore removes and returns at most limit of the timers before upTo
// (exclusive), the earliest first: every timer of a time, in the store's
// order ('T' maxTs | kw, so by time, then by kw's bytes), the order a range
// scan of 'T' gave, so output order does not depend on the index; of a
// time with more timers than limit leaves, an arbitrary part, sorted. The
// caller deletes each from the batch.
func (x *gbkTimers) takeBefore(upTo int64, limit int) []dueTimer {
	var out []dueTimer
	n := 0
	for _, ts := range x.times {
		if ts >= upTo || len(out) >= limit {
			break
		}
		start := len(out)
		set := x.byTime[ts]
		whole := len(set) <= limit-len(out)
		for kw := range set {
			if len(out) >= limit {
				break
			}
			out = append(out, dueTimer{maxTs: ts, kw: kw})
			if !whole {
				delete(set, kw)
			}
		}
		slices.SortFunc(out[start:], func(a, b dueTimer) int { return strings.Compare(a.kw, b.kw) })
		if !whole {
			break
		}
		delete(x.byTime, ts)
		n++
	}
	x.times = x.times[n:]
	return out
}

// len is how many timers are pending.
func (x *gbkTimers) len() int {
	n := 0
	for _, s := range x.byTime {
		n += len(s)
	}
	return n
}

// loadTimers builds the index from the task's store: the one scan of 'T',
// when the task opens.
func (t *Task) loadTimers() error {
	lower := t.key(state.Timer)
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: t.key(state.Timer + 1)})
	if err != nil {
		return err
	}
	t.gbk.timers = gbkTimers{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(lower):]
		if len(k) < 8 {
			it.Close()
			return fmt.Errorf("task %s: timer key of %d bytes", t.producer, len(k))
		}
		t.gbk.timers.add(int64(binary.BigEndian.Uint64(k)^(1<<63)), string(k[8:]))
	}
	return it.Close()
}
