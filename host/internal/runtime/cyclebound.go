package runtime

import "time"

// cycleBound sizes each commit cycle's intake by how long the cycles
// before took, so that a slow stage cannot hold a cycle open past the
// transaction timeout.
//
// Why: a cycle takes up to read_max_elements_per_poll elements (250,000 by
// default) and commits only once its tasks have processed them all. A
// DoFn that takes 1 ms an element (a call to an outside service) holds
// the instance's transaction open for a minute at that bound over four
// tasks; past transaction_timeout_ms the broker aborts the transaction,
// the cycle fails with INVALID_PRODUCER_EPOCH, and the redone cycle takes
// as much again: the job never got past its first cycle. So the loop cuts
// each cycle to the bound this type keeps (intake.cycle takes it as its
// soft bound; the option stays the hard one, which bounds memory).
//
// How: the first cycle takes at most initialCycleBound elements. After
// each cycle that took elements, the bound follows the rate the cycle
// showed, aiming a cycle at target: a cycle longer than target sets it to
// what would have taken three quarters of target at that rate; a cycle
// that used half its bound or more and took less than target raises it to
// what would take target, up to the option. Time spent on other work (a
// GroupByKey firing, residuals, a stage's FinishBundle) counts too: it
// shrinks the next cycle, which then runs fast and grows it back.
//
// The stored groups a GroupByKey task fires in a cycle are bounded the
// same way, by a bound of their own (instance.fireBound, at most
// task.DefaultMaxFiredGroups; task.Env.FireLimit): a DoFn that reads the
// groups may be slow where the cycles' input was not, so a task's first
// firing fires initialCycleBound stored groups, not a hundred thousand.
// The tasks fire side by side, so that bound is per task and learns from
// the task that fired the most (groups whose values all came in the cycle
// count as work, though this bound does not limit them: the cycle's input
// does).
//
// Invariants:
//   - 1 <= bound <= the option: a cycle always takes something (the intake
//     hands at least one record), and never more than the option allows.
//   - Only the loop's goroutine touches it.
type cycleBound struct {
	bound  int           // elements the next cycle takes at most
	max    int           // the option: the bound never passes it
	target time.Duration // how long a cycle should take at most
}

// initialCycleBound is the first cycle's bound: small enough that a stage
// of 100 ms an element still commits within the default transaction
// timeout over four tasks (250 elements each; the fire bound's 1,000 are
// a task's, so there a DoFn of up to 50 ms a group), large enough that a
// fast job's first cycle is not wasted (its next takes the option's whole).
const initialCycleBound = 1000

// maxCycleTarget is how long a cycle aims to take at most when the
// transaction timeout allows it (a quarter of it otherwise): the output of
// a slow stage then commits every few seconds, not once a minute.
const maxCycleTarget = 5 * time.Second

// newCycleBound is the bound of an instance whose option is max elements
// a cycle and whose transactions time out after txnTimeout.
func newCycleBound(max int, txnTimeout time.Duration) cycleBound {
	return cycleBound{
		bound:  min(max, initialCycleBound),
		max:    max,
		target: min(maxCycleTarget, txnTimeout/4),
	}
}

// limit is how many elements the next cycle takes at most.
func (b *cycleBound) limit() int { return b.bound }

// observe learns from a cycle that did elements of work (elements taken,
// or groups fired) and lasted took, from its cut to its commit.
func (b *cycleBound) observe(elements int, took time.Duration) {
	if elements <= 0 || took <= 0 {
		return
	}
	at := func(d time.Duration) int { // elements the cycle's rate handles in d
		return int(float64(elements) * float64(d) / float64(took))
	}
	switch {
	case took > b.target:
		b.bound = min(b.max, max(1, at(b.target*3/4)))
	case 2*elements >= b.bound:
		b.bound = min(b.max, max(b.bound, at(b.target)))
	}
}
