package wasmabi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
	"github.com/ksrunner/ksrunner/wasmabi/internal/interrupt"
)

// Version is the ABI version this host supports.
const Version = abi.Version

// Defaults for zero Config fields.
const (
	DefaultMemoryLimitPages = 4096    // 256 MiB
	DefaultBatchBytes       = 1 << 20 // 1 MiB of input per ksr_process call
)

// Errors a caller may test for with errors.Is. Every error carries the module
// name and the stage (when there is one) in its message.
var (
	// ErrABI: the module does not implement ABI v1 (version, exports, imports).
	ErrABI = errors.New("module does not implement the ABI")
	// ErrDoFn: a DoFn (or a lifecycle function) returned an error.
	ErrDoFn = errors.New("DoFn failed")
	// ErrPanic: a DoFn panicked; the guest recovered and reported it.
	ErrPanic = errors.New("DoFn panicked")
	// ErrTrap: the module trapped or exited: a wasm trap, a fatal runtime
	// error of the guest language (out of memory under MemoryLimitPages,
	// deadlock, unrecovered panic), a failed host call.
	ErrTrap = errors.New("module trapped")
	// ErrDeadline: a bundle ran past Config.BundleDeadline.
	ErrDeadline = errors.New("bundle deadline exceeded")
	// ErrDiscarded: the instance failed earlier (or is closed) and refuses
	// further calls.
	ErrDiscarded = errors.New("instance discarded after an earlier error")
)

// Config configures a Module and its instances.
type Config struct {
	// Name identifies the module in errors and logs (e.g. the --stage_wasm
	// file name). Default: "wasm-" and 8 hex digits of the module's SHA-256.
	Name string
	// CacheDir, if set, holds compiled code across processes
	// (wazero.NewCompilationCacheWithDir); use a directory under state_dir.
	CacheDir string
	// MemoryLimitPages bounds each instance's linear memory, in 64 KiB pages.
	// A guest growing past it fails (for Go guests: ErrTrap, "out of memory").
	// Default DefaultMemoryLimitPages.
	MemoryLimitPages uint32
	// Interruptible rewrites the module so that its loops poll the host
	// now and then (package internal/interrupt): a bundle past
	// BundleDeadline (or whose context is cancelled) is stopped inside
	// guest code and fails with ErrDeadline. It costs about 1.2x of guest
	// time, and refuses modules with instructions the rewrite does not
	// know. Without it, guest code is not checked: a bundle that never
	// returns is reported to OnStuck by a watchdog (and stalls the
	// process's garbage collections meanwhile), one that returns late fails
	// with ErrDeadline: leave it off for trusted modules only.
	Interruptible bool
	// BundleDeadline bounds the time from StartBundle to the end of Finish.
	// Zero means no deadline.
	BundleDeadline time.Duration
	// OnStuck is called (from the watchdog's goroutine) when a bundle of a
	// non-interruptible instance is still running at BundleDeadline. The
	// guest call cannot be stopped; the host is expected to exit the process
	// so that Kafka reassigns its tasks. The watchdog also logs an error.
	OnStuck func(StuckBundle)
	// OnBundle, if set, receives executor metrics of every finished bundle.
	OnBundle func(BundleStats)
	// BatchBytes is the amount of input passed to the guest per call.
	// Default DefaultBatchBytes.
	BatchBytes int
	// Logger receives guest logs and stdout/stderr lines. Default
	// slog.Default().
	Logger *slog.Logger
}

// StuckBundle describes a bundle that overran its deadline without returning.
type StuckBundle struct {
	Module, Stage string
	Started       time.Time
	Deadline      time.Duration
}

// BundleStats are executor metrics of one finished bundle.
type BundleStats struct {
	Module, Stage string
	Elements      int64 // input elements
	Outputs       int64 // output elements, all outputs together
	Calls         int64 // ksr_process calls (batches)
	Duration      time.Duration
}

// Module is a compiled WASM module. It is safe for concurrent use; its
// instances are not.
type Module struct {
	name     string
	cfg      Config
	runtime  wazero.Runtime
	cache    wazero.CompilationCache // nil without CacheDir
	compiled wazero.CompiledModule
	hasInit  bool
}

// Compile compiles a module once (per job); Instantiate then runs it per
// task. It checks that the module provides the ABI v1 exports with their
// signatures and imports nothing but the ksr host functions and WASI; the
// ABI version is checked by Instantiate.
func Compile(ctx context.Context, wasm []byte, cfg Config) (_ *Module, err error) {
	if cfg.Name == "" {
		sum := sha256.Sum256(wasm)
		cfg.Name = "wasm-" + hex.EncodeToString(sum[:4])
	}
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Module{name: cfg.Name, cfg: cfg}
	rc := wazero.NewRuntimeConfigCompiler().
		WithMemoryLimitPages(cfg.MemoryLimitPages)
	if cfg.CacheDir != "" {
		if m.cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("wasmabi: module %s: compilation cache: %w", m.name, err)
		}
		rc = rc.WithCompilationCache(m.cache)
	}
	m.runtime = wazero.NewRuntimeWithConfig(ctx, rc)
	defer func() {
		if err != nil {
			_ = m.Close(ctx)
		}
	}()
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, m.runtime); err != nil {
		return nil, fmt.Errorf("wasmabi: module %s: WASI: %w", m.name, err)
	}
	if err := instantiateHost(ctx, m.runtime); err != nil {
		return nil, fmt.Errorf("wasmabi: module %s: host functions: %w", m.name, err)
	}
	if cfg.Interruptible {
		// Cheap interruption: loops poll the host now and then (see package
		// interrupt), instead of wazero's WithCloseOnContextDone, whose exit
		// to Go at every loop header cost guests 6-7x.
		rewritten, ierr := interrupt.Instrument(wasm, abi.ImportModule, abi.ImportPoll)
		if ierr != nil {
			// A module that does not even compile gets wazero's error,
			// which says more than the rewrite's.
			if _, err := m.runtime.CompileModule(ctx, wasm); err != nil {
				return nil, fmt.Errorf("wasmabi: module %s: compile: %w", m.name, err)
			}
			return nil, fmt.Errorf("wasmabi: module %s: making it interruptible: %w (a trusted module can run with Interruptible off, option wasm_interruptible=false)", m.name, ierr)
		}
		wasm = rewritten
	}
	if m.compiled, err = m.runtime.CompileModule(ctx, wasm); err != nil {
		return nil, fmt.Errorf("wasmabi: module %s: compile: %w", m.name, err)
	}
	if err := m.checkExports(); err != nil {
		return nil, fmt.Errorf("wasmabi: module %s: %w: %w", m.name, ErrABI, err)
	}
	return m, nil
}

func (m *Module) checkExports() error {
	if _, ok := m.compiled.ExportedMemories()[abi.ExportMemory]; !ok {
		return fmt.Errorf("missing export %s (memory)", abi.ExportMemory)
	}
	fns := m.compiled.ExportedFunctions()
	names := make([]string, 0, len(abi.ExportParams))
	for name := range abi.ExportParams {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		def, ok := fns[name]
		if !ok {
			return fmt.Errorf("missing export %s", name)
		}
		params := slices.Repeat([]api.ValueType{api.ValueTypeI32}, abi.ExportParams[name])
		if !slices.Equal(def.ParamTypes(), params) || !slices.Equal(def.ResultTypes(), []api.ValueType{api.ValueTypeI32}) {
			return fmt.Errorf("export %s has signature %s, want %s", name,
				signature(def.ParamTypes(), def.ResultTypes()), signature(params, []api.ValueType{api.ValueTypeI32}))
		}
	}
	if def, ok := fns[abi.ExportInitialize]; ok {
		if len(def.ParamTypes()) != 0 || len(def.ResultTypes()) != 0 {
			return fmt.Errorf("export %s must take and return nothing", abi.ExportInitialize)
		}
		m.hasInit = true
	}
	for _, def := range m.compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		switch {
		case mod == wasi_snapshot_preview1.ModuleName:
		case mod == abi.ImportModule && hostFunctions[name] != nil:
		default:
			return fmt.Errorf("imports unknown function %s.%s (the host provides %s.{%s} and %s)", mod, name,
				abi.ImportModule, strings.Join(hostFunctionNames(), ","), wasi_snapshot_preview1.ModuleName)
		}
	}
	return nil
}

func signature(params, results []api.ValueType) string {
	s := func(ts []api.ValueType) string {
		n := make([]string, len(ts))
		for i, t := range ts {
			n[i] = api.ValueTypeName(t)
		}
		return strings.Join(n, ",")
	}
	return "(" + s(params) + ")->(" + s(results) + ")"
}

// Name is the module's name in errors and logs.
func (m *Module) Name() string { return m.name }

// Close releases the compiled code and the runtime, closing any instance
// still open.
func (m *Module) Close(ctx context.Context) error {
	var errs []error
	if m.runtime != nil {
		errs = append(errs, m.runtime.Close(ctx))
	}
	if m.cache != nil {
		errs = append(errs, m.cache.Close(ctx))
	}
	return errors.Join(errs...)
}
