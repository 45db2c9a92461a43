package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/watermark"
	"github.com/ksrunner/ksrunner/translate"
)

const (
	minWatermark = int64(mtime.MinTimestamp)
	maxWatermark = int64(mtime.MaxTimestamp)

	// processBatchBytes is how much input a stage accumulates before the task
	// hands it to the executor: large batches amortise the Fn API round trip.
	processBatchBytes = 1 << 20

	// firstChunkBytes is the capacity a stage's first input buffer starts
	// at; it grows by appending up to about processBatchBytes. A buffer of
	// processBatchBytes for every stage of every task each cycle, most of
	// them holding a few elements, was a sixth of an instance's CPU at
	// 200,000 records/s (allocating and zeroing it, then collecting it).
	firstChunkBytes = 64 << 10

	// maxFreeChunks bounds how many emptied input buffers a stage keeps
	// for its next ones, so an idle task holds at most that many.
	maxFreeChunks = 2
)

// Task runs one sub-topology for one partition of its input topic.
//
// Invariants:
//   - Only the instance's loop calls handle, prepareCommit, commitState and
//     abort, one at a time; executors call emit concurrently with them, so
//     the routing state emit touches (pending stage inputs) is under mu.
//   - Output reaches Kafka before the watermark report that covers it: both
//     are produced from this task in order, and Kafka keeps order per
//     partition.
type Task struct {
	env       *Env
	sub       *translate.SubTopology
	partition int32
	producer  string // shuffle.ProducerID of this task
	prefix    []byte // state key prefix

	consumers map[string][]consumer // by PCollection id
	stages    []*stageRun           // topological order

	batch *pebble.Batch // this commit interval's state writes (reads see it)

	inputWM     *watermark.Aggregator // nil when the input has no producers (impulse, TestStream)
	producers   int                   // how many producers feed the input topic
	impulseSeen bool
	reportedWM  int64
	statusDirty bool
	// pendingStatus is the status to send once the commit in progress is
	// done (see sendStatus); statusAt is when the last one was made.
	pendingStatus *Status
	statusAt      time.Time
	gateSeq       uint64 // next sequence number of held input
	pieceSeq      uint64 // next sequence number of a group sent in pieces (pieces.go)
	// user holds the user state and timers of stateful stages; nil if none.
	user *state.User
	// finalizers of bundles whose output is not yet committed.
	finalizers []func(context.Context) error
	// cycleMetrics are the metrics of the cycle's bundles, committed metrics
	// once the cycle commits (instance.finalize), dropped with the task if
	// it aborts.
	cycleMetrics [][]*pipepb.MonitoringInfo

	rr atomic.Int32 // round-robin partition for unkeyed redistribution
	// spread picks the partitions of splittable DoFns' restrictions
	// (spread.go).
	spread spreader

	packs packs // DATA_PACKED records being filled (pack.go)
	// sinkLimit is the smallest record limit of the internal topics the
	// task writes (checkInternalSize).
	sinkLimit int

	// kafkaSinks are the serializers of the sub-topology's Kafka writes.
	kafkaSinks map[*translate.Sink]*kafkaSink

	// changelogNext is the offset after the task's last changelog record
	// produced this cycle; 0: none (changelog.go).
	changelogNext atomic.Int64

	root root       // how the task takes its input (root.go)
	ev   *eventTime // windowed GBK, TestStream, synthetic clock (eventtime.go); nil if unused
	gbk  gbkRuns    // group-by-key root only: values not yet in batch (gbk.go)
	// pages are the cycle's paged groups (Root.PagedGroups; gbkpages.go).
	pages groupPages
	// piecesTo is the stage reading groups in pieces (pieces.go), once
	// found; nil before.
	piecesTo *stageRun

	// residuals are the pending self-checkpoints of splittable DoFns, in
	// the order they were made (residuals.go); residualSeq numbers the next.
	residuals   []pendingResidual
	residualSeq uint64

	mu sync.Mutex
}

// consumer is one place an element of a PCollection goes.
type consumer struct {
	stage *stageRun
	flat  *translate.Flatten
	sink  *translate.Sink
}

// stageRun is a stage's executor and the bundle open on it, for one task.
type stageRun struct {
	stage  *translate.Stage
	exec   executor.Executor
	bundle executor.Bundle
	// pending is input not yet handed to the bundle, under task.mu: whole
	// elements in chunks of about processBatchBytes, because an SDK decodes
	// every data message on its own and a message must not split an element.
	pending []chunk
	// free are emptied buffers of pending input, for the next chunks
	// (under task.mu; at most maxFreeChunks). A chunk is emptied once the
	// executor's Process returned: the harness copies what it sends, and
	// a WASM bundle reads its input during the call.
	free       [][]byte
	count      int       // elements in the open bundle
	openedAt   time.Time // when the open bundle started (Env.Now)
	carry      map[string][]byte
	idx        byte                             // position in the sub-topology, for store keys
	gated      bool                             // waits for side inputs (see gate.go)
	sorted     bool                             // gets its input in timestamp order (sortByTime)
	sortedUpTo int64                            // sortByTime released every element before this
	state      harness.StateHandler             // side inputs and user state; nil: none
	families   map[string]translate.TimerFamily // by transform id + "/" + family id
	timerCarry map[string][]byte                // partial timers of the open bundle, by family key
	// expiring: the stage's first transform keeps user state that expires
	// lateness after its windows end (Stage.StateExpiry); an element
	// goes on in its windows that have not expired (liveWindows), the
	// others counted in droppedLate until the cycle's metrics take it.
	expiring    bool
	lateness    int64
	droppedLate int64
	// A stage whose input goes to a splittable DoFn (Stage.Checkpointable)
	// keeps its open bundle's input (input) for the elements a checkpoint
	// leaves unprocessed, and checkpoints a bundle open checkpointAfter
	// (see checkpoint.go); output says the open bundle emitted something.
	input           [][]byte
	checkpointAfter time.Duration
	output          bool
	deferred        int  // elements kept for the next cycle in this one (deferElements)
	begun           bool // a bundle opened in this cycle
	// selfCheckpoints: a bundle of the stage returned residuals the DoFn
	// made itself (no work is taken from its bundles: steal.go).
	selfCheckpoints bool
}

// chunk is whole encoded elements of a stage's input, and how many.
type chunk struct {
	data     []byte
	elements int
}

// appendPending adds one whole element to the pending input. A stage whose
// bundles may be checkpointed gets each element in a chunk, and so a
// bundle, of its own (see checkpoint.go).
func (sr *stageRun) appendPending(raw []byte) {
	n := len(sr.pending)
	if n == 0 || len(sr.pending[n-1].data) > 0 && (sr.checkpointAfter > 0 || len(sr.pending[n-1].data)+len(raw) > processBatchBytes) {
		sr.pending = append(sr.pending, chunk{data: sr.newChunk(len(raw))})
		n++
	}
	c := &sr.pending[n-1]
	c.data = append(c.data, raw...)
	c.elements++
}

// newChunk is an empty buffer for a chunk starting with an element of n
// bytes: a free one if there is one, else a new one, small if it is the
// stage's first pending chunk (most stages get little input per cycle) and
// whole if one filled up already (it will be too: growing it would copy).
func (sr *stageRun) newChunk(n int) []byte {
	if k := len(sr.free); k > 0 && cap(sr.free[k-1]) >= n {
		b := sr.free[k-1]
		sr.free[k-1] = nil
		sr.free = sr.free[:k-1]
		return b
	}
	if len(sr.pending) > 0 {
		return make([]byte, 0, max(processBatchBytes, n))
	}
	return make([]byte, 0, max(firstChunkBytes, n))
}

// recycle keeps the buffers of processed chunks for newChunk, up to
// maxFreeChunks of at most twice processBatchBytes (a chunk holding one
// huge element is left to the collector). The caller holds task.mu and
// nothing else refers to the chunks' data.
func (sr *stageRun) recycle(cs []chunk) {
	for _, c := range cs {
		if len(sr.free) >= maxFreeChunks {
			return
		}
		if cap(c.data) <= 2*processBatchBytes {
			sr.free = append(sr.free, c.data[:0])
		}
	}
}

// pendingBytes is the size of the pending input.
func (sr *stageRun) pendingBytes() int {
	n := 0
	for _, c := range sr.pending {
		n += len(c.data)
	}
	return n
}

// New opens the task of sub-topology sub for one partition of its input
// topic, from the store (which the runtime restored first).
func New(env *Env, sub *translate.SubTopology, partition int32) (*Task, error) {
	if err := state.CheckSubTopology(sub.ID); err != nil {
		return nil, err
	}
	t := &Task{
		env:        env,
		sub:        sub,
		partition:  partition,
		producer:   shuffle.ProducerID(sub.ID, partition),
		consumers:  map[string][]consumer{},
		producers:  env.Topics.Producers[sub.Input],
		reportedWM: minWatermark,
		batch:      env.DB.NewIndexedBatch(),
		packs:      packs{limit: packLimit(env)},
	}
	t.sinkLimit = t.smallestSinkLimit()
	t.prefix = state.TaskPrefix(sub.ID, partition)
	t.pages.db = env.DB
	for _, s := range sub.Stages {
		exec := env.Execs[s.ID]
		if exec == nil {
			return nil, fmt.Errorf("stage %s: no executor", s.ID)
		}
		sr := &stageRun{stage: s, exec: executor.ForTask(exec), idx: byte(len(t.stages)), gated: gatesInput(sub, s), sorted: s.TimeSortedInput, sortedUpTo: minWatermark, families: map[string]translate.TimerFamily{}}
		sr.checkpointAfter = checkpointAfter(env, s.Checkpointable)
		for _, f := range s.TimerFamilies {
			sr.families[f.TransformID+"/"+f.FamilyID] = f
		}
		if len(s.Transforms) > 0 && sub.Root.Kind == translate.RootPassthrough && s.Input == sub.Root.Output {
			// Input from a topic may be late; groups a GroupByKey root
			// fires for the stage never are (the root holds the stage's
			// input watermark at the window of each group it holds).
			sr.lateness, sr.expiring = s.StateExpiry[s.Transforms[0]]
		}
		if s.Stateful && t.user == nil {
			u, err := state.NewUser(t.env.DB, t.prefix)
			if err != nil {
				return nil, err
			}
			t.user = u
		}
		for transform, lateness := range s.StateExpiry {
			t.user.SetStateExpiry(transform, lateness)
		}
		var side harness.StateHandler
		if len(s.SideInputs) > 0 {
			side = state.NewSideInputs(env.DB, env.SideCache, s)
		}
		switch {
		case s.Stateful:
			ordered := map[[2]string]func([]byte) (int, error){}
			for _, ol := range s.OrderedLists {
				f, err := shuffle.ValueLength(env.Plan.Pipeline.GetComponents().GetCoders(), ol.ElementCoderID)
				if err != nil {
					return nil, fmt.Errorf("stage %s: ordered list state %s: %w", s.ID, ol.StateID, err)
				}
				ordered[[2]string{ol.TransformID, ol.StateID}] = f
			}
			sr.state = state.NewStageHandler(t.user, side, ordered)
		case side != nil:
			sr.state = side
		}
		if s.PagedGroups {
			sr.state = pagedState{pages: &t.pages, next: sr.state}
		}
		t.stages = append(t.stages, sr)
		t.consumers[s.Input] = append(t.consumers[s.Input], consumer{stage: sr})
	}
	for _, f := range sub.Flattens {
		for _, in := range f.Inputs {
			t.consumers[in] = append(t.consumers[in], consumer{flat: f})
		}
	}
	for i := range sub.Sinks {
		s := &sub.Sinks[i]
		t.consumers[s.PCollection] = append(t.consumers[s.PCollection], consumer{sink: s})
		if s.KafkaWrite != nil {
			ks, err := newKafkaSink(env.Plan, s)
			if err != nil {
				return nil, err
			}
			if t.kafkaSinks == nil {
				t.kafkaSinks = map[*translate.Sink]*kafkaSink{}
			}
			t.kafkaSinks[s] = ks
		}
	}
	if t.producers > 0 {
		agg, err := watermark.NewAggregator(t.producers)
		if err != nil {
			return nil, fmt.Errorf("sub-topology %d: %w", sub.ID, err)
		}
		t.inputWM = agg
	}
	if err := t.loadWatermarks(); err != nil {
		return nil, err
	}
	if err := t.loadGateSeq(); err != nil {
		return nil, err
	}
	if err := t.loadPiecesSeq(); err != nil {
		return nil, err
	}
	if err := t.loadSortedUpTo(); err != nil {
		return nil, err
	}
	if err := t.loadResiduals(); err != nil {
		return nil, err
	}
	ev, err := newEventTime(t)
	if err != nil {
		return nil, err
	}
	t.ev = ev
	if t.root, err = newRoot(t); err != nil {
		return nil, err
	}
	t.statusDirty = true
	return t, nil
}

// Store layout, after the task prefix (DESIGN.md §6):
//
//	'W' producer                     → latest watermark report (8 bytes)
//	'I'                              → the impulse was processed
//	'B' len key | key | len win | win | offset → a run of buffered GBK values (gbkRun)
//	'T' maxTs | len key | key | len win | win  → the window's end-of-window timer
//	'G' stage | max window ts | seq            → min timestamp | element count | input parked (gate.go)
//	'H' stage | min timestamp | seq            → (empty) index of input parked for side inputs
//	'S' stage                                  → time-sorted input released before this time (8 bytes)
//	'r' stage | seq                            → a splittable DoFn's residual (residuals.go)
//
// (The kinds are declared in host/internal/state/keys.go.)

func (t *Task) key(store state.Kind, parts ...[]byte) []byte {
	return state.Key(t.prefix, store, parts...)
}

func (t *Task) loadWatermarks() error {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(state.Watermark), UpperBound: t.key(state.Watermark + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	n := len(t.prefix) + 1
	for it.First(); it.Valid(); it.Next() {
		if t.inputWM != nil {
			t.inputWM.ReportMillis(string(it.Key()[n:]), int64(binary.BigEndian.Uint64(it.Value())))
		}
	}
	if _, closer, err := t.batch.Get(t.key(state.Impulse)); err == nil {
		closer.Close()
		t.impulseSeen = true
	}
	return it.Error()
}

// inputWatermark is the minimum over every producer's latest report, held at
// the minimum until every producer has reported.
func (t *Task) inputWatermark() int64 {
	if t.inputWM == nil {
		return minWatermark
	}
	return int64(t.inputWM.Watermark())
}

func (t *Task) Handle(ctx context.Context, recs []*kgo.Record) error {
	if s, ok := t.root.(*kafkaSource); ok {
		return t.handleSource(ctx, s, recs)
	}
	for _, r := range recs {
		if len(r.Value) == 0 {
			return fmt.Errorf("topic %s partition %d offset %d: empty record", r.Topic, r.Partition, r.Offset)
		}
		if r.Value[0] != shuffle.KindData && r.Value[0] != shuffle.KindDataPacked {
			if err := t.flushPending(ctx); err != nil {
				return err
			}
		}
		switch r.Value[0] {
		case shuffle.KindWatermark:
			p, wm, err := shuffle.DecodeWatermark(r.Value)
			if err != nil {
				return fmt.Errorf("topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			if t.inputWM == nil {
				return fmt.Errorf("topic %s partition %d offset %d: a watermark report from %s on an input without producers", r.Topic, r.Partition, r.Offset, p)
			}
			if old, ok := t.inputWM.Latest(p); !ok || mtime.Time(wm) > old {
				t.inputWM.ReportMillis(p, wm)
				if err := t.batch.Set(t.key(state.Watermark, []byte(p)), binary.BigEndian.AppendUint64(nil, uint64(wm)), nil); err != nil {
					return fmt.Errorf("task %s: recording the watermark of %s: %w", t.producer, p, err)
				}
			}
			if t.ev != nil {
				if err := t.ev.afterWatermark(ctx); err != nil {
					return err
				}
			}
		case shuffle.KindProcessingTime:
			if t.ev != nil {
				if err := t.ev.onProcessingTime(ctx, r); err != nil {
					return fmt.Errorf("topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
				}
			}
		case shuffle.KindData:
			if err := t.root.data(r.Value[1:], shuffle.Position(r.Offset, 0)); err != nil {
				return fmt.Errorf("topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
		case shuffle.KindDataPacked:
			if err := t.handlePacked(r); err != nil {
				return fmt.Errorf("topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
		case shuffle.KindGroupPiece, shuffle.KindGroupEnd:
			if err := t.groupPiece(r); err != nil {
				return fmt.Errorf("topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
		default:
			return fmt.Errorf("topic %s partition %d offset %d: unknown record kind %d", r.Topic, r.Partition, r.Offset, r.Value[0])
		}
	}
	if err := t.flushPending(ctx); err != nil {
		return err
	}
	return t.flushStages(ctx, false)
}

// flushPending processes the records a root holds back (a windowed
// GroupByKey merging windows, mergewindows.go). Nothing may observe the
// task's state or move its input watermark while records are held.
func (t *Task) flushPending(ctx context.Context) error {
	if f, ok := t.root.(pendingFlusher); ok {
		return f.flushPending(ctx)
	}
	return nil
}

// impulseElement is the impulse's one element: empty bytes at the minimum
// timestamp in the global window, with the no-firing pane.
var impulseElement = func() []byte {
	b := binary.BigEndian.AppendUint64(nil, state.EventTimeBits(minWatermark))
	b = binary.BigEndian.AppendUint32(b, 1) // one window: the global window, encoded as nothing
	b = append(b, 0x0F)                     // pane: no firing (first, last, timing unknown)
	return append(b, 0x00)                  // bytes coder: length 0
}()

// route sends an encoded windowed value of pcoll to everything that consumes
// it in this sub-topology. raw is only read during the call.
func (t *Task) route(pcoll string, raw []byte) error {
	for _, c := range t.consumers[pcoll] {
		switch {
		case c.stage != nil:
			in := raw
			if c.stage.expiring {
				live, dropped, err := t.liveWindows(c.stage, raw)
				if err != nil {
					return err
				}
				c.stage.droppedLate += int64(dropped)
				if live == nil {
					continue
				}
				in = live
			}
			t.mu.Lock()
			c.stage.appendPending(in)
			t.mu.Unlock()
		case c.flat != nil:
			if err := t.route(c.flat.Output, raw); err != nil {
				return err
			}
		case c.sink != nil:
			if err := t.sinkTo(c.sink, pcoll, raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// liveWindows is an element arriving for stateful stage sr in those of its
// windows that have not expired by the input watermark (their end plus the
// allowed lateness is not before it), and how many windows it dropped:
// raw itself when none expired, nil when all did. An expired window's
// state is gone or going (state/expiry.go), so Beam's runners drop the
// element there, as a GroupByKey drops one past its allowed lateness, and
// count each window dropped (dropped_late_elements); handed to the DoFn, it
// would see the window's state empty. The watermark is the one the element
// arrived under: the records before it moved it, the watermark report
// after it has not yet.
func (t *Task) liveWindows(sr *stageRun, raw []byte) (live []byte, dropped int, err error) {
	in := t.inputWatermark()
	if in <= minWatermark {
		return raw, 0, nil
	}
	codec := t.env.Codecs[sr.stage.Input]
	wv, err := codec.Next(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("stage %s: input: %w", sr.stage.ID, err)
	}
	wins, err := codec.SplitWindows(wv)
	if err != nil {
		return nil, 0, fmt.Errorf("stage %s: input: %w", sr.stage.ID, err)
	}
	keep := make([]bool, len(wins))
	for i, w := range wins {
		expiry, expires, err := state.WindowExpiry(w, sr.lateness)
		if err != nil {
			return nil, 0, fmt.Errorf("stage %s: input: %w", sr.stage.ID, err)
		}
		keep[i] = !expires || expiry >= in
		if !keep[i] {
			dropped++
		}
	}
	switch dropped {
	case 0:
		return raw, 0, nil
	case len(wins):
		return nil, dropped, nil
	}
	// The element in its live windows: the timestamp, their count, the
	// windows kept, then the pane and the element as they were.
	out := make([]byte, 0, len(wv.Raw))
	out = append(out, raw[:8]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(wins)-dropped))
	for i, w := range wins {
		if keep[i] {
			out = append(out, w...)
		}
	}
	out = append(out, wv.Pane...)
	out = append(out, wv.Elem...)
	return out, dropped, nil
}

func (t *Task) sinkTo(s *translate.Sink, pcoll string, raw []byte) error {
	if s.KafkaWrite != nil {
		return t.sinkToKafka(s, pcoll, raw)
	}
	if s.PagedGroups {
		if pieced, err := t.sinkIfPaged(s, pcoll, raw); pieced || err != nil {
			return err
		}
	}
	topic := t.env.Topics.ByName[s.Topic]
	packed := t.packs.limit > 0 && packable(topic.Kind)
	rec := &kgo.Record{Topic: t.env.Topics.Full(s.Topic)}
	if err := t.checkInternalSize(rec.Topic, pcoll, raw); err != nil {
		return err
	}
	var val []byte
	if !packed {
		val = make([]byte, 1+len(raw))
		val[0] = shuffle.KindData
		copy(val[1:], raw)
		rec.Value = val
		raw = val[1:]
	}
	n := t.env.Topics.Partitions[s.Topic]
	codec := t.env.Codecs[pcoll]
	if codec.IsKV() {
		wv, err := codec.Next(raw)
		if err != nil {
			return fmt.Errorf("pcollection %s: %w", pcoll, err)
		}
		key, value, err := codec.SplitKV(wv.Elem)
		if err != nil {
			return fmt.Errorf("pcollection %s: %w", pcoll, err)
		}
		if topic.SpreadBySize {
			p := t.spread.pick(rec.Topic, n, t.partition, restrictionSize(value))
			if packed {
				t.pack(rec.Topic, p, n, raw)
				return nil
			}
			rec.Partition = p
			t.env.Produce(rec)
			return nil
		}
		if packed {
			// A packed record has no key: its values' readers find each
			// key in the element, as they do for an unpacked record.
			t.pack(rec.Topic, shuffle.KeyPartition(key, n), n, raw)
			return nil
		}
		rec.Key = key
	} else if topic.Kind == translate.TopicRepartition {
		return fmt.Errorf("pcollection %s: a GroupByKey input must be a KV", pcoll)
	} else {
		rec.Partition = (t.rr.Add(1) & 0x7fffffff) % n
		if packed {
			t.pack(rec.Topic, rec.Partition, n, raw)
			return nil
		}
	}
	t.env.Produce(rec)
	return nil
}

// flushStages hands pending input to the stages in topological order; with
// closing set it also finishes every bundle, and repeats until no stage has
// input left. (A stage's output goes to later stages only, and residuals to
// the store, so one closing pass leaves none: the repetition is a guard.)
//
// Bundle boundaries: a stage's input goes to its executor in chunks of
// whole elements (about processBatchBytes each), and the task regains
// control only between them. After each chunk, and at the end of each call
// for a bundle that got none, a bundle that is full (Env.MaxBundleSize
// elements) or old (open Env.MaxBundleTime) is finished: the next chunk
// opens a new one. So a long cycle (a slow stage, a poll of many records)
// is cut into bundles by count and by time, none of which straddles the
// commit: PrepareCommit finishes every bundle before the cycle's
// transaction ends, and checks that none is left open.
func (t *Task) flushStages(ctx context.Context, closing bool) error {
	for {
		idle := true
		for _, sr := range t.stages {
			t.mu.Lock()
			var in []chunk
			if closing || sr.sorted || sr.pendingBytes() >= processBatchBytes {
				in, sr.pending = sr.pending, nil
			}
			t.mu.Unlock()
			taken := in // their buffers are free once processed (or parked)
			if sr.gated {
				var err error
				if in, err = t.gate(sr, in); err != nil {
					return err
				}
			}
			if sr.sorted {
				var err error
				if in, err = t.sortByTime(sr, in, t.inputWatermark()); err != nil {
					return err
				}
			}
			for _, c := range in {
				idle = false
				if sr.bundle == nil && sr.begun && t.pastCheckpoint(sr) {
					if err := t.deferElements(sr, c); err != nil {
						return err
					}
					continue
				}
				if err := t.process(ctx, sr, c); err != nil {
					return err
				}
				if t.bundleDone(sr) {
					if err := t.finish(sr); err != nil {
						return err
					}
				}
			}
			if sr.bundle != nil && (closing || t.bundleDone(sr)) {
				if err := t.finish(sr); err != nil {
					return err
				}
			}
			if len(taken) > 0 {
				t.mu.Lock()
				sr.recycle(taken)
				t.mu.Unlock()
			}
		}
		if !closing || idle {
			return nil
		}
		left := false
		t.mu.Lock()
		for _, sr := range t.stages {
			left = left || len(sr.pending) > 0
		}
		t.mu.Unlock()
		if !left {
			return nil
		}
	}
}

// bundleDone reports whether sr's open bundle must close at this chunk
// boundary: it has MaxBundleSize input elements, or has been open
// MaxBundleTime.
func (t *Task) bundleDone(sr *stageRun) bool {
	if sr.bundle == nil {
		return false
	}
	if sr.count >= t.env.MaxBundleSize || sr.checkpointAfter > 0 && sr.count > 0 {
		return true
	}
	return t.env.MaxBundleTime > 0 && t.now().Sub(sr.openedAt) >= t.env.MaxBundleTime
}

// sideCacheTokens are the cache tokens of the side inputs of stage s for
// the bundle about to start (state.SideCache.Token): one token for all,
// since any side input write makes a new one.
func (t *Task) sideCacheTokens(s *translate.Stage) []*fnpb.ProcessBundleRequest_CacheToken {
	if len(s.SideInputs) == 0 || t.env.SideCache == nil {
		return nil
	}
	tok := t.env.SideCache.Token()
	out := make([]*fnpb.ProcessBundleRequest_CacheToken, len(s.SideInputs))
	for i, si := range s.SideInputs {
		out[i] = &fnpb.ProcessBundleRequest_CacheToken{
			Type: &fnpb.ProcessBundleRequest_CacheToken_SideInput_{SideInput: &fnpb.ProcessBundleRequest_CacheToken_SideInput{
				TransformId: si.TransformID, SideInputId: si.LocalName,
			}},
			Token: tok,
		}
	}
	return out
}

// process hands a chunk of input to sr's open bundle, opening one first if
// none is; an empty chunk only opens it (timers follow).
func (t *Task) process(ctx context.Context, sr *stageRun, in chunk) error {
	if sr.bundle == nil {
		sr.carry = map[string][]byte{}
		sr.timerCarry = map[string][]byte{}
		io := executor.BundleIO{State: sr.state, CacheTokens: t.sideCacheTokens(sr.stage)}
		if len(sr.families) > 0 {
			io.Timers = func(transformID, familyID string, data []byte) error {
				k := transformID + "/" + familyID
				fam, ok := sr.families[k]
				if !ok {
					return fmt.Errorf("stage %s: timer for unknown family %s", sr.stage.ID, k)
				}
				c := sr.timerCarry[k]
				err := t.user.SetTimers(fam, t.env.TimerCodecs[[2]string{transformID, familyID}], data, &c)
				sr.timerCarry[k] = c
				return err
			}
		}
		b, err := sr.exec.StartBundle(ctx, func(pcoll string, data []byte) error { return t.emit(sr, pcoll, data) }, io)
		if err != nil {
			return fmt.Errorf("stage %s: %w", sr.stage.ID, err)
		}
		sr.bundle, sr.count, sr.openedAt, sr.begun = b, 0, t.now(), true
		sr.input, sr.output = nil, false // a bundle that failed or was aborted left them
	}
	if len(in.data) == 0 {
		return nil
	}
	sr.count += in.elements
	if sr.checkpointAfter > 0 {
		sr.input = append(sr.input, slices.Clone(in.data))
	}
	if err := sr.bundle.Process(in.data); err != nil {
		sr.bundle = nil
		return fmt.Errorf("stage %s: %w", sr.stage.ID, err)
	}
	return nil
}

func (t *Task) finish(sr *stageRun) error {
	b := sr.bundle
	sr.bundle = nil
	res, err := t.finishBundle(sr, b)
	if err != nil {
		return fmt.Errorf("stage %s: %w", sr.stage.ID, err)
	}
	for pcoll, rest := range sr.carry {
		if len(rest) > 0 {
			return fmt.Errorf("stage %s: output %s ends inside an element (%d bytes left)", sr.stage.ID, pcoll, len(rest))
		}
	}
	t.addMetrics(res.Metrics)
	if res.Finalize != nil {
		t.finalizers = append(t.finalizers, res.Finalize)
	}
	if len(res.Residuals) > 0 && t.draining() {
		t.env.Logger.Info("draining: residuals of a splittable DoFn dropped", "stage", sr.stage.ID, "residuals", len(res.Residuals))
		return nil
	}
	if len(res.Residuals) > 0 && !res.Checkpointed {
		sr.selfCheckpoints = true
	}
	for _, r := range res.Residuals {
		if err := t.keepResidual(sr, r); err != nil {
			return err
		}
	}
	return t.keepUnprocessed(sr, res)
}

// addMetrics counts a bundle's (or the host's own) metrics as attempted, and
// as committed once the cycle commits.
func (t *Task) addMetrics(infos []*pipepb.MonitoringInfo) {
	if len(infos) == 0 {
		return
	}
	t.env.Metrics.Attempted.Add(infos)
	t.cycleMetrics = append(t.cycleMetrics, infos)
}

// emit receives a chunk of a stage's output, which may end inside an
// element: the rest is carried to the next chunk.
func (t *Task) emit(sr *stageRun, pcoll string, data []byte) error {
	codec := t.env.Codecs[pcoll]
	if codec == nil {
		return fmt.Errorf("stage %s: output %s has no wire coder", sr.stage.ID, pcoll)
	}
	if c := sr.carry[pcoll]; len(c) > 0 {
		data = append(c, data...)
	}
	sr.output = sr.output || len(data) > 0
	for len(data) > 0 {
		wv, err := codec.Next(data)
		if err == shuffle.ErrShort {
			break
		}
		if err != nil {
			return fmt.Errorf("stage %s: output %s: %w", sr.stage.ID, pcoll, err)
		}
		if err := t.route(pcoll, wv.Raw); err != nil {
			return err
		}
		data = data[len(wv.Raw):]
	}
	sr.carry[pcoll] = append([]byte(nil), data...)
	return nil
}

// PrepareCommit fires what the input watermark allows, resumes the
// residuals that are due, closes every bundle and reports the output
// watermark if it moved.
func (t *Task) PrepareCommit(ctx context.Context) error {
	in := t.inputWatermark()
	if t.ev != nil {
		t.ev.lastIn = in
	}
	if err := t.root.prepare(ctx, in); err != nil {
		return err
	}
	if err := t.resumeResiduals(); err != nil {
		return err
	}
	if err := t.flushStages(ctx, true); err != nil {
		return err
	}
	// Waits for bundles to grow old enough to take from are bounded in
	// all (the task's clock may be a test's, standing still).
	for waited := time.Duration(0); ; {
		took, retryIn, left, err := t.stealWork()
		if err != nil {
			return err
		}
		if !took {
			if retryIn <= 0 || waited+retryIn > maxStealWait {
				break
			}
			w, err := waitForSteal(ctx, retryIn, left)
			if err != nil {
				return err
			}
			waited += w
			continue
		}
		if err := t.flushStages(ctx, true); err != nil {
			return err
		}
	}
	for _, sr := range t.stages {
		if sr.deferred > 0 {
			t.env.Logger.Debug("the cycle's checkpoint time passed: input of a splittable DoFn kept for the next cycle",
				"task", t.producer, "stage", sr.stage.ID, "elements", sr.deferred)
		}
		sr.deferred, sr.begun = 0, false
		if sr.droppedLate > 0 {
			t.addMetrics([]*pipepb.MonitoringInfo{hostCounter(sr.stage.Transforms[0], "dropped_late_elements", sr.droppedLate)})
			sr.droppedLate = 0
		}
	}
	if t.user != nil {
		// The stateful stages' input watermark is the root's output
		// watermark: the task's input watermark, but where a GroupByKey
		// root holds groups back (due groups a cycle's limit left, groups
		// waiting for side inputs) the earliest of them, so that no timer
		// fires and no state expires before the group it waits for came.
		stageWM, err := t.root.watermark(in)
		if err != nil {
			return err
		}
		// Input parked for side inputs holds it too, as pushed-back
		// elements hold a ParDo's input watermark on Beam's runners: an
		// element parked in sliding windows shares a window with
		// elements handed over already, whose timer must not fire, nor
		// its state expire, before it came.
		parked, err := t.gateHold(false)
		if err != nil {
			return err
		}
		stageWM = min(stageWM, parked)
		if err := t.fireTimers(ctx, stageWM); err != nil {
			return err
		}
		// After the timers: those of an expiring window have fired.
		if _, err := t.user.ExpireState(stageWM); err != nil {
			return fmt.Errorf("task %s: expiring user state: %w", t.producer, err)
		}
	}
	// No bundle straddles the commit (DESIGN.md §6): a bundle's input
	// offsets commit with this cycle, so all its output, state and
	// metrics must be in it too. One left open would put the rest in the
	// next cycle, which may abort: that output would be lost, or repeated
	// by a replay.
	for _, sr := range t.stages {
		if sr.bundle != nil {
			return fmt.Errorf("task %s: stage %s: a bundle is still open at the commit", t.producer, sr.stage.ID)
		}
	}
	out, err := t.outputWatermark(in)
	if err != nil {
		return err
	}
	if out > t.reportedWM || t.statusDirty {
		t.reportWatermark(out)
	} else if t.pendingStatus == nil && t.now().Sub(t.statusAt) >= statusRefresh {
		// Unchanged, said again: a done check that missed a status (on
		// the embedded broker one sometimes misses the status topic's
		// first transaction) would wait forever for a task whose
		// watermark moves no more.
		t.pendingStatus = &Status{Watermark: t.reportedWM}
		t.statusAt = t.now()
	}
	if t.ev != nil {
		t.ev.afterPrepare()
	}
	t.flushPacks() // when no report went out
	return nil
}

func (t *Task) outputWatermark(in int64) (int64, error) {
	out, err := t.root.watermark(in)
	if err != nil {
		return 0, err
	}
	hold, err := t.gateHold(true)
	if err != nil {
		return 0, err
	}
	if t.user != nil {
		th, err := t.user.TimerHold()
		if err != nil {
			return 0, err
		}
		hold = min(hold, th)
	}
	return min(out, hold, t.residualHold()), nil
}

// reportWatermark sends the output watermark to every partition of every
// topic this task writes, and the task's status.
func (t *Task) reportWatermark(wm int64) {
	wm = max(wm, t.reportedWM)
	t.reportedWM, t.statusDirty = wm, false
	t.env.Logger.Debug("watermark", "task", t.producer, "watermark", FormatWatermark(wm), "producers", t.producers)
	t.flushPacks() // the data before the report that covers it
	seen := map[string]bool{}
	for _, s := range t.sub.Sinks {
		if seen[s.Topic] || s.KafkaWrite != nil { // user topics carry only the user's records
			continue
		}
		seen[s.Topic] = true
		val := shuffle.EncodeWatermark(t.producer, wm)
		for p := int32(0); p < t.env.Topics.Partitions[s.Topic]; p++ {
			t.env.Produce(&kgo.Record{Topic: t.env.Topics.Full(s.Topic), Partition: p, Value: val})
		}
	}
	// The status goes out after the commit (sendStatus): the job server
	// ends a bounded job on it, and by then the bundles it covers must be
	// committed and finalized.
	t.pendingStatus = &Status{Watermark: wm}
	t.statusAt = t.now()
}

// FinalStatusPending reports whether the status waiting for the next cycle
// (SendStatus) is the task's last: the maximum watermark, which the job
// server ends a bounded job on. The runtime runs that cycle at once rather
// than after a poll for records that will not come.
func (t *Task) FinalStatusPending() bool {
	return t.pendingStatus != nil && t.pendingStatus.Watermark >= maxWatermark
}

// SendStatus produces the status recorded by the last watermark report, if
// any; it reports whether it did.
func (t *Task) SendStatus() bool {
	if t.pendingStatus == nil {
		return false
	}
	t.env.Produce(&kgo.Record{
		Topic: t.env.Topics.Full(shuffle.StatusTopic),
		Key:   []byte(t.producer),
		Value: EncodeStatus(*t.pendingStatus),
	})
	t.pendingStatus = nil
	return true
}

func (t *Task) CommitState() error {
	t.pages.reset()
	if t.user != nil {
		if err := t.user.Commit(); err != nil {
			return fmt.Errorf("task %s: committing user state: %w", t.producer, err)
		}
	}
	if n := t.changelogNext.Swap(0); n > 0 {
		if err := t.batch.Set(t.key(state.Changelog), binary.BigEndian.AppendUint64(nil, uint64(n)), nil); err != nil {
			return err
		}
	}
	if err := t.batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("task %s: committing state: %w", t.producer, err)
	}
	t.batch.Close() // committed: only releases it for reuse
	t.batch = t.env.DB.NewIndexedBatch()
	t.commitResiduals()
	return nil
}

// Abort drops the open bundles' state; their input is redelivered to the
// partition's next owner because its offsets were not committed.
func (t *Task) Abort() {
	t.pages.reset()
	t.batch.Close()
	t.dropPacks()
	if t.user != nil {
		t.user.Abort()
	}
	for _, sr := range t.stages {
		sr.bundle = nil
		executor.Release(sr.exec)
	}
}

// Finalize runs the finalizers of the committed cycle's bundles and counts
// their metrics as committed; the runtime calls it once the cycle committed.
func (t *Task) Finalize(ctx context.Context) {
	for _, m := range t.cycleMetrics {
		t.env.Metrics.Committed.Add(m)
	}
	t.cycleMetrics = nil
	for _, f := range t.finalizers {
		if err := f(ctx); err != nil {
			t.env.Logger.Warn("bundle finalization failed", "task", t.producer, "error", err)
		}
	}
	t.finalizers = nil
}

// ID is the task's producer id (shuffle.ProducerID).
func (t *Task) ID() string { return t.producer }

// FormatWatermark prints a watermark (milliseconds since the epoch) as a
// time: UTC to the millisecond, or -inf / +inf at Beam's bounds.
func FormatWatermark(ms int64) string {
	switch {
	case ms <= minWatermark:
		return "-inf"
	case ms >= maxWatermark:
		return "+inf"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}
