package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/state"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// eventTime is a task's event-time machinery beyond the default
// group-by-key fast path (gbk.go): the windowed group-by-key (gbkwindowed.go),
// the TestStream root (teststream.go) and the processing-time clock. A task
// has one only when it needs it (see newEventTime); task.go calls it through
// a few hooks.
//
// Processing time. Normally it is the wall clock. When a TestStream drives
// the pipeline (Plan.TestStream) every task runs on the TestStream's
// synthetic clock instead, and that clock travels in band: the TestStream
// root writes PROCESSING_TIME records (shuffle.KindProcessingTime) to its
// output topics after the elements that precede the advance, and every task
// forwards its clock to its own output topics when it changes, after
// firing what the new time makes due and closing its bundles. A task's clock
// is the minimum over the producers that have reported one (tasks fed only
// by Impulses never hear one and keep the minimum time: their
// processing-time timers fire only at the end, by the watermark). So a task
// sees a clock advance exactly after the data that preceded it, on every
// partition, whichever instance runs what: Prism's "advance only when
// quiescent" rule, without a global barrier. In that mode tasks also react
// to every input watermark change at once (fire, close bundles, report), so
// TestStream events reach downstream one at a time as in Prism.
type eventTime struct {
	t         *Task
	gbk       *windowedGBK // windowed group-by-key root, or nil
	ts        *testStreamRoot
	synthetic bool             // processing time is the TestStream's clock
	procTimes map[string]int64 // synthetic: latest report per producer
	sentPT    int64            // synthetic: the clock last forwarded
	lastIn    int64            // input watermark at the last reaction
	syncTime  int64            // synchronized processing time of the elements being handled
}

// Store layout of the event-time machinery, after the task prefix (the
// letters do not collide with task.go's stores):
//
//	'g' len key | key | window                 → window state (see windowedGBK)
//	'v' len key | key | len win | win | offset → a buffered value
//	'e' time | len key | key | window          → an event-time timer
//	'p' time | len key | key | window          → a processing-time timer
//	'h' time | len key | key | window          → an output watermark hold
//	'q' producer                               → latest processing-time report (8 bytes)
//	'z'                                        → the TestStream ran (its watermark is +inf)

// newEventTime returns the task's event-time machinery, or nil when the
// task needs none (it then runs exactly as before).
func newEventTime(t *Task) (*eventTime, error) {
	plan := t.env.Plan
	root := t.sub.Root
	windowed := root.Kind == translate.RootGroupByKey && root.Windowed
	if !windowed && root.Kind != translate.RootTestStream && !plan.TestStream {
		return nil, nil
	}
	e := &eventTime{t: t, synthetic: plan.TestStream, procTimes: map[string]int64{}, sentPT: minWatermark, lastIn: minWatermark}
	if windowed {
		g, err := newWindowedGBK(t)
		if err != nil {
			return nil, err
		}
		e.gbk = g
	}
	if root.Kind == translate.RootTestStream {
		e.ts = &testStreamRoot{payload: root.TestStream}
		if root.TestStreamOuterContext && !root.TestStreamLengthPrefix {
			nest, err := outerToNested(plan.Pipeline.GetComponents().GetCoders(), root.TestStream.GetCoderId())
			if err != nil {
				return nil, fmt.Errorf("TestStream %s: %w", root.TransformID, err)
			}
			e.ts.nest = nest
		}
	}
	if err := e.load(); err != nil {
		return nil, err
	}
	e.syncTime = e.now()
	return e, nil
}

func (e *eventTime) load() error {
	t := e.t
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(state.ProcTime), UpperBound: t.key(state.ProcTime + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	n := len(t.prefix) + 1
	for it.First(); it.Valid(); it.Next() {
		e.procTimes[string(it.Key()[n:])] = int64(binary.BigEndian.Uint64(it.Value()))
	}
	if e.ts != nil {
		if v, closer, err := t.batch.Get(t.key(state.TestStreamDone)); err == nil {
			e.ts.done = true
			if len(v) == 8 {
				e.ts.clock = int64(binary.BigEndian.Uint64(v))
			}
			closer.Close()
		}
	}
	return it.Error()
}

// now is the task's processing time in milliseconds.
func (e *eventTime) now() int64 {
	if !e.synthetic {
		return time.Now().UnixMilli()
	}
	if e.ts != nil {
		return e.ts.clock
	}
	if len(e.procTimes) == 0 {
		return minWatermark
	}
	pt := maxWatermark
	for _, v := range e.procTimes {
		pt = min(pt, v)
	}
	return pt
}

// afterWatermark is the hook after a watermark record: in a TestStream
// pipeline the task reacts to every input watermark change at once.
func (e *eventTime) afterWatermark(ctx context.Context) error {
	if !e.synthetic || e.t.inputWatermark() == e.lastIn {
		return nil
	}
	return e.t.PrepareCommit(ctx)
}

// onProcessingTime handles a PROCESSING_TIME record: the clock moves, what
// it makes due fires, bundles close, and the new clock goes downstream after
// everything the task emitted before it.
func (e *eventTime) onProcessingTime(ctx context.Context, r *kgo.Record) error {
	p, pt, err := shuffle.DecodeProcessingTime(r.Value)
	if err != nil {
		return err
	}
	if old, ok := e.procTimes[p]; ok && pt <= old {
		return nil
	}
	e.procTimes[p] = pt
	if err := e.t.batch.Set(e.t.key(state.ProcTime, []byte(p)), binary.BigEndian.AppendUint64(nil, uint64(pt)), nil); err != nil {
		return fmt.Errorf("task %s: recording the processing time of %s: %w", e.t.producer, p, err)
	}
	if !e.synthetic {
		return nil
	}
	return e.t.PrepareCommit(ctx)
}

// afterPrepare is the hook at the end of prepareCommit: forward the
// synthetic clock once the bundles that precede it are closed.
func (e *eventTime) afterPrepare() {
	e.syncTime = e.now()
	if !e.synthetic {
		return
	}
	if pt := e.now(); pt > e.sentPT {
		e.sentPT = pt
		e.t.broadcast(shuffle.EncodeProcessingTime(e.t.producer, pt))
	}
}

// broadcast writes a record value to every partition of every topic this
// task writes (as reportWatermark does for watermarks).
func (t *Task) broadcast(val []byte) {
	t.flushPacks() // the data before the report that follows it
	seen := map[string]bool{}
	for _, s := range t.sub.Sinks {
		if seen[s.Topic] || s.KafkaWrite != nil { // user topics carry only the user's records
			continue
		}
		seen[s.Topic] = true
		for p := int32(0); p < t.env.Topics.Partitions[s.Topic]; p++ {
			t.env.Produce(&kgo.Record{Topic: t.env.Topics.Full(s.Topic), Partition: p, Value: val})
		}
	}
}
