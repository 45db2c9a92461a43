package main

import (
	"context"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// The GroupByKey benchmark pipeline (issue 2):
//
//	impulse → generate 0..n-1 → KV<i mod keys, i> → GroupByKey → sum each
//	key's values in a ParDo over the iterable → check every sum
//
// The source is one DoFn call on the impulse, which no runner can split: the
// whole input is made in one bundle on one core. With splits > 0 it is a
// splittable DoFn whose restriction [0, n) splits into that many ranges at
// the start, as a partitioned source's does: a runner may process them in
// parallel (ksrunner spreads them over its tasks; Prism runs them in one
// bundle, splitting only a bundle that stops making progress).
//
// or, with combine set, CombinePerKey(sum) in place of GroupByKey + sum, which
// runners lift (pre-combine before the shuffle). The check DoFn compares each
// key's sum with the closed form and counts the keys it checked, the bad ones
// and (GroupByKey variant) the values the sums covered, in counters the
// driver reads from the pipeline result.

const benchNamespace = "gbkbench"

func init() {
	register.DoFn2x0[[]byte, func(int64)](&generateFn{})
	register.DoFn3x0[*sdf.LockRTracker, []byte, func(int64)](&splitGenerateFn{})
	register.Emitter1[int64]()
	register.DoFn1x2[int64, int64, int64](&keyFn{})
	register.DoFn4x0[context.Context, int64, func(*int64) bool, func(int64, int64)](&sumFn{})
	register.Iter1[int64]()
	register.Emitter2[int64, int64]()
	register.DoFn3x0[context.Context, int64, int64](&checkFn{})
	register.Combiner1[int64](&sumCombineFn{})
}

// generateFn emits 0..N-1 for its one (impulse) input.
type generateFn struct{ N int64 }

func (f *generateFn) ProcessElement(_ []byte, emit func(int64)) {
	for i := int64(0); i < f.N; i++ {
		emit(i)
	}
}

// splitGenerateFn emits 0..N-1 for its one (impulse) input, as a
// splittable DoFn whose restriction splits into Splits ranges at the start.
type splitGenerateFn struct{ N, Splits int64 }

func (f *splitGenerateFn) CreateInitialRestriction(_ []byte) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: f.N}
}

func (f *splitGenerateFn) SplitRestriction(_ []byte, r offsetrange.Restriction) []offsetrange.Restriction {
	return r.EvenSplits(f.Splits)
}

func (f *splitGenerateFn) RestrictionSize(_ []byte, r offsetrange.Restriction) float64 {
	return r.Size()
}

func (f *splitGenerateFn) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}

func (f *splitGenerateFn) ProcessElement(rt *sdf.LockRTracker, _ []byte, emit func(int64)) {
	for i := rt.GetRestriction().(offsetrange.Restriction).Start; rt.TryClaim(i); i++ {
		emit(i)
	}
}

// generate is the pipeline's source of 0..n-1: generateFn, or with splits > 0
// splitGenerateFn.
func generate(s beam.Scope, n, splits int64) beam.PCollection {
	if splits > 0 {
		return beam.ParDo(s, &splitGenerateFn{N: n, Splits: splits}, beam.Impulse(s))
	}
	return beam.ParDo(s, &generateFn{N: n}, beam.Impulse(s))
}

// keyFn makes KV<i mod Keys, i>.
type keyFn struct{ Keys int64 }

func (f *keyFn) ProcessElement(i int64) (int64, int64) { return i % f.Keys, i }

// sumFn sums a key's grouped values; it counts them in the "values" counter.
type sumFn struct{ values beam.Counter }

func (f *sumFn) Setup() { f.values = beam.NewCounter(benchNamespace, "values") }

func (f *sumFn) ProcessElement(ctx context.Context, key int64, vals func(*int64) bool, emit func(int64, int64)) {
	var sum, n, v int64
	for vals(&v) {
		sum += v
		n++
	}
	f.values.Inc(ctx, n)
	emit(key, sum)
}

// sumCombineFn is the lifted variant's combiner.
type sumCombineFn struct{}

func (sumCombineFn) MergeAccumulators(a, b int64) int64 { return a + b }

// checkFn compares each key's sum with the sum of every i < N with
// i mod Keys == key.
type checkFn struct {
	N, Keys int64

	checked, bad beam.Counter
}

func (f *checkFn) Setup() {
	f.checked = beam.NewCounter(benchNamespace, "checked")
	f.bad = beam.NewCounter(benchNamespace, "bad")
}

func (f *checkFn) ProcessElement(ctx context.Context, key, sum int64) {
	f.checked.Inc(ctx, 1)
	if sum != expectedSum(f.N, f.Keys, key) {
		f.bad.Inc(ctx, 1)
	}
}

// expectedSum is key + (key+keys) + (key+2keys) + ... below n.
func expectedSum(n, keys, key int64) int64 {
	if key >= n {
		return 0
	}
	c := (n - key + keys - 1) / keys // how many i < n have i mod keys == key
	return c*key + keys*c*(c-1)/2
}

// buildGBKBench builds the benchmark pipeline; splits > 0 splits its source.
func buildGBKBench(n, keys int64, combine bool, splits int64) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	nums := generate(s, n, splits)
	kvs := beam.ParDo(s, &keyFn{Keys: keys}, nums)
	var sums beam.PCollection
	if combine {
		sums = beam.CombinePerKey(s, &sumCombineFn{}, kvs)
	} else {
		sums = beam.ParDo(s, &sumFn{}, beam.GroupByKey(s, kvs))
	}
	beam.ParDo0(s, &checkFn{N: n, Keys: keys}, sums)
	return p
}

// benchCounts are the check counters of a finished run.
type benchCounts struct{ checked, bad, values int64 }

func readBenchCounts(res metrics.Results) benchCounts {
	var c benchCounts
	for _, r := range res.AllMetrics().Counters() {
		if r.Namespace() != benchNamespace {
			continue
		}
		switch r.Name() {
		case "checked":
			c.checked += r.Result()
		case "bad":
			c.bad += r.Result()
		case "values":
			c.values += r.Result()
		}
	}
	return c
}

// verify reports whether a run produced every key's correct sum.
func (c benchCounts) verify(n, keys int64, combine bool) error {
	wantKeys := min(n, keys)
	switch {
	case c.checked != wantKeys:
		return fmt.Errorf("checked %d keys, want %d", c.checked, wantKeys)
	case c.bad != 0:
		return fmt.Errorf("%d of %d sums wrong", c.bad, c.checked)
	case !combine && c.values != n:
		return fmt.Errorf("the sums covered %d values, want %d", c.values, n)
	}
	return nil
}
