package task

import (
	"context"
	"testing"
	"time"
)

// TestStealBoardPick: which running bundle a task done with its work takes
// part of.
func TestStealBoardPick(t *testing.T) {
	now := time.Unix(1000, 0)
	thief, a, b := &Task{}, &Task{}, &Task{}
	k := stealKey{sub: 1, stage: 0}
	for _, tc := range []struct {
		name    string
		running []*runningSplit
		wm      int64 // the thief's reported watermark
		key     stealKey
		want    int           // index in running, -1: none
		retry   time.Duration // with none: when one may be taken
	}{
		{"none running", nil, minWatermark, k, -1, 0},
		{"its own", []*runningSplit{{task: thief, openedAt: now.Add(-time.Second), wm: minWatermark}}, minWatermark, k, -1, 0},
		{"another's", []*runningSplit{{task: a, openedAt: now.Add(-time.Second), wm: minWatermark}}, minWatermark, k, 0, 0},
		{"another stage", []*runningSplit{{task: a, openedAt: now.Add(-time.Second), wm: minWatermark}}, minWatermark, stealKey{sub: 1, stage: 1}, -1, 0},
		{"just opened", []*runningSplit{{task: a, openedAt: now.Add(-time.Millisecond), wm: minWatermark}}, minWatermark, k, -1, minStealAge - time.Millisecond},
		{"the older of two just opened", []*runningSplit{
			{task: a, openedAt: now.Add(-time.Millisecond), wm: minWatermark},
			{task: b, openedAt: now.Add(-10 * time.Millisecond), wm: minWatermark},
		}, minWatermark, k, -1, minStealAge - 10*time.Millisecond},
		{"one old enough, one just opened", []*runningSplit{
			{task: a, openedAt: now.Add(-time.Second), wm: minWatermark},
			{task: b, openedAt: now.Add(-time.Millisecond), wm: minWatermark},
		}, minWatermark, k, 0, 0},
		{"just opened, thief reported past it", []*runningSplit{{task: a, openedAt: now.Add(-time.Millisecond), wm: 5}}, 6, k, -1, 0},
		{"split enough", []*runningSplit{{task: a, openedAt: now.Add(-time.Second), wm: minWatermark, taken: maxStealsPerBundle}}, minWatermark, k, -1, 0},
		{"thief reported past it", []*runningSplit{{task: a, openedAt: now.Add(-time.Second), wm: 5}}, 6, k, -1, 0},
		{"thief reported as far", []*runningSplit{{task: a, openedAt: now.Add(-time.Second), wm: 6}}, 6, k, 0, 0},
		{"thief done", []*runningSplit{{task: a, openedAt: now.Add(-time.Second), wm: 6}}, maxWatermark, k, -1, 0},
		{"the youngest", []*runningSplit{
			{task: a, openedAt: now.Add(-time.Second), wm: minWatermark},
			{task: b, openedAt: now.Add(-100 * time.Millisecond), wm: minWatermark},
		}, minWatermark, k, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			board := NewStealBoard()
			for _, r := range tc.running {
				board.add(k, r)
			}
			var before int
			if tc.want >= 0 {
				before = tc.running[tc.want].taken
			}
			got, retry := board.pick(tc.key, thief, tc.wm, now)
			switch {
			case retry != tc.retry:
				t.Fatalf("retry in %v, want %v", retry, tc.retry)
			case tc.want < 0 && got != nil:
				t.Fatalf("picked a bundle of %p, want none", got.task)
			case tc.want >= 0 && got != tc.running[tc.want]:
				t.Fatalf("picked %+v, want %+v", got, tc.running[tc.want])
			case got != nil && got.taken != before+1:
				t.Fatalf("taken %d after a pick, want %d", got.taken, before+1)
			}
		})
	}
	t.Run("taken off", func(t *testing.T) {
		board := NewStealBoard()
		r := &runningSplit{task: a, openedAt: now.Add(-time.Second), wm: minWatermark}
		off := board.add(k, r)
		off()
		if got, _ := board.pick(k, thief, minWatermark, now); got != nil {
			t.Fatalf("picked a bundle taken off the board")
		}
	})
}

// TestWaitForSteal: a task waiting for a bundle to grow old enough to take
// from wakes when a bundle leaves the board (it may have been that one),
// not only when the wait is over.
func TestWaitForSteal(t *testing.T) {
	board := NewStealBoard()
	k := stealKey{sub: 1, stage: 0}
	off := board.add(k, &runningSplit{task: &Task{}, openedAt: time.Now(), wm: minWatermark})
	left := board.leaving()
	woke := make(chan time.Duration, 1)
	go func() {
		waited, err := waitForSteal(context.Background(), time.Minute, left)
		if err != nil {
			t.Error(err)
		}
		woke <- waited
	}()
	off()
	select {
	case waited := <-woke:
		if waited >= time.Minute {
			t.Errorf("waited %v, the whole wait", waited)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a bundle left the board and the waiting task did not wake")
	}
	if _, err := waitForSteal(context.Background(), time.Millisecond, board.leaving()); err != nil {
		t.Fatalf("a wait with no bundle leaving: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := waitForSteal(ctx, time.Minute, board.leaving()); err == nil {
		t.Fatal("a wait whose context is done returned no error")
	}
}
