package host

import "github.com/ksrunner/ksrunner/host/internal/runtime"

// A ServerOption configures a JobServer beyond the job defaults (Options).
type ServerOption func(*serverConfig)

type serverConfig struct {
	onStuckBundle func(msg string)
	hooks         *runtime.Hooks
	// stageDir holds the artifacts staged for the jobs (a worker's: those
	// read from pipeline topics).
	stageDir string
	// status: serve the status page and /metrics (WithStatus); nil: none.
	status *StatusConfig
	// messagesOnly: lines sent as job messages are not logged too
	// (WithMessagesOnly).
	messagesOnly bool
}

// WithStuckBundlePolicy sets what happens when a bundle of a
// non-interruptible WASM guest is still running at wasm_bundle_deadline.
// Nothing can stop such a guest in-process. By default the job is marked
// FAILED with a message naming the stage and module, and the task stays
// blocked in the guest until the process exits. `ksrunner jobserver` passes
// a policy that exits the process, so that Kafka moves the task's partitions
// to another instance and aborts its open transaction.
func WithStuckBundlePolicy(f func(msg string)) ServerOption {
	return func(c *serverConfig) { c.onStuckBundle = f }
}

// WithTestHooks installs fault-injection and observation hooks in every job
// the server runs (see TestHooks).
func WithTestHooks(h TestHooks) ServerOption {
	return func(c *serverConfig) { c.hooks = &h }
}

// WithMessagesOnly makes the server's jobs send what they tell their
// clients (job messages, SDK lines of bundles, warnings and errors) only to
// the message stream, not also to the server's log: for a job server whose
// one client shows the message stream on the terminal the log goes to (the
// in-process server of host/kafkastreams), so that each line shows once.
func WithMessagesOnly() ServerOption {
	return func(c *serverConfig) { c.messagesOnly = true }
}
