package e2e

import (
	"fmt"
	"sort"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	register.Function1x2(stampMinute)
	register.DoFn4x1[*sdf.LockRTracker, int, func(*int) bool, func(string), sdf.ProcessContinuation](&sideRangeFn{})
}

// The windows of sdfSidePipeline: element i and side value v fall in
// minute i%sdfSideWindows and v%sdfSideWindows.
const sdfSideWindows = 3

// sdfSidePipeline runs a splittable DoFn with a side input: each element i
// of 0..11, in one of three fixed one-minute windows, is a restriction of
// i+4 positions split in two, and every position is written with the sorted
// side input values of the element's window. The DoFn checkpoints after
// every 3 positions, so its residuals resume in later bundles and still
// read the side input. A side input read whole (wrong window) or before it
// is complete shows in the values; a position lost or doubled shows in the
// lines.
func sdfSidePipeline(out string) *beam.Pipeline {
	var mains, sides []int
	for i := range 12 {
		mains = append(mains, i)
	}
	for v := range 9 {
		sides = append(sides, 100+v)
	}
	p, s := beam.NewPipelineWithRoot()
	fixed := window.NewFixedWindows(time.Minute)
	main := beam.WindowInto(s, fixed, beam.ParDo(s, stampMinute, beam.CreateList(s, mains)))
	side := beam.WindowInto(s, fixed, beam.ParDo(s, stampMinute, beam.CreateList(s, sides)))
	lines := beam.ParDo(s, &sideRangeFn{}, main, beam.SideInput{Input: side})
	// textio writes one file per window: back to the global one.
	textio.Write(s, out, beam.WindowInto(s, window.NewGlobalWindows(), lines))
	return p
}

// stampMinute puts n in minute n%sdfSideWindows of event time.
func stampMinute(n int) (beam.EventTime, int) {
	return mtime.FromMilliseconds(int64(n%sdfSideWindows)*60_000 + 1_000), n
}

// sideRangeFn is sdfSidePipeline's splittable DoFn.
type sideRangeFn struct{}

func (fn *sideRangeFn) CreateInitialRestriction(i int) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: int64(i + 4)}
}

func (fn *sideRangeFn) SplitRestriction(_ int, r offsetrange.Restriction) []offsetrange.Restriction {
	return r.EvenSplits(2)
}

func (fn *sideRangeFn) RestrictionSize(_ int, r offsetrange.Restriction) float64 { return r.Size() }

func (fn *sideRangeFn) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}

func (fn *sideRangeFn) ProcessElement(rt *sdf.LockRTracker, i int, side func(*int) bool, emit func(string)) sdf.ProcessContinuation {
	var vs []int
	var v int
	for side(&v) {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	start := rt.GetRestriction().(offsetrange.Restriction).Start
	for p := start; p < start+3; p++ {
		if !rt.TryClaim(p) {
			return sdf.StopProcessing()
		}
		emit(fmt.Sprintf("sdf %d position %d side %v", i, p, vs))
	}
	return sdf.ResumeProcessingIn(10 * time.Millisecond)
}

// sdfSideWant is sdfSidePipeline's output, sorted.
func sdfSideWant() []string {
	var out []string
	for i := range 12 {
		var vs []int
		for v := range 9 {
			if (100+v)%sdfSideWindows == i%sdfSideWindows {
				vs = append(vs, 100+v)
			}
		}
		for p := range i + 4 {
			out = append(out, fmt.Sprintf("sdf %d position %d side %v", i, p, vs))
		}
	}
	sort.Strings(out)
	return out
}
