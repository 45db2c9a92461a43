package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/harness"
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
// Store layout (the 0xFF prefix is out of the range of task prefixes, whose
// first byte is the high byte of a small sub-topology id):
//
//	0xFF 'S' len topic | topic | len win | win | offset → encoded element
//	0xFF 'M' len topic | topic | len win | win | len key | key | offset → encoded value
//
// The record's offset makes every write idempotent, so re-reading the topic
// after a restart changes nothing.

var sidePrefix = []byte{0xFF}

type sideTopic struct {
	name, full string
	codec      *shuffle.ElementCodec
	multimap   bool // also index values by key
	// reports aggregates the producers' watermark reports; its watermark is
	// published (watermark) only once the data it covers is in the store.
	reports   *watermark.Aggregator
	watermark atomic.Int64
}

// sideInputReader owns the reading of all side topics of an instance.
type sideInputReader struct {
	db     *pebble.DB
	topics map[string]*sideTopic // by full topic name
	byName map[string]*sideTopic
}

func newSideInputReader(inst *instance) (*sideInputReader, error) {
	r := &sideInputReader{db: inst.db, topics: map[string]*sideTopic{}, byName: map[string]*sideTopic{}}
	plan := inst.cfg.plan
	for _, tp := range plan.Topics {
		if tp.Kind != translate.TopicSideInput {
			continue
		}
		st := &sideTopic{
			name:  tp.Name,
			full:  inst.cfg.topics.full(tp.Name),
			codec: inst.codecs[tp.PCollection],
		}
		agg, err := watermark.NewAggregator(inst.cfg.topics.producers[tp.Name])
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
func (r *sideInputReader) run(ctx context.Context, brokers string) error {
	if len(r.topics) == 0 {
		return nil
	}
	parts := map[string]map[int32]kgo.Offset{}
	for full := range r.topics {
		parts[full] = map[int32]kgo.Offset{0: kgo.NewOffset().AtStart()}
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(brokers, ",")...),
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
			if debugSide {
				fmt.Printf("side rec %s off %d kind %d len %d\n", rec.Topic, rec.Offset, rec.Value[0], len(rec.Value))
			}
		})
		if perr != nil {
			b.Close()
			return perr
		}
		// Data first, then the watermark that says it is complete.
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("side input reader: %w", err)
		}
		b.Close()
		for st := range moved {
			if wm := int64(st.reports.Watermark()); wm > st.watermark.Load() {
				st.watermark.Store(wm)
			}
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
	case shuffle.KindProcessingTime:
		return nil // a TestStream's synthetic clock (eventtime.go): side inputs do not use it
	default:
		return fmt.Errorf("unknown record kind %d", rec.Value[0])
	}
	wv, err := st.codec.Next(rec.Value[1:])
	if err != nil {
		return err
	}
	windows, err := st.codec.SplitWindows(wv)
	if err != nil {
		return err
	}
	off := binary.BigEndian.AppendUint64(nil, uint64(rec.Offset))
	for _, win := range windows {
		if err := b.Set(sideKey('S', st.name, win, nil, off), wv.Elem, nil); err != nil {
			return err
		}
		if st.multimap {
			k, v, err := st.codec.SplitKV(wv.Elem)
			if err != nil {
				return fmt.Errorf("multimap side input: %w", err)
			}
			if err := b.Set(sideKey('M', st.name, win, k, off), v, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// sideKey builds a side input store key; with key nil it is the prefix of a
// window's (or, for 'M', of a window and key's) entries when off is nil.
func sideKey(store byte, topic string, win, key, off []byte) []byte {
	k := append(append([]byte(nil), sidePrefix...), store)
	k = appendLP(k, []byte(topic))
	k = appendLP(k, win)
	if key != nil {
		k = appendLP(k, key)
	}
	return append(k, off...)
}

// sideState serves the Fn API state requests of one stage's side inputs.
type sideState struct {
	harness.UnsupportedState
	db     *pebble.DB
	topics map[[2]string]translate.SideInput // by transform id, side input id
}

const sidePageBytes = 1 << 20

func newSideState(db *pebble.DB, s *translate.Stage) *sideState {
	st := &sideState{db: db, topics: map[[2]string]translate.SideInput{}}
	for _, si := range s.SideInputs {
		st.topics[[2]string{si.TransformID, si.LocalName}] = si
	}
	return st
}

// Get implements harness.StateHandler for iterable and multimap side inputs.
// The continuation token is the store key to resume from.
func (s *sideState) Get(ctx context.Context, key *fnpb.StateKey, token []byte) ([]byte, []byte, error) {
	var prefix []byte
	keysOnly := false
	switch {
	case key.GetIterableSideInput() != nil:
		k := key.GetIterableSideInput()
		si, ok := s.topics[[2]string{k.GetTransformId(), k.GetSideInputId()}]
		if !ok {
			return nil, nil, fmt.Errorf("transform %s: unknown side input %s", k.GetTransformId(), k.GetSideInputId())
		}
		prefix = sideKey('S', si.Topic, k.GetWindow(), nil, nil)
	case key.GetMultimapSideInput() != nil:
		k := key.GetMultimapSideInput()
		si, ok := s.topics[[2]string{k.GetTransformId(), k.GetSideInputId()}]
		if !ok || !si.Multimap {
			return nil, nil, fmt.Errorf("transform %s: unknown multimap side input %s", k.GetTransformId(), k.GetSideInputId())
		}
		prefix = sideKey('M', si.Topic, k.GetWindow(), k.GetKey(), nil)
	case key.GetMultimapKeysSideInput() != nil:
		k := key.GetMultimapKeysSideInput()
		si, ok := s.topics[[2]string{k.GetTransformId(), k.GetSideInputId()}]
		if !ok || !si.Multimap {
			return nil, nil, fmt.Errorf("transform %s: unknown multimap side input %s", k.GetTransformId(), k.GetSideInputId())
		}
		prefix = sideKey('M', si.Topic, k.GetWindow(), nil, nil)
		keysOnly = true
	default:
		return s.UnsupportedState.Get(ctx, key, token)
	}
	lower := prefix
	if len(token) > 0 {
		if !bytes.HasPrefix(token, prefix) {
			return nil, nil, fmt.Errorf("state continuation token does not belong to this side input")
		}
		lower = token
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	var out []byte
	var lastKey []byte
	for it.First(); it.Valid(); it.Next() {
		if keysOnly {
			// Entries are ordered by key: emit each distinct key once.
			k, _, err := readLP(it.Key()[len(prefix):])
			if err != nil {
				return nil, nil, err
			}
			if lastKey != nil && bytes.Equal(k, lastKey) {
				continue
			}
			lastKey = append(lastKey[:0], k...)
			out = append(out, k...)
		} else {
			out = append(out, it.Value()...)
		}
		if len(out) >= sidePageBytes && !keysOnly {
			if it.Next() {
				return out, append([]byte(nil), it.Key()...), it.Error()
			}
			break
		}
	}
	if debugSide {
		fmt.Printf("side state get %v prefix %x -> %d bytes\n", key, prefix, len(out))
	}
	return out, nil, it.Error()
}

const debugSide = false
