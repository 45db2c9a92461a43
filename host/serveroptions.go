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
