package host

import "github.com/ksrunner/ksrunner/host/internal/runtime"

// TestHooks inject faults into the commit loop and observe restoration, for
// tests of this module and fault-injection tests of programs embedding the
// host. They are installed per server (WithTestHooks); a server without
// them pays one nil check per commit cycle. See the fields' comments.
type TestHooks = runtime.Hooks

// ErrAbortCycle makes TestHooks.BeforeCommit abort the commit cycle.
var ErrAbortCycle = runtime.ErrAbortCycle
