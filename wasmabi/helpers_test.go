package wasmabi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	beamexec "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// testDir holds the test guest module and the compilation cache shared by
// all tests of the package run.
var testDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wasmabi-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var builds struct {
	mu   sync.Mutex
	wasm map[string][]byte
}

// guestModule builds testdata/guest with GOOS=wasip1 once per test binary.
func guestModule(tb testing.TB) []byte { return buildModule(tb, "./testdata/guest") }

// buildModule builds the Go guest package pkg (relative to this directory)
// as a WASI reactor, once per test binary.
func buildModule(tb testing.TB, pkg string) []byte {
	tb.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if w, ok := builds.wasm[pkg]; ok {
		return w
	}
	out := filepath.Join(testDir, fmt.Sprintf("module%d.wasm", len(builds.wasm)))
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building %s: %v\n%s", pkg, err, msg)
	}
	w, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	if builds.wasm == nil {
		builds.wasm = map[string][]byte{}
	}
	builds.wasm[pkg] = w
	return w
}

// compile compiles wasm with the shared cache; the module closes with tb.
func compile(tb testing.TB, wasm []byte, cfg Config) *Module {
	tb.Helper()
	if cfg.Name == "" {
		cfg.Name = "testguest"
	}
	cfg.CacheDir = filepath.Join(testDir, "cache")
	if cfg.Logger == nil && !testing.Verbose() {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := Compile(context.Background(), wasm, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func instantiate(tb testing.TB, m *Module, s StageSpec) *Instance {
	tb.Helper()
	i, err := m.Instantiate(context.Background(), s)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { i.Close(context.Background()) })
	return i
}

func testCoders() map[string]*pipepb.Coder {
	c := func(urn string, comps ...string) *pipepb.Coder {
		return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: comps}
	}
	return map[string]*pipepb.Coder{
		"str": c("beam:coder:string_utf8:v1"),
		"gw":  c("beam:coder:global_window:v1"),
		"iw":  c("beam:coder:interval_window:v1"),
		"wv":  c("beam:coder:windowed_value:v1", "str", "gw"),
		"wvi": c("beam:coder:windowed_value:v1", "str", "iw"),
	}
}

// stage is a one-transform stage running dofn from "in" to "out" over
// strings in the global window.
func stage(dofn string) StageSpec {
	return StageSpec{
		ID:         "stage-" + dofn,
		Transforms: []Transform{{ID: "t-" + dofn, DoFn: dofn, Input: "in", Outputs: map[string]string{"out": "out"}}},
		Input:      "in", InputCoder: "wv", Coders: testCoders(), Outputs: []string{"out"},
	}
}

// wv is a decoded windowed value of a string.
type wv struct {
	ts      typex.EventTime
	windows []typex.Window
	pane    typex.PaneInfo
	s       string
}

func windowCoder(intervals bool) *coder.WindowCoder {
	if intervals {
		return coder.NewIntervalWindow()
	}
	return coder.NewGlobalWindow()
}

// encode encodes values with the Beam Go SDK's own encoders.
func encode(tb testing.TB, intervals bool, vals ...wv) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := beamexec.MakeWindowEncoder(windowCoder(intervals))
	for _, v := range vals {
		ws := v.windows
		if ws == nil {
			ws = window.SingleGlobalWindow
		}
		if err := beamexec.EncodeWindowedValueHeader(enc, ws, v.ts, v.pane, &buf); err != nil {
			tb.Fatal(err)
		}
		if err := coder.EncodeStringUTF8(v.s, &buf); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

func encodeStrings(tb testing.TB, ss ...string) []byte {
	vals := make([]wv, len(ss))
	for i, s := range ss {
		vals[i] = wv{ts: typex.EventTime(i), pane: typex.NoFiringPane(), s: s}
	}
	return encode(tb, false, vals...)
}

// decode decodes windowed values with the Beam Go SDK's own decoders.
func decode(tb testing.TB, intervals bool, data []byte) []wv {
	tb.Helper()
	var out []wv
	dec := beamexec.MakeWindowDecoder(windowCoder(intervals))
	r := bytes.NewReader(data)
	for r.Len() > 0 {
		ws, ts, pane, err := beamexec.DecodeWindowedValueHeader(dec, r)
		if err != nil {
			tb.Fatal(err)
		}
		s, err := coder.DecodeStringUTF8(r)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, wv{ts: ts, windows: ws, pane: pane, s: s})
	}
	return out
}

// collector gathers a bundle's outputs per PCollection, decoded.
type collector struct {
	tb        testing.TB
	intervals bool
	got       map[string][]wv
	chunks    int
}

func newCollector(tb testing.TB, intervals bool) *collector {
	return &collector{tb: tb, intervals: intervals, got: map[string][]wv{}}
}

func (c *collector) emit(pcoll string, data []byte) error {
	c.chunks++
	c.got[pcoll] = append(c.got[pcoll], decode(c.tb, c.intervals, data)...)
	return nil
}

func (c *collector) strings(pcoll string) []string {
	var ss []string
	for _, v := range c.got[pcoll] {
		ss = append(ss, v.s)
	}
	return ss
}

// runBundle runs one bundle of data and returns its outputs.
func runBundle(tb testing.TB, i *Instance, data []byte) (*collector, *Result) {
	tb.Helper()
	c := newCollector(tb, false)
	b, err := i.StartBundle(context.Background(), c.emit)
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Process(data); err != nil {
		tb.Fatal(err)
	}
	res, err := b.Finish()
	if err != nil {
		tb.Fatal(err)
	}
	return c, res
}

// ---- hand-assembled modules ------------------------------------------------

// rawModule assembles a minimal ABI v1 module: one page of memory, the result
// block at address 0 (all zero: no outputs), the input buffer at 1024.
// Every export returns 0 except ksr_abi_version (version), ksr_reserve (1024)
// and those with a body in bodies (instructions before the final "end").
// Exports named in omit are left out.
func rawModule(version int32, bodies map[string][]byte, omit ...string) []byte {
	type fn struct {
		name   string
		params int
		body   []byte
	}
	var fns []fn
	for _, name := range slices.Sorted(maps.Keys(exportParams)) {
		if slices.Contains(omit, name) {
			continue
		}
		body := []byte{0x41, 0} // i32.const 0
		switch name {
		case abi.ExportVersion:
			body = append([]byte{0x41}, sleb(int64(version))...)
		case abi.ExportReserve:
			body = append([]byte{0x41}, sleb(1024)...)
		}
		if b, ok := bodies[name]; ok {
			body = b
		}
		fns = append(fns, fn{name, exportParams[name], body})
	}
	section := func(id byte, payload []byte) []byte {
		return append(append([]byte{id}, uleb(uint64(len(payload)))...), payload...)
	}
	vec := func(items ...[]byte) []byte {
		out := uleb(uint64(len(items)))
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	// Types 0, 1, 2: (i32 x n) -> i32.
	var types [][]byte
	for n := range 3 {
		types = append(types, append(append([]byte{0x60}, vec(slices.Repeat([][]byte{{0x7f}}, n)...)...), 1, 0x7f))
	}
	var funcs, exports, codes [][]byte
	for k, f := range fns {
		funcs = append(funcs, uleb(uint64(f.params)))
		exports = append(exports, append(name(f.name), append([]byte{0}, uleb(uint64(k))...)...))
		code := append([]byte{0}, append(f.body, 0x0b)...) // no locals, body, end
		codes = append(codes, append(uleb(uint64(len(code))), code...))
	}
	exports = append(exports, append(name("memory"), 2, 0))
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, vec(types...))...)
	m = append(m, section(3, vec(funcs...))...)
	m = append(m, section(5, vec([]byte{0, 1}))...) // one memory, min 1 page
	m = append(m, section(7, vec(exports...))...)
	m = append(m, section(10, vec(codes...))...)
	return m
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}
