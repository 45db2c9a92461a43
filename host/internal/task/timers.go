package task

import (
	"context"
	"fmt"
	"time"
)

// maxTimerRounds bounds how many times one commit fires timers that firing
// timers set again (a looping timer then continues at the next commit).
const maxTimerRounds = 100

// fireTimers delivers due user timers to their stateful stages, each round
// in one bundle per stage, until none is due.
func (t *Task) fireTimers(ctx context.Context, inputWM int64) error {
	if t.user == nil {
		return nil
	}
	byTransform := map[string]*stageRun{}
	for _, sr := range t.stages {
		for _, f := range sr.stage.TimerFamilies {
			byTransform[f.TransformID] = sr
		}
	}
	for round := 0; round < maxTimerRounds; round++ {
		due, err := t.user.DueTimers(inputWM, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		if len(due) == 0 {
			return nil
		}
		for _, d := range due {
			sr := byTransform[d.Family[0]]
			if sr == nil {
				return fmt.Errorf("timer of unknown transform %s", d.Family[0])
			}
			if sr.bundle == nil {
				if err := t.process(ctx, sr, chunk{}); err != nil {
					return err
				}
			}
			if err := sr.bundle.ProcessTimers(d.Family[0], d.Family[1], d.Encoded); err != nil {
				sr.bundle = nil
				return fmt.Errorf("stage %s: timers: %w", sr.stage.ID, err)
			}
		}
		if err := t.flushStages(ctx, true); err != nil {
			return err
		}
	}
	return nil
}
