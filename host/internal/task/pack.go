package task

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// packs are the DATA_PACKED records a task is filling, one per internal
// topic and partition (DESIGN.md §4). Env.RecordPackBytes bounds each.
//
// Invariants:
//   - A value goes to the partition it would go to unpacked (its key's
//     hash, or the round-robin choice), so grouping does not change.
//   - Within a partition the task's values keep their order: a value too
//     large to pack goes out alone only after the partition's open pack.
//   - Every pack is produced before the task's next watermark or
//     processing-time report (report and broadcast flush them) and before
//     PrepareCommit returns, so it is in the cycle's transaction, ahead of
//     the report that covers it; Abort drops the open packs with the
//     cycle, so nothing straddles a commit.
//   - Executors route output concurrently (emit), so the packs are under
//     mu; the producer is called under it too, which keeps each
//     partition's records in order.
type packs struct {
	mu    sync.Mutex
	limit int                       // bytes of values per pack; 0: no packing
	open  map[string][]shuffle.Pack // by the topic's Kafka name, then partition
}

// packLimit is the bytes of values a pack may hold: RecordPackBytes, less
// when an internal data topic takes smaller records (its max.message.bytes,
// which the producer's batches for it keep to).
func packLimit(env *Env) int {
	limit := env.RecordPackBytes
	for name, tp := range env.Topics.ByName {
		if !packable(tp.Kind) {
			continue
		}
		if m := int(env.Topics.RecordLimit(env.Topics.Full(name))); limit > m-packOverhead {
			limit = max(0, m-packOverhead)
		}
	}
	return limit
}

// packOverhead bounds what a pack adds to its values: the kind byte and
// count, and the record's own overhead in a batch.
const packOverhead = 1 + 5 + recordOverhead

// packable reports whether records of a topic of kind k are packed: every
// internal data topic but the impulse topic, whose one record is its
// whole content.
func packable(k translate.TopicKind) bool {
	switch k {
	case translate.TopicRepartition, translate.TopicRedistribute, translate.TopicSideInput:
		return true
	}
	return false
}

// pack packs raw for partition p of topic (of n partitions), producing the
// pack first when raw would take it past the limit. A value larger than
// the limit on its own goes out as a DATA record.
func (t *Task) pack(topic string, p, n int32, raw []byte) {
	ps := &t.packs
	ps.mu.Lock()
	defer ps.mu.Unlock()
	open := ps.open[topic]
	if open == nil {
		if ps.open == nil {
			ps.open = map[string][]shuffle.Pack{}
		}
		open = make([]shuffle.Pack, n)
		ps.open[topic] = open
	}
	pk := &open[p]
	if pk.Count() > 0 && (pk.Size()+len(raw) > ps.limit || pk.Count() == shuffle.MaxPackedValues) {
		t.producePack(topic, p, pk)
	}
	if len(raw) > ps.limit {
		val := make([]byte, 1+len(raw))
		val[0] = shuffle.KindData
		copy(val[1:], raw)
		t.env.Produce(&kgo.Record{Topic: topic, Partition: p, Value: val})
		return
	}
	pk.Add(raw)
}

func (t *Task) producePack(topic string, p int32, pk *shuffle.Pack) {
	t.env.Produce(&kgo.Record{Topic: topic, Partition: p, Value: pk.Take()})
}

// flushPacks produces every open pack (in topic and partition order).
func (t *Task) flushPacks() {
	ps := &t.packs
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, topic := range slices.Sorted(maps.Keys(ps.open)) {
		open := ps.open[topic]
		for p := range open {
			if open[p].Count() > 0 {
				t.producePack(topic, int32(p), &open[p])
			}
		}
	}
}

// dropPacks forgets the open packs: their cycle aborted.
func (t *Task) dropPacks() {
	t.packs.mu.Lock()
	clear(t.packs.open)
	t.packs.mu.Unlock()
}

// handlePacked routes each value of a DATA_PACKED record to the root, at
// its position.
func (t *Task) handlePacked(r *kgo.Record) error {
	codec := t.env.Codecs[t.env.Topics.ByName[t.sub.Input].PCollection]
	if codec == nil {
		return fmt.Errorf("topic %s: no wire coder to unpack records with", r.Topic)
	}
	return codec.EachPacked(r.Value, func(i int, raw []byte) error {
		return t.root.data(raw, shuffle.Position(r.Offset, i))
	})
}
