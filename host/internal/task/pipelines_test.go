package task

import (
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// The DoFns of the tests' pipelines never run: fake executors stand in
// for them. They only give the pipelines their types.

func pairFn(w string) (string, string)                      { return w, w }
func formatFn(k string, vs func(*string) bool) string       { return k }
func withSideFn(s string, side []string, emit func(string)) { emit(s) }

func init() {
	register.Function1x2(pairFn)
	register.Function2x1(formatFn)
	register.Function3x0(withSideFn)
	register.Emitter1[string]()
	register.Iter1[string]()
}

// groupingPipeline is Create | pairFn | WindowInto(fixed minutes, opts) |
// GroupByKey | formatFn, whose output is reshuffled and read as a side
// input by a ParDo over minute windows. Its sub-topologies: the impulse
// (Create, pairFn, WindowInto) writes the GroupByKey's repartition topic;
// the GroupByKey root and formatFn write the Reshuffle's topic and the
// side input topic; the side input's reader (withSideFn) reads the
// materialized main input of a second impulse.
func groupingPipeline(t *testing.T, opts ...beam.WindowIntoOption) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairFn, beam.Create(s, "a"))
	w := beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs, opts...)
	f := beam.ParDo(s, formatFn, beam.GroupByKey(s, w))
	beam.Reshuffle(s, f)
	main := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "m"))
	beam.ParDo(s, withSideFn, main, beam.SideInput{Input: f})
	return p
}
