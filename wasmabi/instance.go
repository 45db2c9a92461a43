package wasmabi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// StageSpec describes the stage an Instance runs: transforms of one module
// fused together, one parallel input, outputs leaving the stage.
type StageSpec struct {
	ID string // stage id, for errors and logs
	// Transforms in topological order: each reads Input or an output of an
	// earlier transform. Fused transforms run inside the guest; elements
	// between them never cross to the host.
	Transforms []Transform
	// Input is the PCollection id of the stage's input; InputCoder the id in
	// Coders of its windowed_value coder (translate.Plan.WireCoders[Input]),
	// whose element coder is standard or length-prefixed and whose window
	// coder is the global or interval window coder.
	Input      string
	InputCoder string
	Coders     map[string]*pipepb.Coder
	// Outputs are the PCollection ids leaving the stage (emitted to the host).
	// Outputs of transforms not listed here and not consumed in the stage are
	// dropped by the guest.
	Outputs []string
}

// Transform is a ParDo of the stage, run by a DoFn of the module.
type Transform struct {
	ID      string            // pipeline transform id; metrics are keyed by it
	DoFn    string            // name the DoFn is registered under in the module
	Input   string            // PCollection id
	Outputs map[string]string // local output tag -> PCollection id
}

// Result is what a finished bundle reports.
type Result struct {
	Counters      map[MetricKey]int64
	Distributions map[MetricKey]DistributionValue
}

// MetricKey names a user metric of a transform.
type MetricKey struct {
	Transform, Namespace, Name string
}

// DistributionValue is an aggregated distribution metric.
type DistributionValue struct {
	Count, Sum, Min, Max int64
}

func (d DistributionValue) merge(o DistributionValue) DistributionValue {
	return DistributionValue{Count: d.Count + o.Count, Sum: d.Sum + o.Sum, Min: min(d.Min, o.Min), Max: max(d.Max, o.Max)}
}

// Instance is a module instantiated for one task. Its methods must not be
// called concurrently (the watchdog, which only observes, is the exception).
//
// Invariant: after any error the instance is discarded (err is set) and every
// later call fails with ErrDiscarded: wazero leaves a trapped module callable,
// and a later call could wrongly succeed on corrupt guest state.
type Instance struct {
	m     *Module
	stage StageSpec
	log   *slog.Logger
	out   *guestOutput

	mod                                              api.Module
	mem                                              api.Memory
	reserve, setup, start, process, finish, teardown api.Function
	resultPtr                                        uint32
	inPtr                                            uint32 // guest input buffer, valid while inCap > 0
	inCap                                            int
	stack                                            [2]uint64
	codec                                            *shuffle.ElementCodec
	vals                                             []shuffle.Location // values of the current batch
	chunks                                           [][]byte           // per stage output, reused across batches
	metrics                                          Result             // accumulated by host functions
	bundle                                           *Bundle
	err                                              error // sticky; see the type's invariant
	dog                                              watchdog
}

// Instantiate starts an instance of the module for one task and sets the
// stage up in it (ksr_setup, which runs the DoFns' Setup).
func (m *Module) Instantiate(ctx context.Context, stage StageSpec) (_ *Instance, err error) {
	i := &Instance{m: m, stage: stage}
	i.log = m.cfg.Logger.With("module", m.name, "stage", stage.ID)
	i.out = &guestOutput{log: i.log}
	fail := func(op string, err error) error {
		return fmt.Errorf("wasmabi: module %s, stage %s: %s: %w", m.name, stage.ID, op, err)
	}

	desc, err := stageDescription(&stage)
	if err != nil {
		return nil, fail("stage", err)
	}
	if i.codec, err = shuffle.NewElementCodec(stage.Coders, stage.InputCoder); err != nil {
		return nil, fail("input coder", err)
	}
	i.chunks = make([][]byte, len(stage.Outputs))
	i.resetMetrics()

	mc := wazero.NewModuleConfig().
		WithName(""). // anonymous: many instances per runtime
		WithStartFunctions().
		WithStdout(i.out).WithStderr(i.out).
		WithSysWalltime().WithSysNanotime().WithNanosleep(i.sleep).
		WithRandSource(rand.Reader)
	ctx = context.WithValue(ctx, instanceKey{}, i)
	mctx := experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(newLinearMemory))
	if i.mod, err = m.runtime.InstantiateModule(mctx, m.compiled, mc); err != nil {
		return nil, fail("instantiate", i.classify(ctx, err))
	}
	defer func() {
		if err != nil {
			_ = i.mod.Close(ctx)
		}
	}()
	i.mem = i.mod.Memory()
	if m.hasInit {
		if err := i.mod.ExportedFunction(abi.ExportInitialize).CallWithStack(ctx, i.stack[:]); err != nil {
			return nil, fail(abi.ExportInitialize, i.classify(ctx, err))
		}
	}
	v, err := i.call(ctx, i.mod.ExportedFunction(abi.ExportVersion))
	if err != nil {
		return nil, fail(abi.ExportVersion, err)
	}
	if v != abi.Version {
		return nil, fmt.Errorf("wasmabi: module %s: %w: exports ABI version %d, host supports %d", m.name, ErrABI, v, abi.Version)
	}
	if i.resultPtr, err = i.call(ctx, i.mod.ExportedFunction(abi.ExportResult)); err != nil {
		return nil, fail(abi.ExportResult, err)
	}
	i.reserve = i.mod.ExportedFunction(abi.ExportReserve)
	i.setup = i.mod.ExportedFunction(abi.ExportSetup)
	i.start = i.mod.ExportedFunction(abi.ExportStartBundle)
	i.process = i.mod.ExportedFunction(abi.ExportProcess)
	i.finish = i.mod.ExportedFunction(abi.ExportFinishBundle)
	i.teardown = i.mod.ExportedFunction(abi.ExportTeardown)

	buf, err := i.input(ctx, len(desc))
	if err != nil {
		return nil, fail(abi.ExportReserve, err)
	}
	copy(buf, desc)
	if err := i.callStatus(ctx, i.setup, uint64(len(desc))); err != nil {
		return nil, fail(abi.ExportSetup, err)
	}
	i.dog.init(i)
	return i, nil
}

// sleep is the guest's clock sleep (WASI poll_oneoff, where a Go guest
// waits when all its goroutines sleep). It ends early when the bundle's
// context is done: a guest asleep runs no loop that could poll, and wazero's
// own sleep cannot be interrupted. Woken early, the guest runs on until its
// next poll stops it. It runs on the goroutine calling into the guest, the
// instance's, so reading i.bundle is safe.
func (i *Instance) sleep(ns int64) {
	var done <-chan struct{}
	if b := i.bundle; b != nil {
		done = b.ctx.Done()
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// stageDescription validates the stage's wiring and encodes it for
// ksr_setup.
func stageDescription(s *StageSpec) ([]byte, error) {
	if len(s.Transforms) == 0 {
		return nil, errors.New("no transforms")
	}
	st := abi.Stage{ID: s.ID, Input: s.Input, Outputs: s.Outputs}
	produced := map[string]bool{s.Input: true}
	for _, t := range s.Transforms {
		if !produced[t.Input] {
			return nil, fmt.Errorf("transform %s reads %s, which is neither the stage input nor an output of an earlier transform", t.ID, t.Input)
		}
		at := abi.Transform{ID: t.ID, DoFn: t.DoFn, Input: t.Input}
		for _, tag := range slices.Sorted(maps.Keys(t.Outputs)) {
			at.Outputs = append(at.Outputs, abi.TaggedOutput{Tag: tag, PCollection: t.Outputs[tag]})
			produced[t.Outputs[tag]] = true
		}
		st.Transforms = append(st.Transforms, at)
	}
	for _, o := range s.Outputs {
		if !produced[o] || o == s.Input {
			return nil, fmt.Errorf("stage output %s is not produced by any of its transforms", o)
		}
	}
	return abi.AppendStage(nil, &st), nil
}

func (i *Instance) resetMetrics() {
	i.metrics = Result{Counters: map[MetricKey]int64{}, Distributions: map[MetricKey]DistributionValue{}}
}

// input returns a view of the guest's input buffer of at least n bytes,
// growing it (ksr_reserve) when needed. The view is valid until the next
// call into the guest (memory may grow and move).
func (i *Instance) input(ctx context.Context, n int) ([]byte, error) {
	if n > i.inCap {
		want := max(n, 2*i.inCap, 64<<10)
		ptr, err := i.call(ctx, i.reserve, uint64(want))
		if err != nil {
			return nil, err
		}
		if ptr == 0 {
			return nil, fmt.Errorf("%w: %s(%d) returned 0", ErrTrap, abi.ExportReserve, want)
		}
		i.inPtr, i.inCap = ptr, want
	}
	b, ok := i.mem.Read(i.inPtr, uint32(n))
	if !ok {
		return nil, fmt.Errorf("%w: input buffer [%d, +%d) is outside guest memory (%d bytes)", ErrTrap, i.inPtr, n, i.mem.Size())
	}
	return b, nil
}

// call calls fn (at most 2 i32 arguments, one i32 result).
func (i *Instance) call(ctx context.Context, fn api.Function, args ...uint64) (uint32, error) {
	copy(i.stack[:], args)
	if err := fn.CallWithStack(ctx, i.stack[:]); err != nil {
		return 0, i.classify(ctx, err)
	}
	return uint32(i.stack[0]), nil
}

// callStatus calls an export returning a status and turns a failure status
// into an error with the guest's message.
func (i *Instance) callStatus(ctx context.Context, fn api.Function, args ...uint64) error {
	code, err := i.call(ctx, fn, args...)
	if err != nil {
		return err
	}
	if code == abi.StatusOK {
		return nil
	}
	msg := "(no message)"
	ptr, ok1 := i.mem.ReadUint32Le(i.resultPtr + abi.ResultErrPtr)
	n, ok2 := i.mem.ReadUint32Le(i.resultPtr + abi.ResultErrLen)
	if b, ok3 := i.mem.Read(ptr, n); ok1 && ok2 && ok3 && n > 0 {
		msg = string(b)
	}
	switch code {
	case abi.StatusError:
		return fmt.Errorf("%w: %s", ErrDoFn, msg)
	case abi.StatusPanic:
		return fmt.Errorf("%w: %s", ErrPanic, msg)
	}
	return fmt.Errorf("%w: status %d: %s", ErrDoFn, code, msg)
}

// classify turns an error of a wazero call into ErrDeadline or ErrTrap,
// with the guest's last output (where a Go guest prints a fatal error).
func (i *Instance) classify(ctx context.Context, err error) error {
	var ee *sys.ExitError
	if errors.As(err, &ee) {
		switch ee.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("%w (%v): guest interrupted", ErrDeadline, i.m.cfg.BundleDeadline)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("%w: guest interrupted: %w", ErrTrap, context.Cause(ctx))
		}
	}
	msg := err.Error()
	if tail := strings.TrimSpace(i.out.String()); tail != "" {
		msg += "\nguest output:\n" + tail
	}
	return fmt.Errorf("%w: %s", ErrTrap, msg)
}

// usable returns ErrDiscarded once the instance has failed or closed.
func (i *Instance) usable() error {
	if i.err != nil {
		return fmt.Errorf("wasmabi: module %s, stage %s: %w: %w", i.m.name, i.stage.ID, ErrDiscarded, i.err)
	}
	return nil
}

// fail discards the instance: err becomes sticky, the open bundle ends.
func (i *Instance) fail(op string, err error) error {
	err = fmt.Errorf("wasmabi: module %s, stage %s: %s: %w", i.m.name, i.stage.ID, op, err)
	i.err = err
	if b := i.bundle; b != nil {
		i.dog.disarm()
		b.cancel()
		i.bundle = nil
	}
	i.log.Error("wasm instance failed, discarding it", "err", err)
	return err
}

// StartBundle starts a bundle (ksr_start_bundle). Outputs of the bundle are
// passed to emit as chunks of concatenated windowed values of an output
// PCollection, in the PCollection's wire coder; data is valid only during the
// call. An emit error fails the bundle. ctx bounds the bundle (and, with
// Interruptible, its guest code).
func (i *Instance) StartBundle(ctx context.Context, emit func(pcoll string, data []byte) error) (*Bundle, error) {
	if err := i.usable(); err != nil {
		return nil, err
	}
	if i.bundle != nil {
		return nil, fmt.Errorf("wasmabi: module %s, stage %s: a bundle is already open", i.m.name, i.stage.ID)
	}
	b := &Bundle{i: i, emit: emit, started: time.Now()}
	ctx = context.WithValue(ctx, instanceKey{}, i)
	if d := i.m.cfg.BundleDeadline; d > 0 && i.m.cfg.Interruptible {
		b.ctx, b.cancel = context.WithTimeout(ctx, d)
	} else {
		b.ctx, b.cancel = context.WithCancel(ctx)
	}
	i.bundle = b
	i.resetMetrics()
	i.out.reset()
	i.dog.arm(b.started)
	if err := i.callStatus(b.ctx, i.start); err != nil {
		return nil, i.fail(abi.ExportStartBundle, err)
	}
	return b, nil
}

// Bundle is an open bundle of an Instance.
type Bundle struct {
	i       *Instance
	ctx     context.Context
	cancel  context.CancelFunc
	emit    func(pcoll string, data []byte) error
	started time.Time
	stats   BundleStats
}

// check fails unless b is the instance's open bundle and within its
// deadline.
func (b *Bundle) check(op string) error {
	i := b.i
	if err := i.usable(); err != nil {
		return err
	}
	if i.bundle != b {
		return fmt.Errorf("wasmabi: module %s, stage %s: %s: bundle is finished", i.m.name, i.stage.ID, op)
	}
	if d := i.m.cfg.BundleDeadline; d > 0 && time.Since(b.started) > d {
		return i.fail(op, fmt.Errorf("%w (%v): bundle ran %v", ErrDeadline, d, time.Since(b.started).Round(time.Millisecond)))
	}
	return nil
}

// Process runs data, concatenated windowed values of the stage input in its
// wire coder (whole values only), through the stage: in batches of about
// Config.BatchBytes, one ksr_process call per batch, emitting each batch's
// outputs before the next.
func (b *Bundle) Process(data []byte) error {
	if err := b.check(abi.ExportProcess); err != nil {
		return err
	}
	i := b.i
	for off := 0; off < len(data); {
		vals, end, err := i.codec.Scan(i.vals[:0], data, off, i.m.cfg.BatchBytes)
		i.vals = vals
		if err != nil {
			return i.fail(abi.ExportProcess, fmt.Errorf("input of %d bytes: %w", len(data), err))
		}
		if err := b.batch(data, off, end); err != nil {
			return i.fail(abi.ExportProcess, err)
		}
		if err := b.check(abi.ExportProcess); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// batch runs the values i.vals, which span data[off:end], through one
// ksr_process call and emits the outputs.
func (b *Bundle) batch(data []byte, off, end int) error {
	i := b.i
	descOff := (end - off + 7) &^ 7
	in, err := i.input(b.ctx, descOff+len(i.vals)*abi.DescSize)
	if err != nil {
		return err
	}
	copy(in, data[off:end])
	descs := in[descOff:] // len(i.vals) descriptors long (input), so no bounds checks in the loop
	for k := range i.vals {
		v := &i.vals[k]
		d := (*[abi.DescSize]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(descs)), k*abi.DescSize))
		binary.LittleEndian.PutUint64(d[abi.DescTimestamp:], uint64(v.Timestamp))
		binary.LittleEndian.PutUint32(d[abi.DescValue:], uint32(v.Start-off))
		binary.LittleEndian.PutUint32(d[abi.DescPane:], uint32(v.Pane-off))
		binary.LittleEndian.PutUint32(d[abi.DescElement:], uint32(v.Elem-off))
		binary.LittleEndian.PutUint32(d[abi.DescEnd:], uint32(v.End-off))
	}
	if err := i.callStatus(b.ctx, i.process, uint64(len(i.vals)), uint64(descOff)); err != nil {
		return err
	}
	b.stats.Calls++
	b.stats.Elements += int64(len(i.vals))
	if err := b.collect(data); err != nil {
		return err
	}
	return b.flush()
}

// collect re-encodes the output records of the last call as windowed values
// into the per-output chunks: the source element's header (or its windows
// and pane after an explicit timestamp) followed by the element bytes.
func (b *Bundle) collect(data []byte) error {
	i := b.i
	ptr, ok1 := i.mem.ReadUint32Le(i.resultPtr + abi.ResultOutPtr)
	n, ok2 := i.mem.ReadUint32Le(i.resultPtr + abi.ResultOutLen)
	out, ok3 := i.mem.Read(ptr, n)
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("%w: output [%d, +%d) is outside guest memory", ErrTrap, ptr, n)
	}
	records, err := appendRecords(i.chunks, i.vals, data, out)
	b.stats.Outputs += int64(records)
	return err
}

// appendRecords appends the windowed values of the output records in out to
// chunks (one per stage output): for each, the header of its source element
// (vals index data) and its element bytes. It returns the number of records.
func appendRecords(chunks [][]byte, vals []shuffle.Location, data, out []byte) (int, error) {
	// The records of a batch usually all go to one output: its chunk is
	// kept in c (and stored back when the output changes) rather than
	// loaded and stored per record.
	cur, c := -1, []byte(nil)
	outputs := 0
	for p := 0; p < len(out); {
		if len(out)-p < abi.RecordHeaderSize {
			return outputs, fmt.Errorf("%w: truncated output record at %d", ErrTrap, p)
		}
		h := (*[abi.RecordHeaderSize]byte)(out[p:])
		w := binary.LittleEndian.Uint32(h[abi.RecordOutput:])
		src := binary.LittleEndian.Uint32(h[abi.RecordSource:])
		size := int(binary.LittleEndian.Uint32(h[abi.RecordLen:]))
		p += abi.RecordHeaderSize
		o := int(w & abi.RecordOutputMask)
		if o >= len(chunks) || int(src) >= len(vals) {
			return outputs, fmt.Errorf("%w: output record for output %d, source %d; the stage has %d outputs, the batch %d elements",
				ErrTrap, o, src, len(chunks), len(vals))
		}
		if o != cur {
			if cur >= 0 {
				chunks[cur] = c
			}
			cur, c = o, chunks[o]
		}
		v := &vals[src]
		if w&abi.RecordHasTimestamp != 0 {
			if len(out)-p < 8 {
				return outputs, fmt.Errorf("%w: truncated output record at %d", ErrTrap, p)
			}
			c = binary.BigEndian.AppendUint64(c, uint64(int64(binary.LittleEndian.Uint64(out[p:])))^(1<<63)) // Beam's event-time encoding
			c = append(c, data[v.Start+8:v.Elem]...)
			p += 8
		} else if h, n := v.Elem-v.Start, len(c); h <= 16 && size <= 16 && cap(c)-n >= 32 &&
			len(data)-v.Start >= 16 && len(out)-p >= 16 {
			// Header and element of up to 16 bytes each, the usual case:
			// two fixed-size copies (no memmove calls), trimmed after. The
			// test above puts both copies in range (no bounds checks: this
			// runs per output).
			dst := unsafe.Pointer(unsafe.SliceData(c))
			*(*[16]byte)(unsafe.Add(dst, n)) = *(*[16]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(data)), v.Start))
			*(*[16]byte)(unsafe.Add(dst, n+h)) = *(*[16]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(out)), p))
			c = c[:n+h+size]
			p += size
			outputs++
			continue
		} else {
			c = append(c, data[v.Start:v.Elem]...)
		}
		if len(out)-p < size {
			return outputs, fmt.Errorf("%w: output record of %d bytes at %d overruns the %d-byte output", ErrTrap, size, p, len(out))
		}
		c = append(c, out[p:p+size]...)
		p += size
		outputs++
	}
	if cur >= 0 {
		chunks[cur] = c
	}
	return outputs, nil
}

// flush emits the non-empty output chunks.
func (b *Bundle) flush() error {
	for o, c := range b.i.chunks {
		if len(c) == 0 {
			continue
		}
		b.i.chunks[o] = c[:0]
		if err := b.emit(b.i.stage.Outputs[o], c); err != nil {
			return fmt.Errorf("emit to %s: %w", b.i.stage.Outputs[o], err)
		}
	}
	return nil
}

// Finish finishes the bundle (ksr_finish_bundle, which runs the DoFns'
// FinishBundle and reports the bundle's metrics).
func (b *Bundle) Finish() (*Result, error) {
	if err := b.check(abi.ExportFinishBundle); err != nil {
		return nil, err
	}
	i := b.i
	if err := i.callStatus(b.ctx, i.finish); err != nil {
		return nil, i.fail(abi.ExportFinishBundle, err)
	}
	if err := b.check(abi.ExportFinishBundle); err != nil {
		return nil, err
	}
	i.dog.disarm()
	if i.dog.fired() {
		// The watchdog reported the bundle as stuck; the host is exiting.
		return nil, i.fail(abi.ExportFinishBundle, fmt.Errorf("%w: reported stuck", ErrDeadline))
	}
	b.cancel()
	i.bundle = nil
	res := i.metrics
	i.resetMetrics()
	if f := i.m.cfg.OnBundle; f != nil {
		s := b.stats
		s.Module, s.Stage, s.Duration = i.m.name, i.stage.ID, time.Since(b.started)
		f(s)
	}
	return &res, nil
}

// Close tears the stage down (ksr_teardown, unless the instance failed) and
// releases the instance, stopping its watchdog. Later calls fail with
// ErrDiscarded.
func (i *Instance) Close(ctx context.Context) error {
	i.dog.stop()
	if i.mod == nil {
		return nil
	}
	var err error
	if i.err == nil {
		if b := i.bundle; b != nil {
			b.cancel()
			i.bundle = nil
		}
		if e := i.callStatus(context.WithValue(ctx, instanceKey{}, i), i.teardown); e != nil {
			err = fmt.Errorf("wasmabi: module %s, stage %s: %s: %w", i.m.name, i.stage.ID, abi.ExportTeardown, e)
		}
		i.err = errors.New("instance closed")
	}
	return errors.Join(err, i.mod.Close(ctx))
}

// watchdog reports a bundle of a non-interruptible instance that is still
// running at the deadline. It is a runtime timer (time.AfterFunc): its
// callback runs on its own goroutine only when the deadline passes, so an
// idle or healthy instance costs nothing but a timer reset per bundle.
type watchdog struct {
	i       *Instance
	mu      sync.Mutex
	timer   *time.Timer
	started time.Time // of the watched bundle; zero when none
	stuck   bool
	stopped bool
}

func (w *watchdog) init(i *Instance) { w.i = i }

func (w *watchdog) enabled() bool {
	return w.i != nil && !w.i.m.cfg.Interruptible && w.i.m.cfg.BundleDeadline > 0
}

func (w *watchdog) arm(started time.Time) {
	if !w.enabled() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.started = started
	d := w.i.m.cfg.BundleDeadline - time.Since(started)
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.fire)
	} else {
		w.timer.Reset(d)
	}
}

func (w *watchdog) disarm() {
	if !w.enabled() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = time.Time{}
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.started = time.Time{}
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *watchdog) fired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stuck
}

func (w *watchdog) fire() {
	w.mu.Lock()
	started, stopped := w.started, w.stopped
	if started.IsZero() || stopped { // finished (or closed) meanwhile
		w.mu.Unlock()
		return
	}
	w.stuck = true
	w.mu.Unlock()
	m := w.i.m
	s := StuckBundle{Module: m.name, Stage: w.i.stage.ID, Started: started, Deadline: m.cfg.BundleDeadline}
	w.i.log.Error("wasm bundle stuck past its deadline; the guest cannot be interrupted (Interruptible is off)",
		"running", time.Since(started).Round(time.Millisecond), "deadline", s.Deadline)
	if m.cfg.OnStuck != nil {
		m.cfg.OnStuck(s)
	}
}
