package wasmabi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// randomLines returns n lines of 0-6 ASCII words separated by runs of
// spaces and tabs.
func randomLines(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	vocab := []string{"a", "be", "sea", "dove", "eagle", "falcon", "Gannet", "hÉron", "ibis-ibis", "j4y"}
	seps := []string{" ", "  ", "\t", " \t "}
	lines := make([]string, n)
	for i := range lines {
		var b strings.Builder
		if r.IntN(3) == 0 {
			b.WriteString(seps[r.IntN(len(seps))])
		}
		for w := range r.IntN(7) {
			if w > 0 {
				b.WriteString(seps[r.IntN(len(seps))])
			}
			b.WriteString(vocab[r.IntN(len(vocab))])
		}
		lines[i] = b.String()
	}
	return lines
}

// TestSplitWords runs 10k lines through Split fused with Upper, in interval
// windows with varied timestamps and panes, in several Process calls and
// many small batches, and checks every output exactly: values, order,
// timestamps, windows and panes.
func TestSplitWords(t *testing.T) {
	// Interruptible runs the rewritten module (package interrupt): the same
	// outputs show that its function indices were remapped right.
	for _, interruptible := range []bool{false, true} {
		t.Run(fmt.Sprintf("interruptible=%v", interruptible), func(t *testing.T) {
			testSplitWords(t, Config{BatchBytes: 4 << 10, Interruptible: interruptible})
		})
	}
}

func testSplitWords(t *testing.T, cfg Config) {
	m := compile(t, guestModule(t), cfg)
	s := StageSpec{
		ID: "split-upper",
		Transforms: []Transform{
			{ID: "split", DoFn: "Split", Input: "lines", Outputs: map[string]string{"out": "words"}},
			{ID: "upper", DoFn: "Upper", Input: "words", Outputs: map[string]string{"out": "upper"}},
		},
		Input: "lines", InputCoder: "wvi", Coders: testCoders(),
		Outputs: []string{"upper", "words"},
	}
	i := instantiate(t, m, s)

	lines := randomLines(10_000)
	panes := []typex.PaneInfo{
		typex.NoFiringPane(),
		{Timing: typex.PaneEarly, IsFirst: true, Index: 0, NonSpeculativeIndex: -1},
		{Timing: typex.PaneLate, Index: 3, NonSpeculativeIndex: 2},
	}
	in := make([]wv, len(lines))
	for k, l := range lines {
		start := mtime.Time(int64(k) * 1000)
		in[k] = wv{
			ts:      typex.EventTime(int64(start) + int64(k%7)),
			windows: []typex.Window{window.IntervalWindow{Start: start, End: start.Add(time.Minute)}},
			pane:    panes[k%len(panes)],
			s:       l,
		}
	}
	var wantWords, wantUpper []wv
	for _, v := range in {
		for _, w := range strings.Fields(v.s) {
			o := v
			o.s = w
			wantWords = append(wantWords, o)
			o.s = strings.Map(func(r rune) rune {
				if 'a' <= r && r <= 'z' {
					return r - 'a' + 'A'
				}
				return r
			}, w)
			wantUpper = append(wantUpper, o)
		}
	}

	c := newCollector(t, true)
	b, err := i.StartBundle(context.Background(), c.emit)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range [][]wv{in[:1], in[1:5000], in[5000:]} {
		if err := b.Process(encode(t, true, part...)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		pcoll string
		want  []wv
	}{{"words", wantWords}, {"upper", wantUpper}} {
		got := c.got[o.pcoll]
		if len(got) != len(o.want) {
			t.Fatalf("%s: got %d elements, want %d", o.pcoll, len(got), len(o.want))
		}
		for k := range got {
			g, w := got[k], o.want[k]
			if g.s != w.s || g.ts != w.ts || g.pane != w.pane || !window.IsEqualList(g.windows, w.windows) {
				t.Fatalf("%s[%d]: got %+v, want %+v", o.pcoll, k, g, w)
			}
		}
	}
	if c.chunks < 10 {
		t.Errorf("outputs came in %d chunks; want one per batch (BatchBytes 4 KiB)", c.chunks)
	}
}

func TestEmptyInputAndBundles(t *testing.T) {
	i := instantiate(t, compile(t, guestModule(t), Config{}), stage("Split"))
	for range 3 {
		c, _ := runBundle(t, i, nil)
		if len(c.got) != 0 {
			t.Fatalf("outputs for no input: %v", c.got)
		}
		c, _ = runBundle(t, i, encodeStrings(t, "", "x y"))
		if got := c.strings("out"); !slices.Equal(got, []string{"x", "y"}) {
			t.Fatalf("got %q", got)
		}
	}
}

func TestMultipleOutputs(t *testing.T) {
	m := compile(t, guestModule(t), Config{})
	s := StageSpec{
		ID: "route",
		Transforms: []Transform{
			{ID: "split", DoFn: "Split", Input: "in", Outputs: map[string]string{"out": "words"}},
			{ID: "route", DoFn: "Route", Input: "words", Outputs: map[string]string{"long": "longs", "short": "shorts"}},
		},
		Input: "in", InputCoder: "wv", Coders: testCoders(),
		Outputs: []string{"longs", "shorts"}, // words stays inside the stage
	}
	i := instantiate(t, m, s)
	c, _ := runBundle(t, i, encodeStrings(t, "a quick brown fox", "jumps over the lazy dog"))
	if got, want := c.strings("shorts"), []string{"a", "fox", "the", "dog"}; !slices.Equal(got, want) {
		t.Errorf("shorts: got %q, want %q", got, want)
	}
	if got, want := c.strings("longs"), []string{"quick", "brown", "jumps", "over", "lazy"}; !slices.Equal(got, want) {
		t.Errorf("longs: got %q, want %q", got, want)
	}
	if len(c.got["words"]) != 0 {
		t.Errorf("the internal PCollection words reached the host")
	}
	// The route's source element is the line: outputs carry its timestamp.
	if ts := c.got["longs"][2].ts; ts != 1 {
		t.Errorf("timestamp of %q: %d, want 1", c.got["longs"][2].s, ts)
	}
}

func TestEmitAt(t *testing.T) {
	i := instantiate(t, compile(t, guestModule(t), Config{}), func() StageSpec {
		s := stage("Stamp")
		s.InputCoder = "wvi"
		return s
	}())
	w := window.IntervalWindow{Start: 0, End: 60_000}
	p := typex.PaneInfo{Timing: typex.PaneOnTime, IsFirst: true, Index: 1, NonSpeculativeIndex: 1}
	c := newCollector(t, true)
	b, err := i.StartBundle(context.Background(), c.emit)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Process(encode(t, true, wv{ts: 42, windows: []typex.Window{w}, pane: p, s: "x"})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	got := c.got["out"]
	if len(got) != 1 || got[0].ts != 1042 || got[0].pane != p || !window.IsEqualList(got[0].windows, []typex.Window{w}) || got[0].s != "x" {
		t.Fatalf("got %+v", got)
	}
}

func TestMetrics(t *testing.T) {
	var stats []BundleStats
	m := compile(t, guestModule(t), Config{OnBundle: func(s BundleStats) { stats = append(stats, s) }})
	i := instantiate(t, m, stage("CountWords"))
	_, res := runBundle(t, i, encodeStrings(t, "a bb ccc", "dddd", ""))
	key := func(n string) MetricKey { return MetricKey{Transform: "t-CountWords", Namespace: "test", Name: n} }
	wantC := map[MetricKey]int64{key("lines"): 3, key("words"): 4}
	wantD := map[MetricKey]DistributionValue{key("word_len"): {Count: 4, Sum: 10, Min: 1, Max: 4}}
	if !mapsEqual(res.Counters, wantC) || !mapsEqual(res.Distributions, wantD) {
		t.Fatalf("bundle 1: got %+v, want %v %v", res, wantC, wantD)
	}
	// Metrics are per bundle.
	_, res = runBundle(t, i, encodeStrings(t, "eeeee"))
	wantC = map[MetricKey]int64{key("lines"): 1, key("words"): 1}
	wantD = map[MetricKey]DistributionValue{key("word_len"): {Count: 1, Sum: 5, Min: 5, Max: 5}}
	if !mapsEqual(res.Counters, wantC) || !mapsEqual(res.Distributions, wantD) {
		t.Fatalf("bundle 2: got %+v, want %v %v", res, wantC, wantD)
	}
	if len(stats) != 2 || stats[0].Elements != 3 || stats[0].Outputs != 4 || stats[0].Calls != 1 ||
		stats[0].Module != "testguest" || stats[0].Stage != "stage-CountWords" {
		t.Fatalf("bundle stats: %+v", stats)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// logRecorder is a slog handler keeping messages and attributes.
type logRecorder struct {
	ch chan string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	select {
	case l.ch <- b.String():
	default:
	}
	return nil
}
func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrHandler{l, as}
}
func (l *logRecorder) WithGroup(string) slog.Handler { return l }

type attrHandler struct {
	*logRecorder
	as []slog.Attr
}

func (h *attrHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(h.as...)
	return h.logRecorder.Handle(ctx, r)
}

func TestLogAndFinishBundleError(t *testing.T) {
	rec := &logRecorder{ch: make(chan string, 100)}
	m := compile(t, guestModule(t), Config{Logger: slog.New(rec)})
	i := instantiate(t, m, stage("Lifecycle"))
	runBundle(t, i, encodeStrings(t, "hello"))
	if msg := <-rec.ch; !strings.Contains(msg, "lifecycle got HELLO") || !strings.Contains(msg, "stage=stage-Lifecycle") {
		t.Errorf("log: %q", msg)
	}
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Process(encodeStrings(t, "fail-finish")); err != nil {
		t.Fatal(err)
	}
	_, err = b.Finish()
	if !errors.Is(err, ErrDoFn) || !strings.Contains(err.Error(), "transform t-Lifecycle (DoFn Lifecycle): FinishBundle: finish failed as asked") {
		t.Fatalf("Finish: %v", err)
	}
	assertDiscarded(t, i)
}

// assertDiscarded checks that a failed instance refuses every call.
func assertDiscarded(t *testing.T, i *Instance) {
	t.Helper()
	if _, err := i.StartBundle(context.Background(), newCollector(t, false).emit); !errors.Is(err, ErrDiscarded) {
		t.Fatalf("StartBundle after an error: %v, want ErrDiscarded", err)
	}
	if err := i.Close(context.Background()); err != nil {
		t.Fatalf("Close after an error: %v", err)
	}
}

// failBundle runs elements through dofn and returns Process's error; the
// bundle must fail there.
func failBundle(t *testing.T, cfg Config, dofn string, elems ...string) (error, *Instance, *Bundle) {
	t.Helper()
	i := instantiate(t, compile(t, guestModule(t), cfg), stage(dofn))
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Process(encodeStrings(t, elems...))
	if err == nil {
		t.Fatalf("%s: Process succeeded", dofn)
	}
	if !strings.Contains(err.Error(), "module testguest, stage stage-"+dofn) {
		t.Errorf("error does not name module and stage: %v", err)
	}
	// The bundle refuses further calls too.
	if err := b.Process(encodeStrings(t, "ok")); !errors.Is(err, ErrDiscarded) {
		t.Errorf("Process after an error: %v, want ErrDiscarded", err)
	}
	if _, err := b.Finish(); !errors.Is(err, ErrDiscarded) {
		t.Errorf("Finish after an error: %v, want ErrDiscarded", err)
	}
	return err, i, b
}

func TestDoFnError(t *testing.T) {
	err, i, _ := failBundle(t, Config{}, "Fail", "ok", "bad", "ok")
	if !errors.Is(err, ErrDoFn) || !strings.Contains(err.Error(), "transform t-Fail (DoFn Fail): bad element: bad") {
		t.Fatalf("got %v", err)
	}
	assertDiscarded(t, i)
}

func TestPanic(t *testing.T) {
	for _, tc := range []struct{ dofn, msg string }{
		{"Panic", "panic: boom on bad"},
		{"NilDeref", "invalid memory address or nil pointer dereference"},
	} {
		t.Run(tc.dofn, func(t *testing.T) {
			err, i, _ := failBundle(t, Config{}, tc.dofn, "ok", "bad")
			if !errors.Is(err, ErrPanic) || !strings.Contains(err.Error(), tc.msg) ||
				!strings.Contains(err.Error(), "transform t-"+tc.dofn) || errors.Is(err, ErrTrap) {
				t.Fatalf("got %v", err)
			}
			assertDiscarded(t, i)
		})
	}
}

// TestTrap crashes the guest's Go runtime: a real trap, after which wazero
// would still run the module.
func TestTrap(t *testing.T) {
	err, i, _ := failBundle(t, Config{}, "Fatal", "ok", "bad")
	if !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "unreachable") ||
		!strings.Contains(err.Error(), "panic: fatal on another goroutine") {
		t.Fatalf("got %v", err)
	}
	// wazero leaves the trapped module open and callable: this is why the
	// instance must refuse further calls itself.
	if i.mod.IsClosed() {
		t.Log("wazero closed the module after the trap")
	} else if code, err := i.call(context.Background(), i.mod.ExportedFunction(abi.ExportVersion)); err != nil || code != 1 {
		t.Logf("raw call after trap: %d, %v", code, err)
	}
	assertDiscarded(t, i)
}

func TestRawModule(t *testing.T) {
	// A module that does nothing implements the ABI: no outputs.
	m := compile(t, rawModule(1, nil), Config{Name: "raw"})
	i := instantiate(t, m, stage("Anything"))
	if c, _ := runBundle(t, i, encodeStrings(t, "a", "b")); len(c.got) != 0 {
		t.Fatalf("outputs: %v", c.got)
	}

	// unreachable in ksr_process.
	m = compile(t, rawModule(1, map[string][]byte{abi.ExportProcess: {0x00}}), Config{Name: "raw-trap"})
	i = instantiate(t, m, stage("Anything"))
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Process(encodeStrings(t, "a"))
	if !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "module raw-trap, stage stage-Anything: ksr_process: module trapped: wasm error: unreachable") {
		t.Fatalf("got %v", err)
	}
	assertDiscarded(t, i)

	// A status that is neither OK nor a known error.
	m = compile(t, rawModule(1, map[string][]byte{abi.ExportStartBundle: {0x41, 7}}), Config{Name: "raw-status"})
	i = instantiate(t, m, stage("Anything"))
	if _, err := i.StartBundle(context.Background(), newCollector(t, false).emit); !errors.Is(err, ErrDoFn) || !strings.Contains(err.Error(), "status 7") {
		t.Fatalf("got %v", err)
	}
	assertDiscarded(t, i)
}

func TestABIChecks(t *testing.T) {
	ctx := context.Background()
	m := compile(t, rawModule(2, nil), Config{Name: "v2"})
	_, err := m.Instantiate(ctx, stage("X"))
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "module v2: module does not implement the ABI: exports ABI version 2, host supports 1") {
		t.Fatalf("version 2: %v", err)
	}
	for _, tc := range []struct {
		wasm []byte
		msg  string
	}{
		{rawModule(1, nil, abi.ExportProcess), "module nope: module does not implement the ABI: missing export ksr_process"},
		{rawModule(1, nil, abi.ExportVersion), "missing export ksr_abi_version"},
		{rawModule(1, map[string][]byte{abi.ExportSetup: {0x42, 0}}), "compile"}, // i64 result: invalid body
	} {
		_, err := Compile(ctx, tc.wasm, Config{Name: "nope"})
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("got %v, want %q", err, tc.msg)
		}
	}
	if _, err := Compile(ctx, []byte("not wasm"), Config{Name: "junk"}); err == nil || !strings.Contains(err.Error(), "module junk: compile") {
		t.Errorf("junk: %v", err)
	}
}

func TestInstantiateErrors(t *testing.T) {
	m := compile(t, guestModule(t), Config{})
	for _, tc := range []struct {
		mod func(*StageSpec)
		msg string
	}{
		{func(s *StageSpec) { s.Transforms[0].DoFn = "Nope" }, `no DoFn registered as "Nope" (registered: [`},
		{func(s *StageSpec) { s.Transforms[0].Input = "elsewhere" }, "transform t-Split reads elsewhere"},
		{func(s *StageSpec) { s.Outputs = []string{"ghost"} }, "stage output ghost is not produced"},
		{func(s *StageSpec) { s.InputCoder = "str" }, "want a windowed_value coder with 2 components, got beam:coder:string_utf8:v1"},
		{func(s *StageSpec) { s.Transforms[0].Outputs["more"] = "more" }, "transform has 2 outputs, DoFn declares none"},
	} {
		s := stage("Split")
		tc.mod(&s)
		if _, err := m.Instantiate(context.Background(), s); err == nil || !strings.Contains(err.Error(), tc.msg) ||
			!strings.Contains(err.Error(), "module testguest, stage stage-Split") {
			t.Errorf("got %v, want %q", err, tc.msg)
		}
	}
}

func TestMalformedInput(t *testing.T) {
	i := instantiate(t, compile(t, guestModule(t), Config{}), stage("Split"))
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	data := encodeStrings(t, "a b")
	if err := b.Process(data[:len(data)-1]); err == nil || !strings.Contains(err.Error(), "value at offset 0: shuffle: buffer ends inside an element") {
		t.Fatalf("truncated input: %v", err)
	}
	assertDiscarded(t, i)
}

func TestEmitError(t *testing.T) {
	i := instantiate(t, compile(t, guestModule(t), Config{}), stage("Split"))
	b, err := i.StartBundle(context.Background(), func(string, []byte) error { return errors.New("sink full") })
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Process(encodeStrings(t, "a b")); err == nil || !strings.Contains(err.Error(), "emit to out: sink full") {
		t.Fatalf("got %v", err)
	}
}

func TestMemoryLimit(t *testing.T) {
	err, i, _ := failBundle(t, Config{MemoryLimitPages: 1024}, "Hog", "ok", "bad") // 64 MiB
	if !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("got %v", err)
	}
	assertDiscarded(t, i)
}

// processAsync runs Process on another goroutine.
func processAsync(b *Bundle, data []byte) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.Process(data) }()
	return done
}

func TestInterruptibleDeadline(t *testing.T) {
	const deadline = time.Second // generous: the test machine is shared
	m := compile(t, guestModule(t), Config{Interruptible: true, BundleDeadline: deadline})
	i := instantiate(t, m, stage("Spin"))
	runBundle(t, i, encodeStrings(t, "a", "b")) // a healthy bundle is fine
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-processAsync(b, encodeStrings(t, "ok", "bad")):
		if !errors.Is(err, ErrDeadline) || !strings.Contains(err.Error(), "module testguest, stage stage-Spin: ksr_process: bundle deadline exceeded (1s): guest interrupted") {
			t.Fatalf("got %v", err)
		}
		if el := time.Since(start); el < deadline {
			t.Fatalf("interrupted after %v, before the deadline", el)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the spinning guest was not interrupted")
	}
	assertDiscarded(t, i)
}

// TestInterruptibleSleep: a guest asleep (one long time.Sleep, a WASI
// poll_oneoff in the host) is stopped at the deadline too.
func TestInterruptibleSleep(t *testing.T) {
	m := compile(t, guestModule(t), Config{Interruptible: true, BundleDeadline: 500 * time.Millisecond})
	i := instantiate(t, m, stage("Nap"))
	runBundle(t, i, encodeStrings(t, "1ms")) // a healthy bundle is fine
	if err := interrupted(t, i, encodeStrings(t, "1h")); !errors.Is(err, ErrDeadline) || !strings.Contains(err.Error(), "guest interrupted") {
		t.Fatalf("got %v", err)
	}
}

// interrupted runs data in a new bundle of i, which must fail within 30s.
func interrupted(t *testing.T, i *Instance, data []byte) error {
	t.Helper()
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-processAsync(b, data):
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the guest was not interrupted")
	}
	return nil
}

// TestInterruptibleRawLoop: a module without imports or globals (the
// rewrite adds both sections) spinning in "loop br 0" is stopped.
func TestInterruptibleRawLoop(t *testing.T) {
	spin := []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00} // loop br 0 end; i32.const 0
	m := compile(t, rawModule(1, map[string][]byte{abi.ExportProcess: spin}), Config{Name: "raw-spin", Interruptible: true, BundleDeadline: 500 * time.Millisecond})
	i := instantiate(t, m, stage("Anything"))
	runBundle(t, i, nil) // StartBundle and FinishBundle have no loop
	err := interrupted(t, i, encodeStrings(t, "a"))
	if !errors.Is(err, ErrDeadline) || !strings.Contains(err.Error(), "module raw-spin, stage stage-Anything: ksr_process: bundle deadline exceeded") {
		t.Fatalf("got %v", err)
	}
	assertDiscarded(t, i)
}

// TestInterruptibleGC: guest code that never returns must not hold up the
// rest of the process. Native code cannot be preempted, so a garbage
// collection (which stops the world) would wait for a spinning guest
// forever; an interruptible guest's polls let it through.
func TestInterruptibleGC(t *testing.T) {
	spinning := make(chan struct{})
	var once sync.Once
	logger := slog.New(handlerFunc(func(r slog.Record) {
		if r.Message == "spinning" {
			once.Do(func() { close(spinning) })
		}
	}))
	m := compile(t, guestModule(t), Config{Interruptible: true, Logger: logger})
	i := instantiate(t, m, stage("Spin"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := i.StartBundle(ctx, newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	done := processAsync(b, encodeStrings(t, "bad"))
	select {
	case <-spinning:
	case err := <-done:
		t.Fatalf("Process returned: %v", err)
	}
	gc := make(chan struct{})
	go func() {
		runtime.GC()
		close(gc)
	}()
	select {
	case <-gc:
	case <-time.After(30 * time.Second):
		t.Fatal("a garbage collection waited 30s for the spinning guest")
	}
	select {
	case err := <-done:
		t.Fatalf("the guest stopped spinning by itself: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "guest interrupted: context canceled") {
		t.Fatalf("got %v", err)
	}
}

// handlerFunc is a slog.Handler calling a function per record.
type handlerFunc func(slog.Record)

func (h handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h handlerFunc) WithGroup(string) slog.Handler                 { return h }

func TestInterruptibleCancel(t *testing.T) {
	m := compile(t, guestModule(t), Config{Interruptible: true})
	i := instantiate(t, m, stage("Spin"))
	ctx, cancel := context.WithCancel(context.Background())
	b, err := i.StartBundle(ctx, newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	done := processAsync(b, encodeStrings(t, "bad"))
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "guest interrupted: context canceled") {
			t.Fatalf("got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the spinning guest was not interrupted")
	}
}

// TestWatchdog: without Interruptible, a bundle still running at the
// deadline is reported to OnStuck (the guest sleeps 3s: "forever" as far as
// the 500ms deadline is concerned, yet it ends, so no goroutine leaks).
func TestWatchdog(t *testing.T) {
	stuck := make(chan StuckBundle, 1)
	m := compile(t, guestModule(t), Config{BundleDeadline: 500 * time.Millisecond, OnStuck: func(s StuckBundle) { stuck <- s }})
	i := instantiate(t, m, stage("Sleepy"))
	runBundle(t, i, encodeStrings(t, "1ms")) // healthy
	if !i.dog.started.IsZero() || i.dog.stuck {
		t.Fatal("watchdog still armed after a finished bundle")
	}
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	done := processAsync(b, encodeStrings(t, "3s"))
	select {
	case s := <-stuck:
		if s.Module != "testguest" || s.Stage != "stage-Sleepy" || s.Deadline != 500*time.Millisecond {
			t.Fatalf("OnStuck(%+v)", s)
		}
		if el := time.Since(s.Started); el < 500*time.Millisecond {
			t.Fatalf("reported stuck after %v", el)
		}
	case err := <-done:
		t.Fatalf("Process returned (%v) before the watchdog fired", err)
	case <-time.After(30 * time.Second):
		t.Fatal("watchdog did not fire")
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("late Process: %v, want ErrDeadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Process did not return after the guest's sleep")
	}
	assertDiscarded(t, i)
	if !i.dog.stopped {
		t.Fatal("Close did not stop the watchdog")
	}
}

func TestBundleMisuse(t *testing.T) {
	i := instantiate(t, compile(t, guestModule(t), Config{}), stage("Split"))
	b, err := i.StartBundle(context.Background(), newCollector(t, false).emit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := i.StartBundle(context.Background(), newCollector(t, false).emit); err == nil {
		t.Fatal("second open bundle accepted")
	}
	if _, err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := b.Process(encodeStrings(t, "x")); err == nil || !strings.Contains(err.Error(), "bundle is finished") {
		t.Fatalf("Process on a finished bundle: %v", err)
	}
	if err := i.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := i.StartBundle(context.Background(), nil); !errors.Is(err, ErrDiscarded) {
		t.Fatalf("StartBundle after Close: %v", err)
	}
}

func TestBigElement(t *testing.T) {
	// An element larger than BatchBytes and the initial input buffer.
	i := instantiate(t, compile(t, guestModule(t), Config{BatchBytes: 1024}), stage("Upper"))
	big := strings.Repeat("ab", 300_000)
	c, _ := runBundle(t, i, encodeStrings(t, "x", big, "y"))
	if got := c.strings("out"); len(got) != 3 || got[1] != strings.ToUpper(big) || got[2] != "Y" {
		t.Fatalf("got %d outputs", len(got))
	}
	_ = bytes.MinRead
}

// TestExampleModule runs the examples/wasm/words module: Split fused with
// Upper.
func TestExampleModule(t *testing.T) {
	m := compile(t, buildModule(t, "../examples/wasm/words"), Config{Name: "words"})
	i := instantiate(t, m, StageSpec{
		ID: "words",
		Transforms: []Transform{
			{ID: "split", DoFn: "Split", Input: "lines", Outputs: map[string]string{"out": "words"}},
			{ID: "upper", DoFn: "Upper", Input: "words", Outputs: map[string]string{"out": "upper"}},
		},
		Input: "lines", InputCoder: "wv", Coders: testCoders(), Outputs: []string{"upper"},
	})
	c, _ := runBundle(t, i, encodeStrings(t, "to be", "or not to be\tor\r\n"))
	if got, want := c.strings("upper"), []string{"TO", "BE", "OR", "NOT", "TO", "BE", "OR"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
