package runtime

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// cycleWatch reports a commit cycle that does not end. The instance's loop
// names the step it is in (enter); a goroutine of run's (watch) warns when
// one step has lasted limit, and again at every further limit, naming the
// step. Under exactly_once limit is transaction_timeout_ms: a cycle that
// outlives it cannot commit, as the coordinator aborts its transaction. A
// user's DoFn that takes that long, a produce that the brokers never
// acknowledge or a rebalance callback that waits is then visible in the
// job's messages and log, not only as output that stopped.
//
// The restore of assigned tasks (inside a poll) is not reported: it says
// how far it got itself (restoreTasks).
type cycleWatch struct {
	step  atomic.Pointer[cycleStep]
	now   func() time.Time
	limit time.Duration
	why   string // what a cycle that long means, for the warning
	warn  func(string)
}

type cycleStep struct {
	name  string
	since time.Time
	quiet bool // not reported (a restore)
}

// newCycleWatch is an instance's watch: its limit is transaction_timeout_ms
// under either guarantee (at_least_once has no transaction, but a cycle
// that long is as much a stall), and it warns in the log and the job's
// messages.
func newCycleWatch(cfg Config) *cycleWatch {
	limit := cfg.transactionTimeout()
	why := fmt.Sprintf("a cycle that outlives transaction_timeout_ms %v cannot commit: the coordinator aborts its transaction and the cycle is redone", limit)
	if !cfg.ExactlyOnce {
		why = fmt.Sprintf("its input's offsets commit only when it ends; warned every %v, transaction_timeout_ms", limit)
	}
	return &cycleWatch{now: time.Now, limit: limit, why: why, warn: func(msg string) {
		cfg.Logger.Warn(msg)
		if cfg.Warning != nil {
			cfg.Warning(msg)
		}
	}}
}

// enter records that the loop starts step name now.
func (w *cycleWatch) enter(name string) {
	if w == nil { // an instance a test built without newInstance
		return
	}
	w.step.Store(&cycleStep{name: name, since: w.now()})
}

// enterQuiet is enter for a step that reports its own progress.
func (w *cycleWatch) enterQuiet(name string) {
	if w == nil {
		return
	}
	w.step.Store(&cycleStep{name: name, since: w.now(), quiet: true})
}

// Steps of the loop (instance.run), as the warning names them.
const (
	stepPoll      = "polling for records"
	stepRestore   = "restoring the state of assigned tasks"
	stepHandle    = "handling the polled records (the SDK runs the bundles)"
	stepPrepare   = "closing the cycle's bundles and firing what is due"
	stepFlush     = "flushing the cycle's records to the brokers"
	stepEnd       = "ending the cycle's transaction"
	stepHanging   = "looking for hanging transactions on the partitions this process wrote"
	stepRebalance = "aborting the transaction after a rebalance and waiting for the new generation"
)

// check warns if the current step has lasted limit more than when it was
// last reported (reported: the step and its length then), and returns
// what to pass next time.
func (w *cycleWatch) check(last *cycleStep, reported time.Duration) (*cycleStep, time.Duration) {
	s := w.step.Load()
	if s == nil || s.quiet {
		return s, 0
	}
	if s != last {
		reported = 0
	}
	d := w.now().Sub(s.since)
	if d < reported+w.limit {
		return s, reported
	}
	w.warn(fmt.Sprintf("the instance's commit cycle has been %s for %v (%s)", s.name, d.Round(time.Second), w.why))
	return s, d
}

// watch checks every tick until ctx ends.
func (w *cycleWatch) watch(ctx context.Context, tick time.Duration) {
	if w == nil {
		return
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var last *cycleStep
	var reported time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		last, reported = w.check(last, reported)
	}
}
