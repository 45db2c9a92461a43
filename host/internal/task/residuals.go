package task

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
)

// Residuals of self-checkpoints. A splittable DoFn that checkpoints returns
// the rest of its work as residuals; the task keeps each in its state batch
// (so in its changelog, with the cycle's output and offsets) and resumes it,
// as input of its stage in a new bundle, in a later commit cycle once its
// requested delay has passed. Never in the cycle that made it: that cycle's
// bundle finalizers run only after its commit, and a DoFn may checkpoint
// until its finalizer has run (Beam's test_register_finalizations).
//
// Store layout, after the task prefix:
//
//	'r' stage | seq → resume time (8, Unix ms) | hold (8, ms) | encoded windowed value
//
// Invariants:
//   - t.residuals mirrors the 'r' keys of the task's view of the store (the
//     committed store and t.batch) in seq order: every Set and Delete of
//     such a key goes through keepResidual and resumeResiduals. A task that
//     drops its batch (Abort) is opened again, and reloads the mirror.
//   - seq is above every stored key's: keys are unique, in the order the
//     residuals were made.
//   - While a residual is pending, the task's output watermark is at most
//     its hold (residualHold): the SDK's estimate of the residual's output
//     watermark, else its element's timestamp, and always below the
//     maximum, so a bounded job does not end with work left (the job ends
//     when every task reported the maximum).
//   - A residual made in the open cycle (committed false) is not resumed in
//     it.
//   - Draining drops residuals instead (drain.go): those made while
//     draining are never stored, those stored are deleted at the next
//     PrepareCommit.

// pendingResidual is a stored residual, without its element.
type pendingResidual struct {
	key       []byte
	stage     *stageRun
	resumeAt  int64 // Unix ms
	hold      int64
	committed bool // stored by a committed cycle
}

// residualHeader is the length of a stored residual's value before its
// element.
const residualHeader = 16

// maxResidualBytes bounds a residual's element: it is one changelog record,
// which Kafka refuses over about 1 MB (see maxStoredValue).
const maxResidualBytes = 1<<20 - 4<<10

// loadResiduals reads the task's stored residuals into t.residuals.
func (t *Task) loadResiduals() error {
	lower := t.key(state.Residual)
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: state.PrefixEnd(lower)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != len(lower)+9 || len(v) < residualHeader {
			return fmt.Errorf("task %s: a stored residual with a %d-byte key and a %d-byte value: the store is corrupt", t.producer, len(k), len(v))
		}
		idx := k[len(lower)]
		if int(idx) >= len(t.stages) {
			return fmt.Errorf("task %s: a stored residual of stage #%d, and the sub-topology has %d stages: the store is not this job's", t.producer, idx, len(t.stages))
		}
		t.residuals = append(t.residuals, pendingResidual{
			key:       append([]byte(nil), k...),
			stage:     t.stages[idx],
			resumeAt:  int64(binary.BigEndian.Uint64(v)),
			hold:      int64(binary.BigEndian.Uint64(v[8:])),
			committed: true,
		})
		t.residualSeq = max(t.residualSeq, binary.BigEndian.Uint64(k[len(k)-8:])+1)
	}
	return it.Error()
}

// keepResidual stores a residual of sr's bundle, to resume after its delay.
func (t *Task) keepResidual(sr *stageRun, r executor.Residual) error {
	if len(r.Element) > maxResidualBytes {
		return fmt.Errorf("stage %s: a residual of %d bytes (a splittable DoFn's checkpoint: element and restriction); a residual is kept in one changelog record, at most %d bytes", sr.stage.ID, len(r.Element), maxResidualBytes)
	}
	wv, err := t.wholeElement(sr, r.Element)
	if err != nil {
		return fmt.Errorf("stage %s: a residual: %w", sr.stage.ID, err)
	}
	hold := wv.Timestamp
	if r.Estimated {
		hold = r.OutputWatermark
	}
	// Below the maximum: a task reporting it is done (see the invariants).
	hold = min(hold, maxWatermark-1)
	resumeAt := t.now().Add(max(r.Delay, 0)).UnixMilli()
	k := t.key(state.Residual, []byte{sr.idx}, binary.BigEndian.AppendUint64(nil, t.residualSeq))
	v := binary.BigEndian.AppendUint64(make([]byte, 0, residualHeader+len(r.Element)), uint64(resumeAt))
	v = binary.BigEndian.AppendUint64(v, uint64(hold))
	if err := t.batch.Set(k, append(v, r.Element...), nil); err != nil {
		return fmt.Errorf("task %s: storing a residual of stage %s: %w", t.producer, sr.stage.ID, err)
	}
	t.residualSeq++
	t.residuals = append(t.residuals, pendingResidual{key: k, stage: sr, resumeAt: resumeAt, hold: hold})
	return nil
}

// wholeElement decodes raw, a residual the SDK returned for sr's input,
// which must be exactly one element of the stage's input coder: the rest of
// an SDF's work is resumed, or taken by another task, as such an element.
func (t *Task) wholeElement(sr *stageRun, raw []byte) (wv shuffle.WindowedValue, err error) {
	wv, err = t.env.Codecs[sr.stage.Input].Next(raw)
	if err != nil {
		return wv, err
	}
	if len(wv.Raw) != len(raw) {
		return wv, fmt.Errorf("%d bytes after its element", len(raw)-len(wv.Raw))
	}
	return wv, nil
}

// resumeResiduals hands every committed residual whose resume time has
// passed to its stage as input, deleting it from the store in the cycle's
// batch; draining, it deletes every residual instead.
func (t *Task) resumeResiduals() error {
	if len(t.residuals) == 0 {
		return nil
	}
	if t.draining() {
		for _, r := range t.residuals {
			if err := t.batch.Delete(r.key, nil); err != nil {
				return fmt.Errorf("task %s: dropping a residual: %w", t.producer, err)
			}
		}
		t.env.Logger.Info("draining: stored residuals of a splittable DoFn dropped", "task", t.producer, "residuals", len(t.residuals))
		t.residuals = nil
		return nil
	}
	now := t.now().UnixMilli()
	keep := t.residuals[:0]
	for _, r := range t.residuals {
		if !r.committed || r.resumeAt > now {
			keep = append(keep, r)
			continue
		}
		v, closer, err := t.batch.Get(r.key)
		if err != nil {
			return fmt.Errorf("task %s: reading a residual of stage %s: %w", t.producer, r.stage.stage.ID, err)
		}
		elem := append([]byte(nil), v[residualHeader:]...)
		closer.Close()
		if err := t.batch.Delete(r.key, nil); err != nil {
			return fmt.Errorf("task %s: deleting a residual of stage %s: %w", t.producer, r.stage.stage.ID, err)
		}
		t.mu.Lock()
		r.stage.appendPending(elem)
		t.mu.Unlock()
	}
	clear(t.residuals[len(keep):])
	t.residuals = keep
	return nil
}

// residualHold is the least hold of the pending residuals, or the maximum
// watermark when none is pending.
func (t *Task) residualHold() int64 {
	hold := maxWatermark
	for _, r := range t.residuals {
		hold = min(hold, r.hold)
	}
	return hold
}

// commitResiduals records that the cycle's residuals are committed.
func (t *Task) commitResiduals() {
	for i := range t.residuals {
		t.residuals[i].committed = true
	}
}

// ResumeAt is when the task's first pending residual is due (at once when
// draining, which drops them); ok is false when none is pending. The
// instance's loop calls it between cycles, so that it polls no longer than
// that.
func (t *Task) ResumeAt() (at time.Time, ok bool) {
	if len(t.residuals) == 0 {
		return time.Time{}, false
	}
	if t.draining() {
		return t.now(), true
	}
	first := t.residuals[0].resumeAt
	for _, r := range t.residuals[1:] {
		first = min(first, r.resumeAt)
	}
	return time.UnixMilli(first), true
}
