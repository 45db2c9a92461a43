// Package wasmabi runs Beam DoFns compiled to WebAssembly inside the ksrunner
// host, with wazero, behind the same executor seam as the Fn API harness: the
// host hands a stage batches of encoded windowed elements and receives
// encoded outputs per output PCollection plus metrics.
//
// # Host API
//
//	m, err := wasmabi.Compile(ctx, wasm, wasmabi.Config{Name: "words.wasm", CacheDir: dir})
//	inst, err := m.Instantiate(ctx, stageSpec) // one per task, one goroutine
//	b, err := inst.StartBundle(ctx, emit)      // emit(pcoll, windowed values)
//	err = b.Process(data)                      // concatenated windowed values
//	res, err := b.Finish()                     // user metrics
//	err = inst.Close(ctx)
//
// A module is compiled once per job (compiled code is cached on disk under
// Config.CacheDir) and instantiated per task. After any error (a DoFn error or
// panic, a trap, running out of memory, a deadline) the Instance is discarded:
// every later call fails with ErrDiscarded. This matters because wazero
// leaves a trapped module callable, and a later call may "succeed" on corrupt
// guest state.
//
// # ABI version 1
//
// A module is a WASI (preview 1) reactor. All integers the ABI defines are
// little-endian; Beam encodings inside element, window and pane bytes keep
// their own (big-endian) byte order. Addresses are offsets in the module's
// linear memory.
//
// Exports (every function takes and returns i32 only; a status is 0 for
// success, 1 for an error, 2 for a recovered panic):
//
//	memory                         the linear memory
//	_initialize() -> ()            optional; called first (Go runtime start)
//	ksr_abi_version() -> i32       must return 1
//	ksr_result() -> ptr            address of the 16-byte result block
//	ksr_reserve(size) -> ptr       the input buffer, at least size bytes
//	ksr_setup(len) -> status       stage description in input[0:len]; runs Setup
//	ksr_start_bundle() -> status   runs StartBundle
//	ksr_process(n, desc) -> status processes a batch of n elements
//	ksr_finish_bundle() -> status  runs FinishBundle, reports metrics
//	ksr_teardown() -> status       runs Teardown
//
// Compile checks the exports and their signatures ("module X: missing export
// ksr_process"); Instantiate calls _initialize, checks the version ("module X:
// exports ABI version 2, host supports 1"), fetches the result block address
// and calls ksr_setup.
//
// Imports: WASI preview 1 (no files, no environment; stdout and stderr are
// logged and kept for error messages; real clocks; crypto random), and from
// module "ksr":
//
//	log(level, ptr, len)                                            level 0-3: debug, info, warn, error
//	counter(transform, ns_ptr, ns_len, name_ptr, name_len, delta i64)
//	distribution(transform, ns_ptr, ns_len, name_ptr, name_len, count i64, sum i64, min i64, max i64)
//
// transform is an index in the stage description's transform list. Metric
// reports add up into the Result of the bundle that Finish returns; a guest
// aggregates updates itself and reports each touched metric once, from
// ksr_finish_bundle, so the host-call cost is per bundle, not per update.
//
// Memory ownership. The guest owns all of its memory; the host never
// allocates or frees in it. The host writes only into the input buffer, the
// region [ptr, ptr+size) returned by the last ksr_reserve, which the guest
// must keep valid (and not use for anything else) until the next
// ksr_reserve. The host reuses it across calls and asks for more only when a
// batch does not fit. The host reads only the regions named by the result
// block, which stay valid until the next call into the guest. That is the
// whole allocation protocol: one buffer each way, both guest-owned, reused.
//
// Stage description (input of ksr_setup): the stage id, the input
// PCollection id, the list of output PCollection ids (an output index is a
// position in it), and the transforms in topological order, each with its
// transform id, the name of its DoFn in the module, its input PCollection id
// and its (tag, PCollection id) outputs. Strings are a u32 length and bytes,
// lists a u32 count and items. Transforms of one stage are fused inside the
// guest: an element emitted to a PCollection consumed by another transform
// of the stage goes to it directly, and crosses to the host only if the
// PCollection is a stage output.
//
// Input batch (ksr_process(n, desc)). The input buffer holds, from offset 0,
// the batch's windowed values exactly as the host received them (Beam's
// windowed_value encoding: 8-byte timestamp, i32 window count and the windows
// in the window coder's encoding, pane, element in the element coder's nested
// encoding), then, from offset desc (a multiple of 8), n element descriptors
// of 24 bytes:
//
//	0  i64 event timestamp, milliseconds since the Unix epoch
//	8  u32 offset of the windowed value (its timestamp bytes)
//	12 u32 offset of the pane (the windows are [value+8, pane))
//	16 u32 offset of the element bytes (the pane is [pane, element))
//	20 u32 end of the element bytes
//
// The host locates these parts with the Beam Go SDK's coder helpers from the
// input PCollection's wire coder; a guest needs no knowledge of window or
// pane encodings, only of its element coders.
//
// Outputs. During ksr_process the guest appends every output of the batch,
// in one pass, to a guest-owned output buffer of records:
//
//	u32 output index | 1<<31 if a timestamp follows
//	u32 source: index in the batch of the input element it derives from
//	u32 length of the element bytes
//	[i64 event timestamp, milliseconds]
//	element bytes in the output PCollection's element coder (nested)
//
// and on success publishes the buffer in the result block (words: out_ptr,
// out_len, err_ptr, err_len). After the call the host reads the records and
// re-encodes each as a windowed value of its output PCollection: the source
// element's timestamp (or the record's), windows and pane bytes, then the
// element bytes. The host hands each output's windowed values to the bundle's
// emit function as one chunk per batch. Reading all outputs after the call,
// instead of one host call per output, keeps the per-output cost to an
// append on each side (a host call per output measured 2x slower overall).
// ksr_finish_bundle cannot emit in v1 (a Beam FinishBundle output needs an
// explicit window).
//
// Per-call costs are amortised over batches: one ksr_process call per
// Config.BatchBytes of input (1 MiB by default), however many elements.
//
// Errors. A failing status leaves a UTF-8 message in the result block
// (err_ptr, err_len): the DoFn's error (ErrDoFn) or, when the guest recovered
// a panic, its value and stack (ErrPanic). A guest SDK must recover panics
// rather than trap. Anything that escapes as a trap or exit (a wasm trap, a
// fatal error of the guest's runtime such as out of memory or a deadlock, a
// bad host call) becomes ErrTrap with wazero's message and the start and end
// of what the guest wrote to stdout/stderr, where a Go guest prints its
// fatal errors. Every error names the module and the stage; guest messages
// name the transform and DoFn.
//
// Limits. Memory: every instance's linear memory is capped at
// Config.MemoryLimitPages (wazero's WithMemoryLimitPages); growing past it
// fails the guest's allocation (a Go guest then traps, "out of memory"). On
// Linux the memory is a mapping reserved at the cap, grown in place and
// given back to the system when the instance closes (see linearMemory).
// Time: Config.BundleDeadline bounds a bundle from StartBundle to Finish.
// With Config.Interruptible the module is rewritten before compiling
// (package internal/interrupt): its loops count down a budget and call the
// host's ksr.poll every 65536 iterations, which stops a bundle whose
// context is done, past the deadline or cancelled (ErrDeadline, or ErrTrap
// "guest interrupted: context canceled"); a guest asleep in WASI's
// poll_oneoff is woken. That costs about 1.2x of guest time, where wazero's
// WithCloseOnContextDone, which leaves native code for Go at every loop
// header, cost 6-7x. The polls also let the Go scheduler stop the guest's
// goroutine for a garbage collection: native code cannot be preempted, so a
// guest spinning without them stalls every stop-the-world of the process.
// Without Interruptible guest code is not checked: a bundle that returns
// late fails with ErrDeadline, and a watchdog timer per instance reports a
// bundle still running at the deadline to Config.OnStuck (after logging the
// stage and module), since nothing can stop it in-process: the host then
// exits, so Kafka moves the task's partitions to another instance and the
// open transaction aborts. Close stops the watchdog.
//
// Writing DoFns in Go: see package wasmabi/guest, which implements all of
// the above. Other languages implement the exports directly.
package wasmabi
