package host

import (
	"errors"
	"sync/atomic"
)

// TestHooks inject faults into the commit loop and observe restoration. They
// exist for tests (this module's and fault-injection tests of programs
// embedding the host); a process without hooks pays one atomic load per
// commit cycle.
type TestHooks struct {
	// BeforeCommit runs in every commit cycle that consumed records, after
	// the cycle's records (outputs, watermarks, changelog) were produced and
	// flushed to the broker, before the transaction (at_least_once: the
	// state and offsets) commits. ErrAbortCycle aborts the cycle as a failed
	// transaction would; any other error fails the instance.
	BeforeCommit func(records int) error
	// Restored runs after a task's state was restored from its changelog,
	// with the number of changelog records replayed.
	Restored func(subTopology int, partition int32, records int)
	// MaxPollRecords, if positive, replaces the most records one commit
	// cycle consumes (100,000), to spread small inputs over many cycles.
	MaxPollRecords int
}

// ErrAbortCycle makes TestHooks.BeforeCommit abort the commit cycle.
var ErrAbortCycle = errors.New("commit cycle aborted by a test hook")

var testHooks atomic.Pointer[TestHooks]

// SetTestHooks installs h for every instance of the process and returns a
// func that restores the previous hooks.
func SetTestHooks(h TestHooks) (restore func()) {
	old := testHooks.Swap(&h)
	return func() { testHooks.Store(old) }
}
