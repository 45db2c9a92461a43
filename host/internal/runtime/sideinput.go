package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/state"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/watermark"
	"github.com/ksrunner/ksrunner/translate"
)

// Side inputs. Every instance reads every side input topic whole, outside the
// consumer group, into its Pebble store, and follows the topic's watermark
// reports. A stage that reads side inputs holds its input back (in the
// task's store, see gate) until every side input's watermark has passed the
// windows of that input, so a side input is complete before a bundle reads
// it; the Fn API state requests for it are then served from the store.
//

// sideCacheBytes bounds the memory an instance keeps of side input reads
// (state.SideCache): a 100,000-entry map side input's lookups fit.
const sideCacheBytes = 32 << 20

type sideTopic struct {
	name, full string
	codec      *shuffle.ElementCodec
	multimap   bool // also index values by key
	// readyAtFirst: the topic's side input is ready once its first firing
	// is in the store (translate.Topic.ReadyAtFirstFiring); fired says it
	// is (run's goroutine only).
	readyAtFirst, fired bool
	// reports aggregates the producers' watermark reports; its watermark is
	// published (watermark) only once the data it covers is in the store.
	reports   *watermark.Aggregator
	watermark atomic.Int64
	// read counts the data values read since the last metrics update (run's
	// goroutine only).
	read int64
}

// sideInputReader owns the reading of all side topics of an instance.
type sideInputReader struct {
	db      *pebble.DB
	cache   *state.SideCache      // the tasks' reads; invalidated at each write
	metrics *metrics.Job          // side_input_elements_read; nil: none
	topics  map[string]*sideTopic // by full topic name
	byName  map[string]*sideTopic
}

func newSideInputReader(inst *instance) (*sideInputReader, error) {
	r := &sideInputReader{db: inst.db, cache: state.NewSideCache(sideCacheBytes), metrics: inst.cfg.Metrics, topics: map[string]*sideTopic{}, byName: map[string]*sideTopic{}}
	plan := inst.cfg.Plan
	for _, tp := range plan.Topics {
		if tp.Kind != translate.TopicSideInput {
			continue
		}
		st := &sideTopic{
			name:  tp.Name,
			full:  inst.topics.Full(tp.Name),
			codec: inst.codecs[tp.PCollection],
		}
		st.readyAtFirst = tp.ReadyAtFirstFiring
		agg, err := watermark.NewAggregator(inst.topics.Producers[tp.Name])
		if err != nil {
			return nil, fmt.Errorf("side input topic %s: %w", tp.Name, err)
		}
		st.reports = agg
		st.watermark.Store(minWatermark)
		r.topics[st.full] = st
		r.byName[tp.Name] = st
	}
	for _, sub := range plan.SubTopologies {
		for _, s := range sub.Stages {
			for _, si := range s.SideInputs {
				if si.Multimap {
					r.byName[si.Topic].multimap = true
				}
			}
		}
	}
	return r, nil
}

// watermark is the side topic's watermark: complete up to it.
func (r *sideInputReader) watermark(topic string) int64 {
	st := r.byName[topic]
	if st == nil {
		return minWatermark
	}
	return st.watermark.Load()
}

// run reads the side topics until ctx ends.
func (r *sideInputReader) run(ctx context.Context, brokers string, sec *kafkaconn.Security) error {
	if len(r.topics) == 0 {
		return nil
	}
	parts := map[string]map[int32]kgo.Offset{}
	for full := range r.topics {
		parts[full] = map[int32]kgo.Offset{0: kgo.NewOffset().AtStart()}
	}
	cl, err := kafkaconn.NewClient(brokers, sec,
		kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return fmt.Errorf("side input reader: %w", err)
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fetches.Err0(); err != nil {
			return fmt.Errorf("side input reader: %w", err)
		}
		b := r.db.NewBatch()
		moved := map[*sideTopic]bool{}
		var perr error
		fetches.EachRecord(func(rec *kgo.Record) {
			if perr != nil {
				return
			}
			st := r.topics[rec.Topic]
			if err := r.apply(b, st, rec); err != nil {
				perr = fmt.Errorf("side input topic %s offset %d: %w", rec.Topic, rec.Offset, err)
			}
			moved[st] = true
		})
		if perr != nil {
			b.Close()
			return perr
		}
		// Data first, then the watermark that says it is complete.
		wrote := !b.Empty()
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("side input reader: %w", err)
		}
		b.Close()
		if wrote {
			r.cache.Invalidate() // after the commit: see state.SideCache
		}
		for st := range moved {
			wm := int64(st.reports.Watermark())
			if st.fired {
				// Its window never closes while the source runs; the
				// first firing, committed above, makes it ready.
				wm = maxWatermark
			}
			if wm > st.watermark.Load() {
				st.watermark.Store(wm)
			}
			r.countRead(st)
		}
	}
}

func (r *sideInputReader) apply(b *pebble.Batch, st *sideTopic, rec *kgo.Record) error {
	if len(rec.Value) == 0 {
		return fmt.Errorf("empty record")
	}
	switch rec.Value[0] {
	case shuffle.KindWatermark:
		p, wm, err := shuffle.DecodeWatermark(rec.Value)
		if err != nil {
			return err
		}
		st.reports.ReportMillis(p, wm)
		return nil
	case shuffle.KindData:
		st.fired = st.readyAtFirst
		return r.applyValue(b, st, rec.Value[1:], shuffle.Position(rec.Offset, 0))
	case shuffle.KindDataPacked:
		st.fired = st.readyAtFirst
		return st.codec.EachPacked(rec.Value, func(i int, raw []byte) error {
			return r.applyValue(b, st, raw, shuffle.Position(rec.Offset, i))
		})
	case shuffle.KindProcessingTime:
		return nil // a TestStream's synthetic clock (eventtime.go): side inputs do not use it
	}
	return fmt.Errorf("unknown record kind %d", rec.Value[0])
}

// applyValue stores one windowed value of a side input at its position in
// the topic (shuffle.Position), which keeps the entries in arrival order.
// Every pane of a window stays: a side input fired several times holds
// the elements of all its firings, as Beam's ValidatesRunner test
// test_multi_triggered_gbk_side_input has it (an early sum and the on-time
// one, both in the list).
func (r *sideInputReader) applyValue(b *pebble.Batch, st *sideTopic, raw []byte, pos int64) error {
	st.read++
	wv, err := st.codec.Next(raw)
	if err != nil {
		return err
	}
	windows, err := st.codec.SplitWindows(wv)
	if err != nil {
		return err
	}
	off := binary.BigEndian.AppendUint64(nil, uint64(pos))
	for _, win := range windows {
		if err := b.Set(state.SideKey('S', st.name, win, nil, off), wv.Elem, nil); err != nil {
			return err
		}
		if st.multimap {
			k, v, err := st.codec.SplitKV(wv.Elem)
			if err != nil {
				return fmt.Errorf("multimap side input: %w", err)
			}
			if err := b.Set(state.SideKey('M', st.name, win, k, off), v, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// countRead adds the values of st stored since the last call to the job's
// counter side_input_elements_read (namespace ksrunner, "transform" the
// side input topic's name), attempted and committed alike: they are in the
// store already. An instance reads a side input once, whatever number of
// tasks and bundles read it, so the counter shows the topic's values once
// per instance.
func (r *sideInputReader) countRead(st *sideTopic) {
	if r.metrics == nil || st.read == 0 {
		return
	}
	var buf bytes.Buffer
	coder.EncodeVarInt(st.read, &buf)
	st.read = 0
	info := []*pipepb.MonitoringInfo{{
		Urn:     "beam:metric:user:sum_int64:v1",
		Type:    "beam:metrics:sum_int64:v1",
		Payload: buf.Bytes(),
		Labels:  map[string]string{"PTRANSFORM": st.name, "NAMESPACE": "ksrunner", "NAME": MetricSideInputRead},
	}}
	r.metrics.Attempted.Add(info)
	r.metrics.Committed.Add(info)
}

// MetricSideInputRead is the counter of side input values an instance read.
const MetricSideInputRead = "side_input_elements_read"
