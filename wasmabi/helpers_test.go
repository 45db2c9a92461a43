package wasmabi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	beamexec "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/wasmabi/wasmtest"
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
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=", "GOWASM=satconv,signext")
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

// rawModule: see wasmtest.RawModule.
func rawModule(version int32, bodies map[string][]byte, omit ...string) []byte {
	return wasmtest.RawModule(version, bodies, omit...)
}
