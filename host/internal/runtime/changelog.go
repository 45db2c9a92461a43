package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/topics"

	"github.com/ksrunner/ksrunner/host/internal/state"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Restoring a task's store from its changelog (the changelog invariants are
// written in host/internal/task/changelog.go, whose producer side keeps
// them).

// partitioner partitions data records as shuffle.Partitioner does and
// changelog records by their Partition field (the task's partition).
type partitioner struct{ data kgo.Partitioner }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if strings.HasSuffix(topic, topics.ChangelogSuffix) {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return p.data.ForTopic(topic)
}

// changelogPosition is P of the task's store (see the invariants), read
// before the task exists.
func changelogPosition(db *pebble.DB, prefix []byte) (int64, error) {
	k := state.Key(prefix, state.Changelog)
	v, closer, err := db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	return int64(binary.BigEndian.Uint64(v)), nil
}

// restoreTimeout bounds waiting for a changelog's open transaction to end
// (a crashed owner's ends when its successor fences it, or else at the
// transaction timeout) and replaying it.
func (i *instance) restoreTimeout() time.Duration { return i.cfg.transactionTimeout() + time.Minute }

// DefaultTransactionTimeout is Config.TransactionTimeout when unset: the
// longest a commit cycle may take under exactly_once (the broker aborts a
// transaction open longer; its transaction.max.timeout.ms, default 15
// minutes, must allow it). A cycle processes one poll, up to
// read_max_elements_per_poll records: slow stages (user state through the
// Fn API runs at a few thousand elements per second) need the margin. It
// is also how long a process killed inside a cycle holds read_committed
// readers when no successor with its identity fences it.
const DefaultTransactionTimeout = time.Minute

func (c Config) transactionTimeout() time.Duration {
	if c.TransactionTimeout > 0 {
		return c.TransactionTimeout
	}
	return DefaultTransactionTimeout
}

// restoreTasks brings the local store of each (sub-topology, partition) up
// to its changelog's committed end before the tasks are created.
func (i *instance) restoreTasks(ctx context.Context, ids []taskID) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, i.restoreTimeout())
	defer cancel()
	ts := i.topics
	names := map[string]bool{}
	for _, id := range ids {
		names[ts.Full(ts.Changelogs[i.subByTopic[id.topic].ID])] = true
	}
	var list []string
	for n := range names {
		list = append(list, n)
	}
	adm := kadm.NewClient(i.admin)
	// Wait until no changelog partition of ours has an open transaction: a
	// previous owner's last commit may still be writing its markers.
	var ends kadm.ListedOffsets
	for {
		hw, err := adm.ListEndOffsets(ctx, list...)
		if err == nil {
			err = hw.Error()
		}
		var lso kadm.ListedOffsets
		if err == nil {
			lso, err = adm.ListCommittedOffsets(ctx, list...)
			if err == nil {
				err = lso.Error()
			}
		}
		stable := err == nil
		if err != nil && !kerr.IsRetriable(err) && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("changelog end offsets: %w", err)
		}
		// A topic just created may not be known to every broker yet
		// (UNKNOWN_TOPIC_OR_PARTITION, or missing from the listing).
		for _, id := range ids {
			if !stable {
				break
			}
			n := ts.Full(ts.Changelogs[i.subByTopic[id.topic].ID])
			h, ok1 := hw.Lookup(n, id.partition)
			l, ok2 := lso.Lookup(n, id.partition)
			stable = ok1 && ok2 && h.Offset == l.Offset
		}
		if stable {
			ends = lso
			break
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("changelog end offsets: %w", err)
			}
			return fmt.Errorf("changelog still has an open transaction: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		st := i.subByTopic[id.topic]
		n := ts.Full(ts.Changelogs[st.ID])
		end, _ := ends.Lookup(n, id.partition)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := i.restoreTask(ctx, st.ID, id.partition, n, end.Offset); err != nil {
				errs <- fmt.Errorf("restoring task %d/%d from %s: %w", st.ID, id.partition, n, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (i *instance) restoreTask(ctx context.Context, sub int, partition int32, topic string, end int64) error {
	prefix := state.TaskPrefix(sub, partition)
	pos, err := changelogPosition(i.db, prefix)
	if err != nil {
		return err
	}
	// P is the offset after our last record, that is its commit marker's
	// (or, at_least_once, the end): nothing committed since.
	if pos+1 >= end && !(pos == 0 && end > 0) {
		return nil
	}
	if pos == 0 {
		if err := i.db.DeleteRange(prefix, state.PrefixEnd(prefix), pebble.NoSync); err != nil {
			return err
		}
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(i.cfg.BootstrapServers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(pos)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	b := i.db.NewBatch()
	defer func() { b.Close() }()
	n := 0
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		var perr error
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end-1 {
				done = true
			}
			if r.Offset >= end || r.Attrs.IsControl() || perr != nil {
				return
			}
			n++
			if r.Value == nil {
				perr = b.Delete(r.Key, nil)
			} else {
				perr = b.Set(r.Key, r.Value[1:], nil)
			}
		})
		if perr != nil {
			return perr
		}
		if b.Len() > 16<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b.Close()
			b = i.db.NewBatch()
		}
	}
	if err := b.Set(state.Key(prefix, state.Changelog), binary.BigEndian.AppendUint64(nil, uint64(end)), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	i.cfg.Logger.Info("task state restored from the changelog", "topic", topic, "partition", partition, "from", pos, "to", end, "records", n)
	if h := i.cfg.Hooks; h != nil && h.Restored != nil {
		h.Restored(sub, partition, n)
	}
	return nil
}
