// Package abi holds the constants of the ksrunner WASM ABI shared by the host
// executor (package wasmabi) and the Go guest SDK (package wasmabi/guest). The
// ABI itself is specified in the documentation of package wasmabi; this
// package only names its numbers.
package abi

// Version is the ABI version this host and this guest SDK implement. A module
// reports its version from ExportVersion.
const Version = 1

// Exports a module provides. All functions take and return i32 only.
const (
	ExportMemory       = "memory"
	ExportInitialize   = "_initialize" // optional (reactor initialization); called first
	ExportVersion      = "ksr_abi_version"
	ExportReserve      = "ksr_reserve"
	ExportResult       = "ksr_result"
	ExportSetup        = "ksr_setup"
	ExportStartBundle  = "ksr_start_bundle"
	ExportProcess      = "ksr_process"
	ExportFinishBundle = "ksr_finish_bundle"
	ExportTeardown     = "ksr_teardown"
)

// Host functions a module may import, all from module ImportModule.
const (
	ImportModule       = "ksr"
	ImportLog          = "log"
	ImportCounter      = "counter"
	ImportDistribution = "distribution"
	// ImportPoll is not for guests: the host adds it to an interruptible
	// module (package interrupt) and calls it from every loop header once
	// per interrupt.Budget iterations.
	ImportPoll = "poll"
)

// Status codes returned by ksr_setup, ksr_start_bundle, ksr_process,
// ksr_finish_bundle and ksr_teardown. Any other non-zero value is an error too.
const (
	StatusOK    = 0
	StatusError = 1 // a DoFn (or the guest SDK) returned an error; message in the result block
	StatusPanic = 2 // the guest recovered a panic; message (and stack) in the result block
)

// Result block: ResultSize bytes at the address returned by ksr_result, four
// little-endian u32 words.
const (
	ResultOutPtr = 0
	ResultOutLen = 4
	ResultErrPtr = 8
	ResultErrLen = 12
	ResultSize   = 16
)

// Element descriptor: DescSize bytes per input element, little-endian.
// Offsets are relative to the start of the input buffer.
const (
	DescTimestamp = 0  // i64: event time in milliseconds since the Unix epoch
	DescValue     = 8  // u32: start of the windowed value (its 8 timestamp bytes)
	DescPane      = 12 // u32: start of the pane; the windows are [DescValue+8, DescPane)
	DescElement   = 16 // u32: start of the element bytes; the pane is [DescPane, DescElement)
	DescEnd       = 20 // u32: end of the element bytes
	DescSize      = 24
)

// Output record header: RecordHeaderSize bytes, little-endian u32 words,
// followed by an optional i64 timestamp (when RecordHasTimestamp is set in the
// first word) and Len element bytes.
const (
	RecordOutput       = 0 // u32: output index (bits 0-30) | RecordHasTimestamp
	RecordSource       = 4 // u32: index in the batch of the input element the output derives from
	RecordLen          = 8 // u32: length of the element bytes
	RecordHeaderSize   = 12
	RecordHasTimestamp = 1 << 31
	RecordOutputMask   = RecordHasTimestamp - 1
)

// Log levels for ImportLog.
const (
	LogDebug = 0
	LogInfo  = 1
	LogWarn  = 2
	LogError = 3
)

// ExportParams lists the ABI v1 exports a module must provide and the number
// of i32 parameters of each (every one returns one i32).
var ExportParams = map[string]int{
	ExportVersion:      0,
	ExportReserve:      1,
	ExportResult:       0,
	ExportSetup:        1,
	ExportStartBundle:  0,
	ExportProcess:      2,
	ExportFinishBundle: 0,
	ExportTeardown:     0,
}
