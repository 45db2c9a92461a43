package host

import "errors"

// TestHooks inject faults into the commit loop and observe restoration, for
// tests of this module and fault-injection tests of programs embedding the
// host. They are installed per server (WithTestHooks); a server without
// them pays one nil check per commit cycle.
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
	// MaxPollRecords, if it returns a positive number, replaces the most
	// records one commit cycle consumes (100,000), to spread small inputs
	// over many cycles.
	MaxPollRecords func() int
}

// ErrAbortCycle makes TestHooks.BeforeCommit abort the commit cycle.
var ErrAbortCycle = errors.New("commit cycle aborted by a test hook")
