package state

import (
	"encoding/binary"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/cockroachdb/pebble/v2"
)

// DeleteRange deletes the keys in [lower, upper) of an indexed batch one by
// one. A batch range deletion would be one record instead of several, but
// every later read of an indexed batch fragments all of its range
// deletions again, so a task that clears many windows or states in one
// commit interval would make each read cost as much as all its clears so
// far (measured: 90% of a custom-session GroupByKey's time went there).
//
// It collects at most deleteChunk keys at a time, so a large range (a
// window's state expiring for every key) costs no more memory than that.
func DeleteRange(b *pebble.Batch, lower, upper []byte) error {
	for {
		it, err := b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			return err
		}
		var keys [][]byte
		for it.First(); it.Valid() && len(keys) < deleteChunk; it.Next() {
			keys = append(keys, append([]byte(nil), it.Key()...))
		}
		more := it.Valid()
		if err := it.Close(); err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Delete(k, nil); err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
		// The next chunk starts just past the last key deleted.
		lower = append(keys[len(keys)-1], 0)
	}
}

// deleteChunk is how many keys DeleteRange collects before deleting them.
const deleteChunk = 4096

// maxTime is the largest timestamp (Beam's end of time), in milliseconds.
const maxTime = int64(mtime.MaxTimestamp)

// Floor is a lower bound on the times of the live entries of one
// time-ordered index (keys prefix | EventTimeBits(time) | ...: timers,
// watermark holds). Scans of the index start at it rather than at the
// prefix: an index loses its entries by deletion, and in an LSM a deleted
// key stays behind as a tombstone (in the memtable, then in sstables until
// a compaction reaches the bottom level), so a scan from the prefix walks
// every entry the index ever fired, again at every cycle.
//
// Invariant: no live entry of the index has a time below the floor. Its
// owner keeps it so by calling Wrote for every entry it sets, and Raise
// only with what a scan starting at Lower showed (the time of the first
// live entry, or the scan's upper bound when it found none). A floor
// belongs to one task's view of the store: a task that drops its cycle's
// writes (an aborted cycle) is opened again, with a new floor.
type Floor struct {
	ms  int64
	set bool // false: no bound known, scans start at the prefix
}

// Lower is where a scan of the index under prefix starts.
func (f *Floor) Lower(prefix []byte) []byte {
	lower := append([]byte(nil), prefix...)
	if !f.set {
		return lower
	}
	return binary.BigEndian.AppendUint64(lower, EventTimeBits(f.ms))
}

// Wrote records an entry set at ms.
func (f *Floor) Wrote(ms int64) {
	if f.set && ms < f.ms {
		f.ms = ms
	}
}

// Raise records that a scan from Lower found no live entry before ms.
func (f *Floor) Raise(ms int64) {
	if !f.set || ms > f.ms {
		f.ms, f.set = ms, true
	}
}
