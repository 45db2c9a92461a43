package task

import (
	"context"
	"fmt"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/translate"
)

// root is how a task takes the data records of its input topic: one type
// per kind of sub-topology root (translate.RootKind). Watermark and
// processing-time records are the task's own business (Task.Handle); a
// root sees data, fires what the input watermark makes due, and says how
// far its own output has come.
//
// A Kafka source (kafkaSource, kafka.go) is one more root: its records are
// the user's, without ksrunner's envelope, and Task.Handle gives them to it
// whole (kafkaSource.take), never through data.
type root interface {
	// data takes one windowed value of a DATA or DATA_PACKED record, at
	// its position in the input partition (shuffle.Position: the record's
	// offset and the value's index in it), which stands for its arrival
	// order wherever state keeps one.
	data(raw []byte, pos int64) error
	// prepare fires what input watermark in makes due; PrepareCommit calls
	// it first, before the stages' bundles close.
	prepare(ctx context.Context, in int64) error
	// watermark is the root's output watermark at input watermark in,
	// before the holds of the stages (parked input, timers).
	watermark(in int64) (int64, error)
}

// pendingFlusher is a root that holds records back within a poll batch;
// the task flushes it before any non-data record and at the end of a batch.
type pendingFlusher interface {
	flushPending(ctx context.Context) error
}

func newRoot(t *Task) (root, error) {
	r := t.sub.Root
	switch r.Kind {
	case translate.RootImpulse:
		return impulseRoot{t}, nil
	case translate.RootPassthrough:
		return passthroughRoot{t}, nil
	case translate.RootGroupByKey:
		if r.Windowed {
			return windowedRoot{t.ev}, nil
		}
		return groupByKeyRoot{t}, t.loadTimers()
	case translate.RootTestStream:
		return testStreamSource{t.ev}, nil
	case translate.RootKafkaSource:
		return newKafkaSource(t)
	}
	return nil, fmt.Errorf("sub-topology %d: unknown root kind %d", t.sub.ID, r.Kind)
}

// impulseRoot emits the impulse's one element when the impulse topic's one
// record arrives, once: the store remembers it (state.Impulse).
type impulseRoot struct{ t *Task }

func (r impulseRoot) data([]byte, int64) error {
	t := r.t
	if t.impulseSeen {
		return nil
	}
	t.impulseSeen = true
	if err := t.batch.Set(t.key(state.Impulse), nil, nil); err != nil {
		return err
	}
	return t.route(t.sub.Root.Output, impulseElement)
}

func (impulseRoot) prepare(context.Context, int64) error { return nil }

func (r impulseRoot) watermark(int64) (int64, error) {
	if r.t.impulseSeen {
		return maxWatermark, nil
	}
	return minWatermark, nil
}

// passthroughRoot routes each record's element as it is (a flatten,
// redistribute, side-input-free stage or materialized main input).
type passthroughRoot struct{ t *Task }

func (r passthroughRoot) data(raw []byte, _ int64) error {
	return r.t.route(r.t.sub.Root.Output, raw)
}

func (passthroughRoot) prepare(context.Context, int64) error { return nil }
func (passthroughRoot) watermark(in int64) (int64, error)    { return in, nil }

// groupByKeyRoot is the GroupByKey fast path: the default trigger over
// non-merging windows, each key and window fired once at the end of its
// window (gbk.go), and only once the side inputs of the ParDo reading the
// groups here are complete for it (Root.SideInputTopics): until then the
// group stays in the store, its timer holding the output watermark, where
// a parked group would have to be copied whole.
type groupByKeyRoot struct{ t *Task }

func (r groupByKeyRoot) data(raw []byte, pos int64) error {
	return r.t.buffer(raw, pos)
}

func (r groupByKeyRoot) prepare(_ context.Context, in int64) error {
	return r.t.fire(min(in, r.t.sidesReady()))
}

func (r groupByKeyRoot) watermark(in int64) (int64, error) {
	hold, err := r.t.earliestTimer()
	if err != nil {
		return 0, err
	}
	return min(in, hold), nil
}

// windowedRoot is a GroupByKey driven by windowing.Strategy: triggers,
// merging windows, allowed lateness, timestamp combiners (gbkwindowed.go).
type windowedRoot struct{ e *eventTime }

func (r windowedRoot) data(raw []byte, pos int64) error { return r.e.gbk.add(raw, pos) }

func (r windowedRoot) flushPending(ctx context.Context) error { return r.e.gbk.flushPending(ctx) }

func (r windowedRoot) prepare(ctx context.Context, in int64) error {
	g := r.e.gbk
	if err := g.flushPending(ctx); err != nil {
		return err
	}
	if err := g.fire(in, r.e.now()); err != nil {
		return err
	}
	g.flushMetrics()
	return nil
}

func (r windowedRoot) watermark(in int64) (int64, error) {
	hold, err := r.e.gbk.earliestHold()
	if err != nil {
		return 0, err
	}
	return min(in, hold), nil
}

// testStreamSource runs a TestStream's events once its topic's record has
// arrived (teststream.go).
type testStreamSource struct{ e *eventTime }

func (r testStreamSource) data([]byte, int64) error {
	r.e.ts.triggered = true // the events run in prepare, once
	return nil
}

func (r testStreamSource) prepare(ctx context.Context, _ int64) error { return r.e.runTestStream(ctx) }

func (r testStreamSource) watermark(int64) (int64, error) { return r.e.ts.watermark(), nil }
