package task

import (
	"context"
	"fmt"
	"sync"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/host/internal/executor"
)

// Work taken from a busy task. The restrictions of a splittable DoFn go to
// the tasks by size (spread.go), but the tasks do not get through them
// equally fast: near the end of a job, or of a cycle's share of work, some
// tasks are done while one still runs a long restriction, and the
// instance's cores idle. So a task done with its cycle's input (in
// PrepareCommit, after its last bundle) asks the SDK to split a running
// bundle of the same stage of another task of its instance at half of
// what it has left (Beam's dynamic work rebalancing), and processes the
// rest itself, in the same cycle.
//
// Invariants:
//   - Both tasks are of one sub-topology on one instance, so the output
//     goes to the same topics, and their cycle's writes (output, state,
//     offsets) commit or abort in one transaction: if it aborts, the
//     victim's input element is read again whole and the thief's output of
//     it is gone with the transaction.
//   - A task takes work only before it reports a watermark past the
//     victim's: the taken work's output is the victim's output, which is
//     not behind the victim's reported watermark, so not behind the
//     thief's. A task that reported the maximum (done) takes nothing.
//   - Only stages without user state, timers or sorted input take part: the
//     rest of a restriction carries nothing else. A stage gated for side
//     inputs does (gate.go): the victim's element was released once the
//     instance's side-input watermarks passed its windows, and the thief's
//     gate reads the same watermarks, which only rise, so the rest goes on
//     at once, and reads the same side inputs from the instance's store. Nor
//     a stage whose DoFn has checkpointed itself (stageRun.selfCheckpoints):
//     it cuts its restrictions into short calls already, and a split would
//     only add calls (eostest TestSDFResumeDelay counts them).
//   - The split's rest is the thief's alone: the victim's Result does not
//     hold it (executor.Splitter). A split the SDK declines moved nothing.
//   - A task takes work only while the cycle's checkpoint time is more
//     than minStealLead away, and at most maxStealsPerBundle times from one
//     bundle, so that the splits, each halving what is left, end.

// minStealLead is how long before the cycle's checkpoint time a task may
// still take work: a split and a bundle cost about a millisecond each.
const minStealLead = 20 * time.Millisecond

// minStealAge is how long a bundle runs before its work may be taken: the
// point is a long restriction, and a bundle about to end would only be cut
// into more DoFn calls (an SDK given a split before it began the bundle's
// element also waits for it).
const minStealAge = 50 * time.Millisecond

// maxStealWait bounds how long in all a task done with its cycle's work
// waits for other tasks' bundles to become old enough to take from.
const maxStealWait = 2 * minStealAge

// waitForSteal waits d, or until a bundle leaves the board (the one the
// caller waits to take from may be done: nothing left to wait for), or
// ctx is done. It returns how long it waited.
func waitForSteal(ctx context.Context, d time.Duration, left <-chan struct{}) (time.Duration, error) {
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-left:
	case <-ctx.Done():
		return time.Since(start), context.Cause(ctx)
	}
	return time.Since(start), nil
}

// maxStealsPerBundle bounds the splits taken from one bundle.
const maxStealsPerBundle = 4

// MetricWorkTaken counts, on a splittable DoFn's transform, the splits a
// task took from another task's running bundle (namespace "ksrunner").
const MetricWorkTaken = "rebalanced_splits"

// StealBoard lists the running bundles of splittable DoFns of an
// instance's tasks (Env.Steals), for the tasks done with their work.
type StealBoard struct {
	mu      sync.Mutex
	running map[stealKey][]*runningSplit
	// left is closed (and replaced) when a bundle leaves the board.
	left chan struct{}
}

// NewStealBoard is an empty board, one per instance.
func NewStealBoard() *StealBoard {
	return &StealBoard{running: map[stealKey][]*runningSplit{}, left: make(chan struct{})}
}

// leaving is closed once a bundle now on the board leaves it.
func (b *StealBoard) leaving() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

// stealKey is a stage of a sub-topology.
type stealKey struct {
	sub   int
	stage byte
}

// runningSplit is a bundle of one element of a splittable DoFn, running.
type runningSplit struct {
	task     *Task
	split    executor.Splitter
	element  []byte // the bundle's input element
	openedAt time.Time
	wm       int64 // the task's reported watermark
	taken    int   // splits taken from it
}

// add lists a running bundle; the returned func takes it off.
func (b *StealBoard) add(k stealKey, r *runningSplit) func() {
	b.mu.Lock()
	b.running[k] = append(b.running[k], r)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		list := b.running[k]
		for i, x := range list {
			if x == r {
				list[i] = list[len(list)-1]
				list[len(list)-1] = nil
				b.running[k] = list[:len(list)-1]
				close(b.left)
				b.left = make(chan struct{})
				break
			}
		}
	}
}

// pick chooses a running bundle of stage k for thief, whose reported
// watermark is wm, and counts the split against it; nil if none is open
// to one. It takes the youngest bundle: for restrictions of about one
// size, the one with the most left. With none, retryIn > 0 is how long
// until a bundle now too young (minStealAge) may be taken.
func (b *StealBoard) pick(k stealKey, thief *Task, wm int64, now time.Time) (best *runningSplit, retryIn time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.running[k] {
		if r.task == thief || r.wm < wm || r.taken >= maxStealsPerBundle {
			continue
		}
		if age := now.Sub(r.openedAt); age < minStealAge {
			if retryIn == 0 || minStealAge-age < retryIn {
				retryIn = minStealAge - age
			}
			continue
		}
		if best == nil || r.openedAt.After(best.openedAt) {
			best = r
		}
	}
	if best != nil {
		best.taken++
		retryIn = 0
	}
	return best, retryIn
}

// stealable says whether sr's bundles may give and take work.
func (t *Task) stealable(sr *stageRun) bool {
	return t.env.Steals != nil && sr.checkpointAfter > 0 && !sr.sorted &&
		!sr.stage.Stateful && len(sr.families) == 0
}

// offerWork lists sr's open bundle b, of one element, on the board while
// it finishes; the returned func takes it off.
func (t *Task) offerWork(sr *stageRun, b executor.Bundle) func() {
	s, ok := b.(executor.Splitter)
	if !ok || !t.stealable(sr) || sr.selfCheckpoints || sr.count != 1 || len(sr.input) != 1 {
		return func() {}
	}
	return t.env.Steals.add(stealKey{t.sub.ID, sr.idx}, &runningSplit{
		task: t, split: s, element: sr.input[0], openedAt: sr.openedAt, wm: t.reportedWM,
	})
}

// stealWork takes part of another task's running bundle for each stage of
// t that is done with its cycle's input; it reports whether it took any,
// now pending input of the stage. Taking none, retryIn > 0 is how long
// until a running bundle becomes old enough to take from, and left is
// closed if one leaves the board before: the caller waits for either and
// asks again, as its cycle cannot commit before that bundle's task is done
// anyway.
func (t *Task) stealWork() (took bool, retryIn time.Duration, left <-chan struct{}, err error) {
	if t.env.Steals == nil || t.draining() {
		return false, 0, nil, nil
	}
	left = t.env.Steals.leaving()
	for _, sr := range t.stages {
		t.mu.Lock()
		busy := len(sr.pending) > 0
		t.mu.Unlock()
		if !t.stealable(sr) || sr.bundle != nil || busy {
			continue
		}
		now := t.now()
		lead := t.checkpointTime(now, sr.checkpointAfter).Sub(now)
		if lead < minStealLead {
			continue
		}
		victim, wait := t.env.Steals.pick(stealKey{t.sub.ID, sr.idx}, t, t.reportedWM, now)
		if victim == nil {
			if wait > 0 && wait < lead-minStealLead && (retryIn == 0 || wait < retryIn) {
				retryIn = wait
			}
			continue
		}
		split, ok, err := victim.split.Split(0.5, 1)
		if err != nil {
			return took, 0, nil, fmt.Errorf("stage %s: taking work from task %s: %w", sr.stage.ID, victim.task.producer, err)
		}
		if !ok {
			continue
		}
		var elems [][]byte
		if split.Unprocessed == 0 {
			elems = append(elems, victim.element) // not begun: all of it
		}
		for _, r := range split.Residuals {
			if _, err := t.wholeElement(sr, r.Element); err != nil {
				return took, 0, nil, fmt.Errorf("stage %s: work taken from task %s: %w", sr.stage.ID, victim.task.producer, err)
			}
			elems = append(elems, r.Element)
		}
		t.mu.Lock()
		for _, e := range elems {
			sr.appendPending(e)
		}
		t.mu.Unlock()
		t.addMetrics([]*pipepb.MonitoringInfo{hostCounter(sr.stage.Transforms[0], MetricWorkTaken, 1)})
		t.env.Logger.Debug("took part of another task's splittable work", "task", t.producer, "from", victim.task.producer,
			"stage", sr.stage.ID, "elements", len(elems))
		took = true
	}
	if took {
		retryIn = 0
	}
	return took, retryIn, left, nil
}
