// Package guest is the Go SDK for writing ksrunner DoFns that run as WASM
// modules (ABI v1, see package wasmabi). A module is a package main that
// registers its DoFns in init and is built as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext go build -buildmode=c-shared -o fns.wasm .
//
// For example:
//
//	package main
//
//	import "github.com/ksrunner/ksrunner/wasmabi/guest"
//
//	func init() {
//		guest.Register(guest.FlatMap("Split", guest.String, guest.String,
//			func(line string, emit func(string)) error {
//				for _, w := range strings.Fields(line) {
//					emit(w)
//				}
//				return nil
//			}))
//	}
//
//	func main() {} // required by the toolchain, never called
//
// This package provides every export the ABI requires (via //go:wasmexport),
// so a module needs nothing else. The host calls the reactor's _initialize
// export first, which runs the package initializers and so the Register calls.
//
// A DoFn sees each element as its bytes in the input PCollection's Beam coder
// encoding (nested context) and emits bytes in the output PCollection's coder
// encoding; the coders in this package (Bytes, String, VarInt, Double, Bool,
// KVOf, IterableOf, LengthPrefixed) convert between those bytes and Go values,
// and Map and FlatMap wrap a plain func over decoded values. Outputs inherit
// the event timestamp, windows and pane of the input element they derive from
// (EmitAt overrides the timestamp).
//
// The module is single-threaded: the host never calls into one instance
// concurrently, so DoFns need no locking. Memory handed to a DoFn (element
// bytes, Bytes- and StringRef-decoded values, window and pane bytes) is a
// view of the input batch: valid only during the call that received it (the
// host does not touch the batch while the guest processes it).
//
// # Performance
//
// A Go guest pays for what is cheap natively: every call is a resumable
// state machine in Go's wasm port (arguments and live values pass through
// memory, each jump back goes through the function's dispatch table), and
// its garbage collector is single-threaded. Compiled by wazero, a call of a
// func value costs about 150 machine instructions, a direct call about 95,
// a loop iteration at least 18 (counted with valgrind in the wasmabi
// benchmarks). The SDK keeps its own share per element small: a DoFn made
// by Map or FlatMap runs a whole batch in one call when it is the stage's
// only transform reading the input (a FlatMap from StringRef to strings in
// a small loop of its own), decodes StringRef and Bytes elements under 128
// bytes inline, and hands fn an emit func that writes the output record in
// place, with no allocation or interface call. What remains is the DoFn's
// own code and the call of emit per output. So: prefer StringRef or Bytes
// for input elements (no allocation per element; the value must not
// outlive the call, see StringRef); pass a function with fn's signature
// itself rather than a func literal that calls it (one call less per
// element); avoid allocating per element; and create Counters once (Inc is
// inlined).
//
// The package also builds for other platforms (without the exports) so DoFn
// code and coders can be unit-tested and benchmarked natively.
package guest

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sort"
	"unsafe"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// DoFn is a Beam DoFn. Only Name and Process are required.
//
// One DoFn may serve several transforms of a stage; its lifecycle functions
// then run once per transform.
type DoFn struct {
	// Name is the name the host maps pipeline transforms to (ksrunner's
	// --stage_wasm option). Unique within a module.
	Name string
	// Outputs lists the output tags, main output first; EmitTo's index is a
	// position in it. Empty means a single output whatever its tag: the
	// transform's only output (or none; emits are then dropped).
	Outputs []string

	Setup       func() error
	StartBundle func() error
	// Process handles one element: elem is its encoding in the input
	// PCollection's coder, valid only during the call.
	Process      func(elem []byte, e *Emitter) error
	FinishBundle func() error
	Teardown     func() error

	// fast is how Map and FlatMap run Process with their coders and func
	// specialised to a transform; nil for a DoFn built by hand.
	fast *fastPath
}

var registry = map[string]*DoFn{}

// Register makes fn available to the host under fn.Name. Call it from init.
// It panics on an empty or duplicate name or a nil Process.
func Register(fn DoFn) {
	switch {
	case fn.Name == "":
		panic("guest.Register: DoFn without a name")
	case fn.Process == nil:
		panic("guest.Register: DoFn " + fn.Name + " has no Process func")
	case registry[fn.Name] != nil:
		panic("guest.Register: DoFn " + fn.Name + " registered twice")
	}
	registry[fn.Name] = &fn
}

// Emitter sends a DoFn's outputs. Each transform has its own.
type Emitter struct {
	t       *transform
	scratch []byte // encoding buffer of Emit
}

// Emit encodes v with c and emits it to output out (an index in DoFn.Outputs).
func Emit[T any](e *Emitter, out int, c Coder[T], v T) {
	if out >= 0 && out < len(e.t.routes) {
		if r := &e.t.routes[out]; r.stageOutput >= 0 && len(r.consumers) == 0 {
			// Only the host consumes it: encode straight into the output
			// records.
			switch any(c).(type) {
			case stringCoder, stringRefCoder, bytesCoder:
				// T is string or []byte: read as a string (see directOutput).
				outString(uint32(r.stageOutput), rt.src, *(*string)(unsafe.Pointer(&v)))
			default:
				outValue(uint32(r.stageOutput), rt.src, c, v)
			}
			return
		}
	}
	e.scratch = c.Append(e.scratch[:0], v)
	e.EmitTo(out, e.scratch)
}

// Output emits elem, encoded in the main output's coder, to the main output.
func (e *Emitter) Output(elem []byte) { e.EmitTo(0, elem) }

// EmitTo emits elem, encoded in the output's coder, to output out (an index
// in DoFn.Outputs). elem is copied; the caller may reuse it.
func (e *Emitter) EmitTo(out int, elem []byte) { e.emit(out, 0, false, elem) }

// EmitAt is EmitTo with an explicit event timestamp (milliseconds since the
// Unix epoch); windows and pane are the input element's. In ABI v1 the
// timestamp applies to what reaches the host: a transform fused after this
// one in the same module sees the input element's timestamp.
func (e *Emitter) EmitAt(out int, timestamp int64, elem []byte) { e.emit(out, timestamp, true, elem) }

// Timestamp is the event time of the element being processed, in
// milliseconds since the Unix epoch.
func (e *Emitter) Timestamp() int64 {
	return int64(load64((*[8]byte)(e.desc()[abi.DescTimestamp:])))
}

// Windows are the element's windows in Beam's encoding (big-endian i32 count,
// then each window in the window coder's encoding), valid during the call.
func (e *Emitter) Windows() []byte {
	d := e.desc()
	return rt.in[load32((*[4]byte)(d[abi.DescValue:]))+8 : load32((*[4]byte)(d[abi.DescPane:]))]
}

// Pane is the element's pane in Beam's encoding, valid during the call.
func (e *Emitter) Pane() []byte {
	d := e.desc()
	return rt.in[load32((*[4]byte)(d[abi.DescPane:])):load32((*[4]byte)(d[abi.DescElement:]))]
}

// desc is the descriptor of the element being processed.
func (e *Emitter) desc() *[abi.DescSize]byte {
	return (*[abi.DescSize]byte)(rt.descs[int(rt.src)*abi.DescSize:])
}

func (e *Emitter) emit(out int, ts int64, hasTS bool, elem []byte) {
	if out < 0 || out >= len(e.t.routes) {
		if out == 0 && len(e.t.routes) == 0 {
			return // single-output DoFn on a transform without outputs
		}
		panic(fmt.Sprintf("EmitTo: output index %d out of range (DoFn %s has %d outputs)", out, e.t.fn.Name, len(e.t.routes)))
	}
	r := &e.t.routes[out]
	if r.stageOutput >= 0 {
		outElement(uint32(r.stageOutput), rt.src, ts, hasTS, elem)
	}
	for _, c := range r.consumers {
		// Fused in the guest: the consumer sees the same source element.
		// A timestamp override does not carry over (v1 limitation, see doc).
		if rt.failed != nil {
			return
		}
		rt.transforms[c].processOne(rt.src, elem)
	}
}

// Counter is a Beam counter metric. Updates are attributed to the transform
// whose DoFn is running and reported to the host when the bundle finishes.
type Counter struct {
	ns, name string
	vals     []counterValue // by transform index
}

type counterValue struct {
	v       int64
	touched bool
}

// NewCounter returns the counter namespace/name. Create counters once (in
// init or Setup), not per element.
func NewCounter(namespace, name string) *Counter {
	c := &Counter{ns: namespace, name: name, vals: make([]counterValue, len(rt.transforms))}
	counters = append(counters, c)
	return c
}

// Inc adds n to the counter.
func (c *Counter) Inc(n int64) {
	i := rt.cur
	if i >= len(c.vals) { // only before setup, which sizes vals
		c.vals = append(c.vals, make([]counterValue, i+1-len(c.vals))...)
	}
	v := &c.vals[i]
	v.v += n
	v.touched = true
}

// Distribution is a Beam distribution metric (count, sum, min, max of int64
// values), attributed and reported like a Counter.
type Distribution struct {
	ns, name string
	vals     []distValue
}

type distValue struct{ count, sum, min, max int64 }

// NewDistribution returns the distribution namespace/name.
func NewDistribution(namespace, name string) *Distribution {
	d := &Distribution{ns: namespace, name: name}
	distributions = append(distributions, d)
	return d
}

// Update records v.
func (d *Distribution) Update(v int64) {
	i := rt.cur
	if i >= len(d.vals) {
		d.vals = slices.Grow(d.vals, i+1-len(d.vals))[:i+1]
	}
	dv := &d.vals[i]
	if dv.count == 0 || v < dv.min {
		dv.min = v
	}
	if dv.count == 0 || v > dv.max {
		dv.max = v
	}
	dv.count++
	dv.sum += v
}

var (
	counters      []*Counter
	distributions []*Distribution
)

// Log writes msg to the host's log at the given level (one of the Log*
// constants), attributed to the running transform.
func Log(level int, msg string) { hostLog(int32(level), msg) }

// Log levels.
const (
	LogDebug = abi.LogDebug
	LogInfo  = abi.LogInfo
	LogWarn  = abi.LogWarn
	LogError = abi.LogError
)

// ---- runtime ---------------------------------------------------------------

// rt is the state of the module instance. The host calls one export at a
// time, so no locking.
var rt runtimeState

type runtimeState struct {
	stage      *abi.Stage
	transforms []*transform
	roots      []int // transforms consuming the stage input
	cur        int   // index of the transform whose DoFn is running (metrics)
	// src is the index in the batch of the input element being processed:
	// the source of every output record, the same for every transform of
	// the stage (a fused consumer works on its producer's element).
	src uint32

	in    []byte // input buffer (ksr_reserve); the host writes batches here
	descs []byte // the element descriptors of the current batch, in rt.in
	// out holds the output records of the current call in out[:outN]; all
	// of it is room (len(out) == cap(out)), grown geometrically by outGrow.
	// Records are written in place, without a slice header per append.
	out  []byte
	outN int
	// The emit fast path's view of in and out (setIn, setOut): a string
	// whose data lies at offset off < inShortEnd of in can be read 16
	// bytes at a time, and a record of up to 29 bytes fits at outN <
	// outShortEnd. Both are 0 (no fast path) for buffers too small.
	inBase      uintptr
	inShortEnd  uintptr
	outBase     unsafe.Pointer
	outShortEnd int
	msg         []byte // error message of the last failed call
	// failed is the first error of the current call, set by fused consumers
	// that cannot return it through Emitter.EmitTo.
	failed error
}

type transform struct {
	idx    int
	spec   abi.Transform
	fn     *DoFn
	routes []route // by DoFn output index
	em     Emitter
	// one and batch run the DoFn, bound to this transform, on one element
	// (from a fused producer) or on every element of the batch (the only
	// transform reading the stage input); see bind.
	one   func(elem []byte) error
	batch func(n int) error
}

// route is where one output of a transform goes: to a stage output and/or to
// fused consumers inside the module.
type route struct {
	stageOutput int // index in Stage.Outputs, or -1
	consumers   []int
}

// bind sets t.one and t.batch: the DoFn's specialised versions if Map or
// FlatMap made it (and its Process is still theirs), otherwise loops over
// Process.
func (t *transform) bind() {
	if f := t.fn.fast; f != nil && funcID(t.fn.Process) == f.process {
		t.one, t.batch = f.bind(&t.em)
		return
	}
	process, e := t.fn.Process, &t.em
	t.one = func(elem []byte) error { return process(elem, e) }
	t.batch = func(n int) error {
		for i := range n {
			rt.src = uint32(i)
			if err := process(element(i), e); err != nil {
				return err
			}
			if rt.failed != nil {
				return errFailed
			}
		}
		return nil
	}
}

// errFailed is what a batch func returns when a fused consumer failed (the
// error is rt.failed).
var errFailed = errors.New("a fused transform failed")

// funcID identifies a func value: the address of its closure, distinct for
// every evaluation of a func literal that captures variables.
func funcID[F any](f F) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&f)) }

// element returns the element bytes of the batch's i-th element.
func element(i int) []byte {
	d := (*[abi.DescSize]byte)(rt.descs[i*abi.DescSize:])
	return rt.in[load32((*[4]byte)(d[abi.DescElement:])):load32((*[4]byte)(d[abi.DescEnd:]))]
}

// processOne runs the transform's Process on one element of a fused
// producer. A panic unwinds to process, which reports it against rt.cur,
// the innermost transform running (no defer per element: it is the hot
// path).
func (t *transform) processOne(src uint32, elem []byte) {
	prev := rt.cur
	rt.cur = t.idx
	rt.src = src
	if err := t.one(elem); err != nil && rt.failed == nil {
		if err != errFailed {
			err = fmt.Errorf("%s: %w", t.name(), err)
		}
		rt.failed = err
	}
	rt.cur = prev
}

func (t *transform) name() string {
	return fmt.Sprintf("transform %s (DoFn %s)", t.spec.ID, t.fn.Name)
}

type panicError struct{ msg string }

func (p *panicError) Error() string { return p.msg }

// reserve returns the input buffer, grown to at least size bytes.
func reserve(size int) []byte {
	if size > cap(rt.in) {
		setIn(make([]byte, size))
	}
	setIn(rt.in[:cap(rt.in)])
	return rt.in
}

func setup(desc []byte) error {
	st, err := abi.ParseStage(desc)
	if err != nil {
		return err
	}
	rt.stage = st
	outIdx := map[string]int{}
	for i, o := range st.Outputs {
		outIdx[o] = i
	}
	consumers := map[string][]int{}
	for i, ts := range st.Transforms {
		fn := registry[ts.DoFn]
		if fn == nil {
			names := make([]string, 0, len(registry))
			for n := range registry {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("transform %s: no DoFn registered as %q (registered: %v)", ts.ID, ts.DoFn, names)
		}
		t := &transform{idx: i, spec: ts, fn: fn}
		t.em.t = t
		rt.transforms = append(rt.transforms, t)
		consumers[ts.Input] = append(consumers[ts.Input], i)
	}
	rt.roots = consumers[st.Input]
	for _, t := range rt.transforms {
		pcolls, err := t.outputPCollections()
		if err != nil {
			return err
		}
		for _, p := range pcolls {
			r := route{stageOutput: -1, consumers: consumers[p]}
			if i, ok := outIdx[p]; ok {
				r.stageOutput = i
			}
			t.routes = append(t.routes, r)
		}
	}
	for _, t := range rt.transforms {
		t.bind()
	}
	for _, t := range rt.transforms {
		if err := t.call("Setup", t.fn.Setup); err != nil {
			return err
		}
	}
	// Counters created so far get a slot per transform now (later ones get
	// theirs from NewCounter), so that Inc never grows vals.
	for _, c := range counters {
		for len(c.vals) < len(rt.transforms) {
			c.vals = append(c.vals, counterValue{})
		}
	}
	return nil
}

// outputPCollections maps the DoFn's outputs, by index, to PCollections.
func (t *transform) outputPCollections() ([]string, error) {
	outs := t.spec.Outputs
	if len(t.fn.Outputs) == 0 {
		switch len(outs) {
		case 0:
			return nil, nil
		case 1:
			return []string{outs[0].PCollection}, nil
		}
		return nil, fmt.Errorf("%s: transform has %d outputs, DoFn declares none", t.name(), len(outs))
	}
	if len(outs) != len(t.fn.Outputs) {
		return nil, fmt.Errorf("%s: DoFn declares outputs %v, transform has %d outputs", t.name(), t.fn.Outputs, len(outs))
	}
	res := make([]string, len(t.fn.Outputs))
	for i, tag := range t.fn.Outputs {
		j := slices.IndexFunc(outs, func(o abi.TaggedOutput) bool { return o.Tag == tag })
		if j < 0 {
			return nil, fmt.Errorf("%s: DoFn output tag %q is not an output of the transform", t.name(), tag)
		}
		res[i] = outs[j].PCollection
	}
	return res, nil
}

// call runs a lifecycle func of the transform's DoFn, if set.
func (t *transform) call(what string, f func() error) (err error) {
	if f == nil {
		return nil
	}
	prev := rt.cur
	rt.cur = t.idx
	defer func() {
		rt.cur = prev
		if p := recover(); p != nil {
			err = &panicError{msg: fmt.Sprintf("%s: %s: panic: %v\n\n%s", t.name(), what, p, debug.Stack())}
		}
	}()
	if err := f(); err != nil {
		return fmt.Errorf("%s: %s: %w", t.name(), what, err)
	}
	return nil
}

func startBundle() error {
	for _, t := range rt.transforms {
		if err := t.call("StartBundle", t.fn.StartBundle); err != nil {
			return err
		}
	}
	return nil
}

// process runs the batch of n elements whose descriptors start at
// rt.in[descOff:], writing output records to rt.out.
func process(n, descOff int) (err error) {
	rt.outN = 0
	rt.failed = nil
	rt.cur = 0
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{msg: fmt.Sprintf("%s: panic: %v\n\n%s", rt.transforms[rt.cur].name(), p, debug.Stack())}
		}
	}()
	if descOff < 0 || n < 0 || descOff+n*abi.DescSize > len(rt.in) {
		return fmt.Errorf("batch of %d elements at %d exceeds the %d-byte input buffer", n, descOff, len(rt.in))
	}
	rt.descs = rt.in[descOff : descOff+n*abi.DescSize]
	if len(rt.roots) == 1 {
		// The usual stage: one transform reads the input; it runs the
		// whole batch in one call.
		t := rt.transforms[rt.roots[0]]
		rt.cur = t.idx
		if err := t.batch(n); err != nil {
			if rt.failed != nil {
				return rt.failed
			}
			return fmt.Errorf("%s: %w", t.name(), err)
		}
		return rt.failed
	}
	for i := range n {
		elem := element(i)
		for _, r := range rt.roots {
			rt.transforms[r].processOne(uint32(i), elem)
			if rt.failed != nil {
				return rt.failed
			}
		}
	}
	return nil
}

func finishBundle() error {
	for _, t := range rt.transforms {
		if err := t.call("FinishBundle", t.fn.FinishBundle); err != nil {
			return err
		}
	}
	flushMetrics()
	return nil
}

// flushMetrics reports the bundle's metric updates to the host and resets
// them: one host call per touched (metric, transform).
func flushMetrics() {
	for _, c := range counters {
		for i := range c.vals {
			v := &c.vals[i]
			if v.touched && i < len(rt.transforms) {
				hostCounter(int32(i), c.ns, c.name, v.v)
			}
			*v = counterValue{}
		}
	}
	for _, d := range distributions {
		for i := range d.vals {
			v := &d.vals[i]
			if v.count > 0 && i < len(rt.transforms) {
				hostDistribution(int32(i), d.ns, d.name, v.count, v.sum, v.min, v.max)
			}
			*v = distValue{}
		}
	}
}

func teardown() error {
	var errs []error
	for _, t := range rt.transforms {
		errs = append(errs, t.call("Teardown", t.fn.Teardown))
	}
	return errors.Join(errs...)
}

// status converts the outcome of an export into its status code, storing
// the message of an error in rt.msg. A panic escaping the SDK itself is
// recovered here too, so that it never traps.
func status(f func() error) (code int32) {
	defer func() {
		if p := recover(); p != nil {
			rt.msg = fmt.Appendf(rt.msg[:0], "panic: %v\n\n%s", p, debug.Stack())
			code = abi.StatusPanic
		}
	}()
	err := f()
	if err == nil {
		return abi.StatusOK
	}
	rt.msg = append(rt.msg[:0], err.Error()...)
	var pe *panicError
	if errors.As(err, &pe) {
		return abi.StatusPanic
	}
	return abi.StatusError
}
