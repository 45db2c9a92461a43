package e2e

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	register.Function1x3(stampedPair)
	register.DoFn6x0[beam.Window, state.Provider, timers.Provider, string, func(*int) bool, func(string)](&windowSumFn{})
	register.Function3x1(plainWindowSum)
	register.Function4x1(windowSumWithCount)
	register.Function2x2(constantKey)
	register.Function2x1(countValues)
}

// stampedPair keys i by i%7, stamped i*100 ms: 3,000 numbers span five
// one-minute windows.
func stampedPair(i int) (beam.EventTime, string, int) {
	return mtime.FromMilliseconds(int64(i) * 100), fmt.Sprintf("k%d", i%7), i
}

// windowSumFn sums a key's groups of a window in user state and says, when
// the window ends (an event-time timer), the sum and how many groups it
// saw.
type windowSumFn struct {
	Sum    state.Value[int]
	Groups state.Value[int]
	Fire   timers.EventTime
}

func (fn *windowSumFn) ProcessElement(w beam.Window, sp state.Provider, tp timers.Provider, k string, vs func(*int) bool, _ func(string)) {
	s, _, err := fn.Sum.Read(sp)
	if err != nil {
		panic(err)
	}
	for v := 0; vs(&v); {
		s += v
	}
	g, _, err := fn.Groups.Read(sp)
	if err != nil {
		panic(err)
	}
	if err := fn.Sum.Write(sp, s); err != nil {
		panic(err)
	}
	if err := fn.Groups.Write(sp, g+1); err != nil {
		panic(err)
	}
	fn.Fire.Set(tp, w.MaxTimestamp().ToTime())
}

func (fn *windowSumFn) OnTimer(_ context.Context, ts beam.EventTime, sp state.Provider, _ timers.Provider, k string, _ timers.Context, emit func(string)) {
	s, _, err := fn.Sum.Read(sp)
	if err != nil {
		panic(err)
	}
	g, _, err := fn.Groups.Read(sp)
	if err != nil {
		panic(err)
	}
	emit(fmt.Sprintf("stateful %s@%d: sum %d in %d groups", k, ts.Milliseconds(), s, g))
}

func plainWindowSum(w beam.Window, k string, vs func(*int) bool) string {
	s := 0
	for v := 0; vs(&v); {
		s += v
	}
	return fmt.Sprintf("plain %s@%d: sum %d", k, w.MaxTimestamp().Milliseconds(), s)
}

// windowedStatefulPipeline groups in one-minute windows with allowed
// lateness (a windowed GroupByKey) and reads the groups with a stateful
// ParDo whose timers fire at the windows' ends and with a plain one: the
// stateful ParDo stays with the GroupByKey (translate.LayoutStatefulReaders),
// its timers following the root's output watermark.
func windowedStatefulPipeline(out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	nums := make([]int, 3000)
	for i := range nums {
		nums[i] = i
	}
	kvs := beam.ParDo(s, stampedPair, beam.CreateList(s, nums))
	groups := beam.GroupByKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs, beam.AllowedLateness(30*time.Second)))
	stateful := beam.ParDo(s, &windowSumFn{}, groups)
	plain := beam.ParDo(s, plainWindowSum, groups)
	// Into one window before the write: textio writes a window's lines
	// over the file the last window wrote.
	textio.Write(s, out, beam.WindowInto(s, window.NewGlobalWindows(), beam.Flatten(s, stateful, plain)))
	return p
}

// windowedStatefulWant is windowedStatefulPipeline's output.
func windowedStatefulWant() []string {
	type kw struct {
		k string
		w int64
	}
	sums := map[kw]int{}
	for i := range 3000 {
		sums[kw{fmt.Sprintf("k%d", i%7), int64(i)*100/60000*60000 + 59999}] += i
	}
	var out []string
	for x, s := range sums {
		out = append(out, fmt.Sprintf("stateful %s@%d: sum %d in 1 groups", x.k, x.w, s), fmt.Sprintf("plain %s@%d: sum %d", x.k, x.w, s))
	}
	slices.Sort(out)
	return out
}

// windowedSidePipeline groups stampedPair's numbers in one-minute windows
// with allowed lateness (a windowed GroupByKey), read by a ParDo with a side
// input, its only reader, which stays with the GroupByKey
// (translate.LayoutGatedPanes) and parks each pane until the side input is
// ready for its window. The side input, each window's count of numbers
// from another GroupByKey of the same pairs, is complete for a window one
// topic after the panes fire, so panes are parked as a rule.
func windowedSidePipeline(out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	nums := make([]int, 3000)
	for i := range nums {
		nums[i] = i
	}
	kvs := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, stampedPair, beam.CreateList(s, nums)), beam.AllowedLateness(30*time.Second))
	counts := beam.ParDo(s, countValues, beam.GroupByKey(s, beam.ParDo(s, constantKey, kvs)))
	sums := beam.ParDo(s, windowSumWithCount, beam.GroupByKey(s, kvs), beam.SideInput{Input: counts})
	textio.Write(s, out, beam.WindowInto(s, window.NewGlobalWindows(), sums))
	return p
}

func constantKey(_ string, v int) (string, int) { return "all", v }

func countValues(_ string, vs func(*int) bool) int {
	n := 0
	for v := 0; vs(&v); {
		n++
	}
	return n
}

func windowSumWithCount(w beam.Window, k string, vs func(*int) bool, count func(*int) bool) string {
	s := 0
	for v := 0; vs(&v); {
		s += v
	}
	var n, c int
	for count(&c) {
		n += c
	}
	return fmt.Sprintf("side %s@%d: sum %d of %d", k, w.MaxTimestamp().Milliseconds(), s, n)
}

// windowedSideWant is windowedSidePipeline's output.
func windowedSideWant() []string {
	type kw struct {
		k string
		w int64
	}
	sums := map[kw]int{}
	counts := map[int64]int{}
	for i := range 3000 {
		w := int64(i)*100/60000*60000 + 59999
		sums[kw{fmt.Sprintf("k%d", i%7), w}] += i
		counts[w]++
	}
	var out []string
	for x, s := range sums {
		out = append(out, fmt.Sprintf("side %s@%d: sum %d of %d", x.k, x.w, s, counts[x.w]))
	}
	slices.Sort(out)
	return out
}
