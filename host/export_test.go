package host

// SetWASMStuckExit replaces what the process does when a non-interruptible
// WASM bundle overruns wasm_bundle_deadline (exit) and returns a func that
// restores it.
func SetWASMStuckExit(f func(msg string)) (restore func()) {
	old := wasmStuckExit
	wasmStuckExit = f
	return func() { wasmStuckExit = old }
}
