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
	res, err := cp.FinishCheckpointing(sr.openedAt.Add(sr.checkpointAfter), sr.count)
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
