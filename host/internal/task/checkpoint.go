package task

import (
	"fmt"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/executor"
)

// Checkpoints the host asks for. A splittable DoFn that never checkpoints
// itself (a read of a large file, a bounded source of one restriction)
// would keep its bundle, and so its task's commit cycle, open until its
// restriction is done: longer than the transaction timeout for a long
// one, and no cycle of the instance could commit. So a bundle of a stage
// whose input goes to a splittable DoFn (translate.Stage.Checkpointable),
// still running checkpointAfter after it opened, is checkpointed: the SDK
// stops the running restriction where it is (a ProcessBundleSplit at
// fraction 0) and returns the rest, which the task keeps and resumes
// exactly as a self-checkpoint's residual (residuals.go).
//
// The checkpoints are timed from the commit cycle's start (Env.CycleStart),
// not from each bundle's: a task given many elements of such a stage in
// one cycle (restrictions of a file read, of a split source) would
// otherwise run each for checkpointAfter, and the cycle for their sum,
// past the transaction timeout. So every such bundle of a cycle is
// checkpointed at the cycle's start plus checkpointAfter, and an element
// whose bundle would open after that is not begun: it is kept as a
// residual (deferElements) and resumed in the next cycle. The tasks of an
// instance so stop their splittable work together, and their cycle
// commits then, rather than when the task given the most work is done
// with all of it while the others wait with their residuals.
//
// Invariants:
//   - Only a bundle of one input element is checkpointed, and such a stage
//     gets one element per bundle (appendPending, bundleDone): with several,
//     the split also answers which input elements the SDK will not process
//     (the channel split), and the Go SDK (2.77) was seen to answer an
//     element it then processed whole, which kept again would be output
//     twice. A bundle of one element has nothing after it to leave
//     unprocessed; should an SDK answer that it did not begin the element
//     (first residual element 0), the element is kept again
//     (keepUnprocessed, from the bundle's kept input, stageRun.input).
//   - A checkpoint cannot starve its DoFn: a checkpointed bundle that
//     emitted nothing doubles the stage's checkpointAfter, up to
//     Env.MaxCheckpointAfter (half the transaction timeout), since a DoFn
//     that takes longer than checkpointAfter to reach its first position
//     would otherwise be stopped before it, every time; a bundle that
//     emitted, or was not checkpointed, sets it back to
//     Env.CheckpointAfter.
//   - A split request whose answer is lost fails the bundle (see
//     harness.Bundle.FinishCheckpointing): the SDK may have split it.

// finishBundle finishes sr's bundle b, checkpointing it if it runs long.
func (t *Task) finishBundle(sr *stageRun, b executor.Bundle) (executor.Result, error) {
	cp, ok := b.(executor.Checkpointer)
	if sr.checkpointAfter <= 0 || !ok || sr.count != 1 {
		sr.input = nil
		return b.Finish()
	}
	defer t.offerWork(sr, b)()
	res, err := cp.FinishCheckpointing(t.checkpointAt(sr), sr.count)
	if err != nil {
		sr.input = nil
		return res, err
	}
	switch {
	case res.Checkpointed && !sr.output:
		sr.checkpointAfter = min(2*sr.checkpointAfter, max(t.env.MaxCheckpointAfter, t.env.CheckpointAfter))
	default:
		sr.checkpointAfter = t.env.CheckpointAfter
	}
	if res.Checkpointed {
		t.env.Logger.Debug("checkpointed a splittable DoFn's bundle", "task", t.producer, "stage", sr.stage.ID,
			"residuals", len(res.Residuals), "unprocessed_from", res.Unprocessed, "elements", sr.count)
	}
	return res, nil
}

// keepUnprocessed keeps, as residuals of no delay, the input elements of
// sr's bundle that a checkpoint left unprocessed, and drops the bundle's
// kept input.
func (t *Task) keepUnprocessed(sr *stageRun, res executor.Result) error {
	input := sr.input
	sr.input, sr.output = nil, false
	if !res.Checkpointed || res.Unprocessed < 0 {
		return nil
	}
	if t.draining() {
		t.env.Logger.Info("draining: input a checkpoint left unprocessed dropped", "stage", sr.stage.ID, "elements", sr.count-res.Unprocessed)
		return nil
	}
	codec := t.env.Codecs[sr.stage.Input]
	i := 0
	for _, data := range input {
		for len(data) > 0 {
			wv, err := codec.Next(data)
			if err != nil {
				return fmt.Errorf("stage %s: input kept for a checkpoint: %w", sr.stage.ID, err)
			}
			if i >= res.Unprocessed {
				if err := t.keepResidual(sr, executor.Residual{Element: wv.Raw}); err != nil {
					return err
				}
			}
			data = data[len(wv.Raw):]
			i++
		}
	}
	if i < res.Unprocessed {
		return fmt.Errorf("stage %s: a checkpoint left elements from %d unprocessed, of a bundle of %d", sr.stage.ID, res.Unprocessed, i)
	}
	return nil
}

// checkpointAfter is when a bundle of stage s is first checkpointed; zero:
// never (a stage that does not run a splittable DoFn on its input).
func checkpointAfter(env *Env, checkpointable bool) time.Duration {
	if !checkpointable {
		return 0
	}
	return env.CheckpointAfter
}

// checkpointAt is when sr's open bundle is checkpointed: checkpointAfter
// after the cycle's start, or after the bundle's own without one, and not
// before minCheckpointAge after the bundle opened.
func (t *Task) checkpointAt(sr *stageRun) time.Time {
	return later(t.checkpointTime(sr.openedAt, sr.checkpointAfter), sr.openedAt.Add(minCheckpointAge))
}

// minCheckpointAge is how long a bundle runs before the host checkpoints
// it, even one that opened after its cycle's checkpoint time (the bundle
// every stage begins in each cycle). A splittable DoFn that checkpoints
// itself soon (periodic.Impulse, a read that returns when caught up) has
// usually ended its bundle by then, and a split is not sent: the Go SDK
// (2.77) reads a ManualWatermarkEstimator for a split while the DoFn may
// be writing it, with no lock between them, which the race detector
// reported in a test process that hosts its LOOPBACK worker (cmd/ksrunner
// TestClientCommands, ci56). A long bundle loses these milliseconds once.
const minCheckpointAge = 50 * time.Millisecond

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkpointTime is when a bundle opened at opened is checkpointed, after
// is its stage's checkpointAfter.
func (t *Task) checkpointTime(opened time.Time, after time.Duration) time.Time {
	at := opened.Add(after)
	if t.env.CycleStart != nil {
		if start := t.env.CycleStart(); !start.IsZero() && start.Add(after).Before(at) {
			at = start.Add(after)
		}
	}
	return at
}

// pastCheckpoint says whether an element handed to sr now would begin
// after the cycle's checkpoint time, so is kept for the next cycle
// instead (deferElements). Not while draining, which drops residuals: the
// element is processed (its restriction truncated) in this cycle. Not for
// a stage whose input is sorted by time. The caller begins one bundle of
// sr in every cycle regardless (stageRun.begun), so that a stage that gets
// its turn only after the checkpoint time still progresses: that bundle
// is checkpointed at once, and if it emitted nothing its checkpointAfter
// doubles.
func (t *Task) pastCheckpoint(sr *stageRun) bool {
	if sr.checkpointAfter <= 0 || sr.sorted || t.env.CycleStart == nil || t.draining() {
		return false
	}
	start := t.env.CycleStart()
	return !start.IsZero() && !t.now().Before(start.Add(sr.checkpointAfter))
}

// deferElements keeps the elements of c, input of sr not begun, as
// residuals of no delay: the next cycle resumes them.
func (t *Task) deferElements(sr *stageRun, c chunk) error {
	codec := t.env.Codecs[sr.stage.Input]
	for data := c.data; len(data) > 0; {
		wv, err := codec.Next(data)
		if err != nil {
			return fmt.Errorf("stage %s: input kept for the next cycle: %w", sr.stage.ID, err)
		}
		if err := t.keepResidual(sr, executor.Residual{Element: wv.Raw}); err != nil {
			return err
		}
		data = data[len(wv.Raw):]
	}
	sr.deferred += c.elements
	return nil
}
