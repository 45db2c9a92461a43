// Package task runs one sub-topology of a Plan for one partition of its
// input topic: a Task takes the records the runtime polled (Handle), routes
// each through its root (root.go: one type per root kind) and its stages'
// executors, produces outputs, watermark reports and its changelog through
// task.Env, and at each commit cycle fires what the input watermark allows,
// closes every bundle (PrepareCommit), then applies its state once the
// runtime committed (CommitState, Finalize) or drops it (Abort).
//
// A task owns its slice of the store (every key starts with its
// state.TaskPrefix) and its in-memory state; it never reaches the instance
// except through Env, so it can be tested with an in-memory store and
// hand-made records.
package task
