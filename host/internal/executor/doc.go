// Package executor is the seam between a task and the user code of a stage:
// Executor opens bundles that take batches of encoded windowed elements and
// return outputs per PCollection, metrics, residuals and finalization.
// Two executors implement it: the Fn API harness (package harness; Start
// starts the environments and registers the stages) and WASM modules run
// in-process (PrepareWASM; package wasmabi). Neither knows about Kafka. What
// happens when a non-interruptible WASM bundle overruns its deadline is the
// caller's policy (WASMConfig.OnStuck): only cmd exits the process.
package executor
