package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"

	"github.com/ksrunner/ksrunner/host"
)

// envRunMain makes the test binary run ksrunner-bench's main instead of the
// tests: `bench rescale`'s test runs its SDK worker pools as this binary.
const envRunMain = "KSRUNNER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	flag.Parse()
	beam.Init()
	os.Exit(m.Run())
}

// runOnKsrunner runs p on an in-process ksrunner job server (embedded broker,
// LOOPBACK) with opts.
func runOnKsrunner(t *testing.T, p *beam.Pipeline, opts host.Options) beam.PipelineResult {
	t.Helper()
	srv, err := host.NewJobServer("localhost:0", opts, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Stop()
	*jobopts.Endpoint = srv.Endpoint()
	*jobopts.EnvironmentType = "LOOPBACK"
	res, err := universal.Execute(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestBenchPipelineOnKsrunner(t *testing.T) {
	const n, keys = 30_000, 70
	for _, c := range []struct {
		combine bool
		splits  int64
	}{{false, 0}, {true, 0}, {true, 7}, {false, 5}} {
		opts := host.DefaultOptions()
		opts.InternalParallelism = 3
		opts.MaxBundleSize = 1000
		opts.CommitIntervalMs = 5
		res := runOnKsrunner(t, buildGBKBench(n, keys, c.combine, c.splits), opts)
		if err := readBenchCounts(res.Metrics()).verify(n, keys, c.combine); err != nil {
			t.Errorf("combine=%v source_splits=%d: %v", c.combine, c.splits, err)
		}
	}
}

func TestExpectedSum(t *testing.T) {
	for _, c := range []struct{ n, keys int64 }{{1, 1}, {10, 3}, {1000, 7}, {5, 10}} {
		for key := int64(0); key < c.keys; key++ {
			var want int64
			for i := key; i < c.n; i += c.keys {
				want += i
			}
			if got := expectedSum(c.n, c.keys, key); got != want {
				t.Errorf("expectedSum(%d, %d, %d) = %d, want %d", c.n, c.keys, key, got, want)
			}
		}
	}
}

// The windowed check: element i has event time i ms and key i mod keys, in
// sliding windows of 100ms every 50ms (so in two windows each); the sum of
// every key and window is checked.

func init() {
	register.DoFn2x0[[]byte, func(beam.EventTime, int64, int64)](&timestampedFn{})
	register.Emitter3[beam.EventTime, int64, int64]()
	register.DoFn4x0[context.Context, window.IntervalWindow, int64, int64](&windowCheckFn{})
}

type timestampedFn struct{ N, Keys int64 }

func (f *timestampedFn) ProcessElement(_ []byte, emit func(beam.EventTime, int64, int64)) {
	for i := int64(0); i < f.N; i++ {
		emit(mtime.FromMilliseconds(i), i%f.Keys, i)
	}
}

type windowCheckFn struct {
	N, Keys      int64
	checked, bad beam.Counter
}

func (f *windowCheckFn) Setup() {
	f.checked = beam.NewCounter(benchNamespace, "checked")
	f.bad = beam.NewCounter(benchNamespace, "bad")
}

func (f *windowCheckFn) ProcessElement(ctx context.Context, w window.IntervalWindow, key, sum int64) {
	f.checked.Inc(ctx, 1)
	if sum != windowSum(f.N, f.Keys, w.Start.Milliseconds(), w.End.Milliseconds(), key) {
		f.bad.Inc(ctx, 1)
	}
}

// windowSum is the sum of the i < n in [start, end) with i mod keys == key.
func windowSum(n, keys, start, end, key int64) int64 {
	var sum int64
	for i := max(start, 0); i < min(end, n); i++ {
		if i%keys == key {
			sum += i
		}
	}
	return sum
}

func TestWindowedGBKOnKsrunner(t *testing.T) {
	const n, keys, size, period = 20_000, 30, 100, 50
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, &timestampedFn{N: n, Keys: keys}, beam.Impulse(s))
	windowed := beam.WindowInto(s, window.NewSlidingWindows(period*time.Millisecond, size*time.Millisecond), kvs)
	sums := beam.ParDo(s, &sumFn{}, beam.GroupByKey(s, windowed))
	beam.ParDo0(s, &windowCheckFn{N: n, Keys: keys}, sums)

	opts := host.DefaultOptions()
	opts.InternalParallelism = 3
	opts.CommitIntervalMs = 5
	c := readBenchCounts(runOnKsrunner(t, p, opts).Metrics())
	// Every key and window that has an element: windows start every period
	// from -period up to n.
	var want int64
	for start := int64(-period); start < n; start += period {
		lo, hi := max(start, 0), min(start+size, n)
		want += min(hi-lo, keys)
	}
	if c.checked != want || c.bad != 0 || c.values != 2*n {
		t.Errorf("checked %d key-windows (want %d), %d bad, %d values (want %d)", c.checked, want, c.bad, c.values, 2*n)
	}
}
