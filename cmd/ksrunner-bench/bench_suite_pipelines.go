package main

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// The pipelines of `bench suite` beyond bench_gbk.go's: each ends in a DoFn
// that checks every result against what the driver computed and counts
// what it checked in counters (namespace suiteNamespace) the driver reads
// from the pipeline result, so a fast wrong run cannot pass.

const suiteNamespace = "benchsuite"

func init() {
	register.DoFn1x2[int64, int64, int64](&hotKeyFn{})
	register.DoFn2x0[[]byte, func(beam.EventTime, int64)](&timedGenerateFn{})
	register.DoFn4x0[context.Context, beam.Window, int64, int64](&suiteWindowFn{})
	register.DoFn2x0[[]byte, func(int64, int64)](&sideGenerateFn{})
	register.DoFn3x0[context.Context, int64, func(int64) func(*int64) bool](&joinFn{})
	register.DoFn3x0[context.Context, int64, int64](&sumCheckFn{})
	register.Emitter2[beam.EventTime, int64]()
	register.Iter1[int64]()
}

// hotKeyFn keys i: every even i to key 0 (half the values), the odd ones
// spread over keys 1..Keys-1.
type hotKeyFn struct{ Keys int64 }

func (f *hotKeyFn) ProcessElement(i int64) (int64, int64) { return hotKey(i, f.Keys), i }

func hotKey(i, keys int64) int64 {
	if i%2 == 0 || keys < 2 {
		return 0
	}
	return 1 + (i/2)%(keys-1)
}

// hotKeySums is every key's sum under hotKeyFn.
func hotKeySums(n, keys int64) map[int64]int64 {
	m := map[int64]int64{}
	for i := int64(0); i < n; i++ {
		m[hotKey(i, keys)] += i
	}
	return m
}

// sumCheckFn compares each key's sum with Want.
type sumCheckFn struct {
	Want map[int64]int64

	checked, bad beam.Counter
}

func (f *sumCheckFn) Setup() {
	f.checked = beam.NewCounter(suiteNamespace, "checked")
	f.bad = beam.NewCounter(suiteNamespace, "bad")
}

func (f *sumCheckFn) ProcessElement(ctx context.Context, key, sum int64) {
	f.checked.Inc(ctx, 1)
	if w, ok := f.Want[key]; !ok || w != sum {
		f.bad.Inc(ctx, 1)
	}
}

// buildHotKeyBench is bench_gbk's GroupByKey + sum with hotKeyFn's keys.
func buildHotKeyBench(n, keys int64) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	nums := beam.ParDo(s, &generateFn{N: n}, beam.Impulse(s))
	kvs := beam.ParDo(s, &hotKeyFn{Keys: keys}, nums)
	sums := beam.ParDo(s, &sumFn{}, beam.GroupByKey(s, kvs))
	beam.ParDo0(s, &sumCheckFn{Want: hotKeySums(n, keys)}, sums)
	return p
}

// windowedSpan is the event time the windowed bench's elements cover.
const windowedSpan = 10 * time.Minute

// timedGenerateFn emits 0..N-1, element i at i*Span/N milliseconds.
type timedGenerateFn struct{ N, SpanMs int64 }

func (f *timedGenerateFn) ProcessElement(_ []byte, emit func(beam.EventTime, int64)) {
	for i := int64(0); i < f.N; i++ {
		emit(mtime.FromMilliseconds(i*f.SpanMs/f.N), i)
	}
}

// suiteWindowFn compares each key and window's sum with the sum of the i
// of that key whose timestamp falls in the window.
type suiteWindowFn struct {
	N, Keys, SpanMs int64

	checked, bad beam.Counter
}

func (f *suiteWindowFn) Setup() {
	f.checked = beam.NewCounter(suiteNamespace, "checked")
	f.bad = beam.NewCounter(suiteNamespace, "bad")
}

func (f *suiteWindowFn) ProcessElement(ctx context.Context, w beam.Window, key, sum int64) {
	f.checked.Inc(ctx, 1)
	iw, ok := w.(window.IntervalWindow)
	if !ok || sum != suiteWindowSum(f.N, f.Keys, f.SpanMs, key, int64(iw.Start), int64(iw.End)) {
		f.bad.Inc(ctx, 1)
	}
}

// suiteWindowSum is the sum of every i < n with i mod keys == key whose
// timestamp i*span/n is in [start, end).
func suiteWindowSum(n, keys, span, key, start, end int64) int64 {
	var sum int64
	// The first i at or after start: i*span/n >= start.
	lo := max(0, (start*n+span-1)/span)
	lo += ((key-lo%keys)%keys + keys) % keys // the first of key's
	for i := lo; i < n && i*span/n < end; i += keys {
		sum += i
	}
	return sum
}

// windowGroups is how many (key, window) groups the windowed bench fires.
func windowGroups(n, keys, span int64) int64 {
	seen := map[[2]int64]bool{}
	for i := int64(0); i < n; i++ {
		seen[[2]int64{i % keys, i * span / n / 1000}] = true
	}
	return int64(len(seen))
}

// buildWindowedBench: n elements over windowedSpan of event time, in
// one-second fixed windows, keyed i mod keys, GroupByKey + sum.
func buildWindowedBench(n, keys int64) *beam.Pipeline {
	span := windowedSpan.Milliseconds()
	p, s := beam.NewPipelineWithRoot()
	nums := beam.ParDo(s, &timedGenerateFn{N: n, SpanMs: span}, beam.Impulse(s))
	windowed := beam.WindowInto(s, window.NewFixedWindows(time.Second), nums)
	kvs := beam.ParDo(s, &keyFn{Keys: keys}, windowed)
	sums := beam.ParDo(s, &sumFn{}, beam.GroupByKey(s, kvs))
	beam.ParDo0(s, &suiteWindowFn{N: n, Keys: keys, SpanMs: span}, sums)
	return p
}

// sideGenerateFn emits the side input's map: k → 2k for k < Entries.
type sideGenerateFn struct{ Entries int64 }

func (f *sideGenerateFn) ProcessElement(_ []byte, emit func(int64, int64)) {
	for k := int64(0); k < f.Entries; k++ {
		emit(k, 2*k)
	}
}

// joinFn looks each element up in the map side input (key i mod the map's
// size) and checks the value it finds.
type joinFn struct {
	Entries int64

	joined, bad beam.Counter
}

func (f *joinFn) Setup() {
	f.joined = beam.NewCounter(suiteNamespace, "joined")
	f.bad = beam.NewCounter(suiteNamespace, "bad")
}

func (f *joinFn) ProcessElement(ctx context.Context, i int64, lookup func(int64) func(*int64) bool) {
	k := i % f.Entries
	var v int64
	if next := lookup(k); next(&v) && v == 2*k {
		f.joined.Inc(ctx, 1)
		return
	}
	f.bad.Inc(ctx, 1)
}

// buildSideJoinBench: n elements each joined with a map side input of
// entries entries.
func buildSideJoinBench(n, entries int64) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	side := beam.ParDo(s, &sideGenerateFn{Entries: entries}, beam.Impulse(s))
	nums := beam.ParDo(s, &generateFn{N: n}, beam.Impulse(s))
	beam.ParDo0(s, &joinFn{Entries: entries}, nums, beam.SideInput{Input: side})
	return p
}

// suiteCounts reads a finished run's counters of namespace ns.
func suiteCounts(res metrics.Results, ns string) map[string]int64 {
	out := map[string]int64{}
	for _, r := range res.AllMetrics().Counters() {
		if r.Namespace() == ns {
			out[r.Name()] += r.Result()
		}
	}
	return out
}

// checkCounts reports a run whose counters are not want (bad must be 0).
func checkCounts(got map[string]int64, want map[string]int64) error {
	if got["bad"] != 0 {
		return fmt.Errorf("%d results wrong (%v)", got["bad"], got)
	}
	for k, w := range want {
		if got[k] != w {
			return fmt.Errorf("counter %s: %d, want %d (%v)", k, got[k], w, got)
		}
	}
	return nil
}

// checkSideJoin checks a side join run of n elements over a side input of
// entries entries; on ksrunner also that the instance read the side input
// from Kafka once (its side_input_elements_read counter), however many
// bundles looked it up.
func checkSideJoin(r beam.PipelineResult, runner string, n, entries int64) error {
	if err := checkCounts(suiteCounts(r.Metrics(), suiteNamespace), map[string]int64{"joined": n}); err != nil {
		return err
	}
	if runner != "ksrunner" {
		return nil
	}
	if read := suiteCounts(r.Metrics(), "ksrunner")[sideInputReadCounter]; read != entries {
		return fmt.Errorf("the side input's %d entries were read from Kafka %d times (counter %s), want once", entries, read, sideInputReadCounter)
	}
	return nil
}

// sideInputReadCounter is the host's counter of the side input values an
// instance read from Kafka (host/internal/runtime.MetricSideInputRead).
const sideInputReadCounter = "side_input_elements_read"
