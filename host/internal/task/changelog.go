package task

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
)

// Changelogs (DESIGN.md §6). Every sub-topology has a compacted changelog
// topic with one partition per task. In each commit cycle a task produces
// every mutation of its state batches (the task batch and the user batch)
// to its changelog partition: key = the store key, value = 0x01 | value for
// a set, no value (a tombstone) for a delete. The batches are applied to
// Pebble only after the cycle commits (in exactly_once, the Kafka
// transaction that holds the changelog records, the outputs and the
// consumed offsets).
//
// Invariants:
//   - A task's changelog partition has exactly one writer: the instance
//     owning the task. Its records are the task's committed state history;
//     replaying them in order onto an empty key range rebuilds the store.
//   - The store key state.Changelog ('C') of a task holds P, the changelog
//     offset up to which (exclusive) the local store has applied every
//     committed changelog record. It is written into the task batch after
//     the cycle's changelog records were produced, so it is itself never in
//     the changelog, and it is applied atomically with the state it covers.
//   - Task batches hold only point sets and deletes (no range deletions,
//     see store.go, no merges): produceChangelog refuses anything else.
//   - A task is restored (restoreTasks) before it is created, while the
//     instance processes nothing: it waits until the changelog partition
//     has no open transaction (last stable offset = high watermark), then
//     replays the committed records in [P, end). When P is 0 the task's key
//     range is cleared first, so stale local state (a store written
//     without a changelog) cannot survive.
//
// Standby replicas (runtime/standby.go) keep the same invariants on other
// instances: they apply the committed records in order with P in the same
// batch, so a task moving to one restores from its P like any surviving
// store.
//
// Differences from a full design: a store that resumes from P > 0 relies
// on the changelog still holding the tombstones written after P (Kafka
// drops tombstones of compacted topics after delete.retention.ms, default
// one day), so a local store that is stale by more than that may keep keys
// deleted meanwhile.

// maxStoredValue bounds the values the host writes in one piece where a
// value grows with the input (GroupByKey runs, input parked for side
// inputs): each is one changelog record, which Kafka refuses over the
// changelog's max.message.bytes (internal_max_message_bytes when the job
// made the topic; Kafka's default, 1 MiB, for topics made before the
// option), and a piece stays a small part of that. One element
// larger than the bound is a piece of its own, and user state values are
// as large as the SDK sends them: over the changelog's limit either fails
// the job (ProduceChangelog).
const maxStoredValue = 256 << 10

// changelogValue encodes a set (value != nil) or a delete (a tombstone).
func changelogValue(set bool, v []byte) []byte {
	if !set {
		return nil
	}
	out := make([]byte, 1+len(v))
	out[0] = 1
	copy(out[1:], v)
	return out
}

// ProduceChangelog produces every mutation of the task's batches of this
// cycle to its changelog partition; the promise records the next offset
// (see commitState). The caller has closed every bundle.
func (t *Task) ProduceChangelog(ctx context.Context) error {
	topic := t.env.Topics.Full(t.env.Topics.Changelogs[t.sub.ID])
	limit := t.env.Topics.RecordLimit(topic)
	produce := func(b *pebble.Batch) error {
		if b.Empty() {
			return nil
		}
		r := b.Reader()
		for {
			kind, k, v, ok, err := r.Next()
			if err != nil {
				return fmt.Errorf("task %s: reading the state batch: %w", t.producer, err)
			}
			if !ok {
				return nil
			}
			var val []byte
			switch kind {
			case pebble.InternalKeyKindSet:
				val = changelogValue(true, v)
			case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDeleteSized:
			case pebble.InternalKeyKindLogData:
				continue
			default:
				return fmt.Errorf("task %s: state batch holds a %v record, which the changelog cannot carry", t.producer, kind)
			}
			if size := len(k) + len(val) + recordOverhead; size > int(limit) {
				return fmt.Errorf("task %s: a stored value of %d bytes (%s) does not fit in a record of changelog %s, which takes at most %d bytes (its max.message.bytes; internal_max_message_bytes sets it for the topics a job creates)", t.producer, len(v), t.storedKind(k), topic, limit)
			}
			rec := &kgo.Record{Topic: topic, Partition: t.partition, Key: append([]byte(nil), k...), Value: val}
			t.env.ProduceWith(ctx, rec, t.changelogPromise)
		}
	}
	if err := produce(t.batch); err != nil {
		return err
	}
	if t.user != nil {
		return t.user.Changes(produce)
	}
	return nil
}

// changelogPromise records the offset after the task's latest changelog
// record.
func (t *Task) changelogPromise(r *kgo.Record, err error) {
	if err != nil {
		t.env.Fail(fmt.Errorf("producing to %s: %w", r.Topic, err))
		return
	}
	for {
		old := t.changelogNext.Load()
		if r.Offset+1 <= old || t.changelogNext.CompareAndSwap(old, r.Offset+1) {
			return
		}
	}
}

// storedKind says what the store key k holds, for messages.
func (t *Task) storedKind(k []byte) string {
	if len(k) <= len(t.prefix) {
		return "a task record"
	}
	switch state.Kind(k[len(t.prefix)]) {
	case state.Gate:
		return "input parked for side inputs or time sorting"
	case state.GatePages:
		return "values of a group parked for side inputs"
	case state.Buffer, state.Value:
		return "a GroupByKey value"
	case state.Residual:
		return "a splittable DoFn's residual"
	case state.Bag, state.Multimap, state.Ordered:
		return "a user state value"
	}
	return fmt.Sprintf("store %q", k[len(t.prefix)])
}
