package task

import (
	"context"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"
)

// The DoFns of the tests' pipelines never run: fake executors stand in
// for them. They only give the pipelines their types.

func pairFn(w string) (string, string)                      { return w, w }
func formatFn(k string, vs func(*string) bool) string       { return k }
func withSideFn(s string, side []string, emit func(string)) { emit(s) }
func groupWithSideFn(k string, vs func(*string) bool, side []string, emit func(string)) {
	emit(k)
}

// timerFn sets an event-time timer per key and window.
type timerFn struct {
	Fire timers.EventTime
}

func (fn *timerFn) ProcessElement(w beam.Window, tp timers.Provider, k, v string, emit func(string)) {
	fn.Fire.Set(tp, w.MaxTimestamp().ToTime())
}

func (fn *timerFn) OnTimer(_ context.Context, _ beam.EventTime, _ timers.Provider, k string, _ timers.Context, emit func(string)) {
	emit(k)
}

// groupTimerFn sets an event-time timer per key and window of the groups
// it reads.
type groupTimerFn struct {
	Fire timers.EventTime
}

func (fn *groupTimerFn) ProcessElement(w beam.Window, tp timers.Provider, k string, vs func(*string) bool, emit func(string)) {
	fn.Fire.Set(tp, w.MaxTimestamp().ToTime())
}

func (fn *groupTimerFn) OnTimer(_ context.Context, _ beam.EventTime, _ timers.Provider, k string, _ timers.Context, emit func(string)) {
	emit(k)
}

// sideTimerFn is timerFn with a side input.
type sideTimerFn struct {
	Fire timers.EventTime
}

func (fn *sideTimerFn) ProcessElement(w beam.Window, tp timers.Provider, k, v string, side []string, emit func(string)) {
	fn.Fire.Set(tp, w.MaxTimestamp().ToTime())
}

func (fn *sideTimerFn) OnTimer(_ context.Context, _ beam.EventTime, _ timers.Provider, k string, _ timers.Context, emit func(string)) {
	emit(k)
}

func init() {
	register.DoFn6x0[beam.Window, timers.Provider, string, string, []string, func(string)](&sideTimerFn{})
	register.DoFn5x0[beam.Window, timers.Provider, string, func(*string) bool, func(string)](&groupTimerFn{})
	register.DoFn5x0[beam.Window, timers.Provider, string, string, func(string)](&timerFn{})
	register.Function1x2(pairFn)
	register.Function2x1(formatFn)
	register.Function3x0(withSideFn)
	register.Function4x0(groupWithSideFn)
	register.Function2x0(dropGroupFn)
	register.Emitter1[string]()
	register.Iter1[string]()
}

// groupTimerPipeline is Create | pairFn | WindowInto(fixed minutes) |
// GroupByKey | groupTimerFn: a stateful ParDo, the groups' only reader,
// which stays in the GroupByKey's sub-topology.
func groupTimerPipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, pairFn, beam.Create(s, "a")))
	beam.ParDo(s, &groupTimerFn{Fire: timers.InEventTime("fire")}, beam.GroupByKey(s, kvs))
	return p
}

// lateGroupTimerPipeline is groupTimerPipeline with a minute of allowed
// lateness (a windowed GroupByKey root) and a second, plain reader of the
// groups: groupTimerFn still stays in the GroupByKey's sub-topology
// (translate.LayoutStatefulReaders).
func lateGroupTimerPipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, pairFn, beam.Create(s, "a")), beam.AllowedLateness(time.Minute))
	groups := beam.GroupByKey(s, kvs)
	beam.ParDo(s, &groupTimerFn{Fire: timers.InEventTime("fire")}, groups)
	beam.ParDo0(s, dropGroupFn, groups)
	return p
}

func dropGroupFn(string, func(*string) bool) {}

// groupsWithSidePipeline is Create | pairFn | WindowInto(fixed minutes) |
// GroupByKey | groupWithSideFn, which reads a side input over minute
// windows of its own (Create | WindowInto) and whose output is
// reshuffled. The side input does not wait on the GroupByKey, so
// groupWithSideFn stays in the GroupByKey's sub-topology.
func groupsWithSidePipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, pairFn, beam.Create(s, "a")))
	side := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "x"))
	beam.Reshuffle(s, beam.ParDo(s, groupWithSideFn, beam.GroupByKey(s, kvs), beam.SideInput{Input: side}))
	return p
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
	f := grouping(s, beam.Create(s, "a"), window.NewFixedWindows(time.Minute), opts...)
	main := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "m"))
	beam.ParDo(s, withSideFn, main, beam.SideInput{Input: f})
	return p
}

// grouping is words | pairFn | WindowInto(wfn, opts) | GroupByKey |
// formatFn | Reshuffle; it returns formatFn's output.
func grouping(s beam.Scope, words beam.PCollection, wfn *window.Fn, opts ...beam.WindowIntoOption) beam.PCollection {
	kvs := beam.ParDo(s, pairFn, words)
	w := beam.WindowInto(s, wfn, kvs, opts...)
	f := beam.ParDo(s, formatFn, beam.GroupByKey(s, w))
	beam.Reshuffle(s, f)
	return f
}

// sessionsPipeline is Create | grouping over sessions with a gap of a
// minute.
func sessionsPipeline() *beam.Pipeline { return groupingOver(window.NewSessions(time.Minute)) }

// groupingOver is Create | grouping over wfn.
func groupingOver(wfn *window.Fn, opts ...beam.WindowIntoOption) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	grouping(s, beam.Create(s, "a"), wfn, opts...)
	return p
}

// testStreamPipeline is a TestStream of strings (cfg) | grouping over
// fixed minutes with opts.
func testStreamPipeline(cfg teststream.Config, opts ...beam.WindowIntoOption) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	grouping(s, teststream.Create(s, cfg), window.NewFixedWindows(time.Minute), opts...)
	return p
}

// timerPipeline is Create | pairFn | WindowInto(fixed minutes) |
// ParDo(timerFn), a stateful stage with timers.
func timerPipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairFn, beam.Create(s, "a"))
	beam.ParDo(s, &timerFn{Fire: timers.InEventTime("fire")}, beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs))
	return p
}

// slidingSideTimerPipeline is Create | pairFn | WindowInto(sliding two
// minutes every minute) | sideTimerFn, a stateful ParDo with a side input
// over minute windows: it heads a sub-topology of its own ("-main") and
// parks the input its side input is not ready for.
func slidingSideTimerPipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewSlidingWindows(time.Minute, 2*time.Minute), beam.ParDo(s, pairFn, beam.Create(s, "a")))
	side := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "x"))
	beam.ParDo(s, &sideTimerFn{Fire: timers.InEventTime("fire")}, kvs, beam.SideInput{Input: side})
	return p
}

// windowedGroupsWithSidePipeline is groupsWithSidePipeline behind a
// windowed GroupByKey: an on-time pane, a late pane per late element within
// a minute's allowed lateness, accumulating. groupWithSideFn, the only
// reader, stays in the GroupByKey's sub-topology and parks the panes its
// side input is not ready for.
func windowedGroupsWithSidePipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, pairFn, beam.Create(s, "a")),
		beam.Trigger(trigger.AfterEndOfWindow().LateFiring(trigger.AfterCount(1))),
		beam.AllowedLateness(time.Minute), beam.PanesAccumulate())
	side := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "x"))
	beam.Reshuffle(s, beam.ParDo(s, groupWithSideFn, beam.GroupByKey(s, kvs), beam.SideInput{Input: side}))
	return p
}

// sharedGroupsWithSidePipeline is groupsWithSidePipeline with a second
// reader of the groups (dropGroupFn): the side input's reader heads a
// sub-topology of its own, fed by a "-main" topic.
func sharedGroupsWithSidePipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, pairFn, beam.Create(s, "a")))
	side := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "x"))
	g := beam.GroupByKey(s, kvs)
	beam.Reshuffle(s, beam.ParDo(s, groupWithSideFn, g, beam.SideInput{Input: side}))
	beam.ParDo0(s, dropGroupFn, g)
	return p
}
