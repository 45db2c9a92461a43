package as_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/examples/wasm/as"
	"github.com/ksrunner/ksrunner/examples/wasm/wordfns"
	"github.com/ksrunner/ksrunner/wasmabi"
)

// compiled builds the module once per test binary (asc takes seconds).
var compiled = sync.OnceValues(func() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "ksrunner-as-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path, err := as.Build(ctx, dir)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
})

// build returns the compiled module. Without npm the tests skip, unless
// KSRUNNER_REQUIRE_NPM is set (.ci/run sets it).
func build(t *testing.T) []byte {
	t.Helper()
	wasm, err := compiled()
	if errors.Is(err, as.ErrNoNPM) {
		if os.Getenv("KSRUNNER_REQUIRE_NPM") != "" {
			t.Fatalf("npm is required (KSRUNNER_REQUIRE_NPM is set): %v", err)
		}
		t.Skipf("skipping the AssemblyScript module: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

func stage(dofn string) wasmabi.StageSpec {
	c := func(urn string, comps ...string) *pipepb.Coder {
		return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: comps}
	}
	return wasmabi.StageSpec{
		ID: "stage-as", Input: "in", InputCoder: "wv",
		Coders: map[string]*pipepb.Coder{
			"str": c("beam:coder:string_utf8:v1"), "gw": c("beam:coder:global_window:v1"),
			"wv": c("beam:coder:windowed_value:v1", "str", "gw"),
		},
		Transforms: []wasmabi.Transform{{ID: "split", DoFn: dofn, Input: "in", Outputs: map[string]string{"o": "out"}}},
		Outputs:    []string{"out"},
	}
}

func encode(t *testing.T, ss ...string) []byte {
	var buf bytes.Buffer
	enc := exec.MakeWindowEncoder(coder.NewGlobalWindow())
	for _, s := range ss {
		if err := exec.EncodeWindowedValueHeader(enc, window.SingleGlobalWindow, mtime.ZeroTimestamp, typex.NoFiringPane(), &buf); err != nil {
			t.Fatal(err)
		}
		if err := coder.EncodeStringUTF8(s, &buf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func decode(t *testing.T, data []byte) []string {
	var out []string
	r := bytes.NewReader(data)
	dec := exec.MakeWindowDecoder(coder.NewGlobalWindow())
	for r.Len() > 0 {
		if _, _, _, err := exec.DecodeWindowedValueHeader(dec, r); err != nil {
			t.Fatal(err)
		}
		s, err := coder.DecodeStringUTF8(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestSplit runs the AssemblyScript DoFn through the WASM executor and
// compares it with the Go function it mirrors.
func TestSplit(t *testing.T) {
	wasm := build(t)
	ctx := context.Background()
	m, err := wasmabi.Compile(ctx, wasm, wasmabi.Config{Name: "split-as.wasm", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	inst, err := m.Instantiate(ctx, stage("Split"))
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)

	lines := []string{"", "one", "  two  words ", "tabs\tand\nnew\r\nlines", "naïve café ünïcödé", strings.Repeat("long ", 5000)}
	for i := range 2000 {
		lines = append(lines, fmt.Sprintf("line %d has a few words", i))
	}
	var want []string
	for _, l := range lines {
		wordfns.Split(l, func(w string) { want = append(want, w) })
	}
	for range 2 { // bundles reuse the instance and its buffers
		var got []string
		b, err := inst.StartBundle(ctx, func(pcoll string, data []byte) error {
			if pcoll != "out" {
				t.Errorf("output to %s", pcoll)
			}
			got = append(got, decode(t, data)...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for c := range slices.Chunk(lines, 500) {
			if err := b.Process(encode(t, c...)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("got %d words %q..., want %d %q...", len(got), got[:min(8, len(got))], len(want), want[:8])
		}
		if n := res.Counters[wasmabi.MetricKey{Transform: "split", Namespace: "words", Name: "words"}]; n != int64(len(want)) {
			t.Errorf("counter words/words = %d, want %d (%v)", n, len(want), res.Counters)
		}
	}
}

// TestSetupErrors: the module refuses a DoFn it does not have.
func TestSetupErrors(t *testing.T) {
	wasm := build(t)
	ctx := context.Background()
	m, err := wasmabi.Compile(ctx, wasm, wasmabi.Config{Name: "split-as.wasm", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	_, err = m.Instantiate(ctx, stage("Nope"))
	if !errors.Is(err, wasmabi.ErrDoFn) || !strings.Contains(err.Error(), `no DoFn registered as "Nope"`) {
		t.Errorf("Instantiate with DoFn Nope: %v", err)
	}
}
