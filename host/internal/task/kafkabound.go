package task

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
)

// Bounded Kafka reads (max_num_records, max_read_time; DESIGN.md §5): a
// source task ends when its partition's quota of records is emitted or the
// read's deadline passed; its watermark then jumps to +inf, and the job is
// done once every task reported +inf.
//
// A read of max_num_records N emits exactly N records over all its
// partitions, whichever instance runs which task and however often a task
// restarts: the runtime splits N into per-partition quotas once, at Run
// (ReadBound), and each task keeps how many records it emitted in its
// store (state.SourceCount, changelogged with the rest of its state), so a
// reopened task goes on from the committed count.
//
// A record past the end is not emitted, and must not count as consumed:
// the task remembers the offset of the first such record, which the
// runtime makes the partition's committed offset and stops fetching the
// partition (Task.SourceEnd).

// ReadBound is where the tasks of one bounded Kafka read end, fixed once
// at Run so that every task agrees.
type ReadBound struct {
	// Run names the run that fixed the bound: a count stored by another
	// run (an earlier job under the same application id, whose changelog
	// survived) is not this run's and starts again at zero.
	Run string
	// Quota is how many records each partition emits, by partition; nil:
	// no max_num_records.
	Quota map[int32]int64
	// Deadline is when the read ends (max_read_time after the job started
	// reading); zero: no max_read_time.
	Deadline time.Time
}

// sourceBound is one source task's part of its read's ReadBound.
type sourceBound struct {
	run      string
	quota    int64 // -1: none
	deadline time.Time

	emitted int64 // records emitted in this run, committed or in the open cycle
	stored  int64 // emitted as last written to the batch
	// resume is the offset of the first record not emitted because the
	// read had ended; -1: none yet. pending: not yet taken by SourceEnd.
	resume  int64
	pending bool
}

// newSourceBound loads the task's count of b's run; b nil: unbounded.
func newSourceBound(t *Task, b *ReadBound) (*sourceBound, error) {
	if b == nil {
		return nil, nil
	}
	sb := &sourceBound{run: b.Run, quota: -1, deadline: b.Deadline, resume: -1}
	if b.Quota != nil {
		q, ok := b.Quota[t.partition]
		switch {
		case ok:
			sb.quota = q
		case int(t.partition) >= len(b.Quota):
			// Added to the topic after Run split max_num_records over
			// the partitions it had (0 to len-1): it reads none, as
			// Java's bounded read reads the partitions found at start.
			sb.quota = 0
		default:
			return nil, fmt.Errorf("transform %s: partition %d has no max_num_records quota", t.sub.Root.TransformID, t.partition)
		}
	}
	v, closer, err := t.batch.Get(t.key(state.SourceCount))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return sb, nil
	case err != nil:
		return nil, fmt.Errorf("task %s: reading the source count: %w", t.producer, err)
	}
	defer closer.Close()
	run, rest, err := state.ReadLP(v)
	if err != nil || len(rest) != 8 {
		return nil, fmt.Errorf("task %s: corrupt source count %x", t.producer, v)
	}
	if string(run) == sb.run {
		sb.emitted = int64(binary.BigEndian.Uint64(rest))
		sb.stored = sb.emitted
	}
	return sb, nil
}

// ended reports whether the read of the partition is over at now.
func (b *sourceBound) ended(now time.Time) bool {
	if b == nil {
		return false
	}
	return b.quota >= 0 && b.emitted >= b.quota || !b.deadline.IsZero() && !now.Before(b.deadline)
}

// drop records that rec was not emitted.
func (b *sourceBound) drop(rec *kgo.Record) {
	if b.resume < 0 {
		b.resume = rec.Offset
	}
	b.pending = true
}

// save writes the count to the task's batch if it changed.
//
//	'K' → len run | run | emitted (8 bytes)
func (b *sourceBound) save(t *Task) error {
	if b == nil || b.emitted == b.stored || b.run == "" { // run "": an unbounded read's (drain.go)
		return nil
	}
	v := binary.BigEndian.AppendUint64(state.AppendLP(nil, []byte(b.run)), uint64(b.emitted))
	if err := t.batch.Set(t.key(state.SourceCount), v, nil); err != nil {
		return fmt.Errorf("task %s: recording the source count: %w", t.producer, err)
	}
	b.stored = b.emitted
	return nil
}

// SourceEnd reports, for a bounded Kafka source task that was handed
// records after its read ended (since the last call), the offset of the
// first of them: its partition's committed offset must not pass it, and
// the partition need not be fetched any more. Other tasks report false.
func (t *Task) SourceEnd() (resume int64, ok bool) {
	s, isSource := t.root.(*kafkaSource)
	if !isSource || s.bound == nil || !s.bound.pending {
		return 0, false
	}
	s.bound.pending = false
	return s.bound.resume, true
}
