package runtime

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Repartition topics are purged (DESIGN.md §3): after a commit, the records
// below the group's committed offset of a shuffle topic's partition
// (translate.TopicRepartition and TopicRedistribute: GroupByKeys, lifted
// combines, redistributes, spread restrictions, stable and materialized
// inputs) are never read again (only one sub-topology of this group reads
// the topic, and a task restarts at the committed offset), so DeleteRecords removes them and the topic's size
// stays bounded by what is in flight rather than growing with the job.
//
// The purge runs beside the commit loop, not in it: the loop hands over the
// latest committed offsets (a newer set replaces one not yet sent) and the
// purger sends at most one DeleteRecords per purgeInterval. A failed purge
// is logged and retried with the next offsets; it never fails the job (the
// records are only kept longer). keep_internal_topics turns purging off, so
// that the topics can be inspected whole.
const purgeInterval = time.Second

// purger deletes the consumed records of the repartition topics.
type purger struct {
	admin  *kadm.Client
	topics map[string]bool // full names of the topics to purge
	logger *slog.Logger

	mu      sync.Mutex
	pending kadm.Offsets // the latest committed offsets not yet purged
	wake    chan struct{}
	done    map[string]map[int32]int64 // what was purged already
	warned  bool
}

func newPurger(admin *kgo.Client, topics map[string]bool, logger *slog.Logger) *purger {
	return &purger{admin: kadm.NewClient(admin), topics: topics, logger: logger, wake: make(chan struct{}, 1), done: map[string]map[int32]int64{}}
}

// committed hands over the group's committed offsets after a commit.
func (p *purger) committed(offsets map[string]map[int32]kgo.EpochOffset) {
	if len(p.topics) == 0 {
		return
	}
	os := kadm.Offsets{}
	for topic, parts := range offsets {
		if !p.topics[topic] {
			continue
		}
		for part, eo := range parts {
			if eo.Offset > 0 {
				os.Add(kadm.Offset{Topic: topic, Partition: part, At: eo.Offset, LeaderEpoch: -1})
			}
		}
	}
	if len(os) == 0 {
		return
	}
	p.mu.Lock()
	p.pending = os
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run purges until ctx ends, then purges what the last commits left.
func (p *purger) run(ctx context.Context) {
	t := time.NewTicker(purgeInterval)
	defer t.Stop()
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		p.purge(ctx)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.purge(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// purge deletes the records below the pending offsets that were not
// purged yet.
func (p *purger) purge(ctx context.Context) {
	p.mu.Lock()
	os := kadm.Offsets{}
	p.pending.Each(func(o kadm.Offset) {
		if o.At > p.done[o.Topic][o.Partition] {
			os.Add(o)
		}
	})
	p.pending = nil
	p.mu.Unlock()
	if len(os) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resps, err := p.admin.DeleteRecords(ctx, os)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		if ctx.Err() == nil && !p.warned {
			p.warned = true
			p.logger.Warn("purging consumed repartition records (retried after the next commit; logged once)", "error", err)
		}
		return
	}
	resps.Each(func(r kadm.DeleteRecordsResponse) {
		if r.Err == nil {
			if p.done[r.Topic] == nil {
				p.done[r.Topic] = map[int32]int64{}
			}
			p.done[r.Topic][r.Partition] = max(p.done[r.Topic][r.Partition], r.LowWatermark)
		}
	})
}
