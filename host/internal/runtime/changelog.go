package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
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
	// Bounded, and ended when the brokers are given up: a restore that
	// fails while they are out of reach fails the cycle as an outage, and
	// the instance's successor restores again (brokers.go).
	ctx, cancel := context.WithTimeout(ctx, i.restoreTimeout())
	defer cancel()
	ctx, rcancel := i.cfg.reach.bound(ctx)
	defer rcancel()
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
	// previous owner's last commit may still be writing its markers. One
	// of this instance's own producer that Kafka left open (its marker
	// dropped) would never close: after hangingCheckAfter, and at that
	// interval, the wait looks for those (endHangingData).
	var ends kadm.ListedOffsets
	var found string
	waitStart, looked := time.Now(), time.Time{}
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
		if now := time.Now(); err == nil && i.cfg.ExactlyOnce && now.Sub(waitStart) >= hangingCheckAfter && now.Sub(looked) >= hangingCheckAfter {
			looked = now
			f, herr := i.endHangingData(ctx, list)
			if herr != nil {
				f = strings.TrimPrefix(f+"; ", "; ") + "looking for hanging transactions of this instance's producer: " + herr.Error()
			}
			if f != "" && f != found {
				i.cfg.Logger.Info("changelog restore waits for an open transaction", "found", f)
			}
			found = f
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("changelog end offsets: %w", err)
			}
			if found != "" {
				return fmt.Errorf("changelog still has an open transaction (%s): %w", found, ctx.Err())
			}
			return fmt.Errorf("changelog still has an open transaction: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	slots := make(chan struct{}, maxParallelRestores)
	for _, id := range ids {
		st := i.subByTopic[id.topic]
		n := ts.Full(ts.Changelogs[st.ID])
		end, _ := ends.Lookup(n, id.partition)
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
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
	// A store ahead of its changelog followed another topic of that name:
	// the application's topics were deleted (a bounded job done) and made
	// again. Its state is not this changelog's: restore from the start.
	// (A recreated changelog already longer than the position is not
	// told apart by offsets.)
	if pos > end {
		i.cfg.Logger.Warn("the local store is ahead of its changelog (recreated since?): restoring the task from the start", "topic", topic, "partition", partition, "position", pos, "end", end)
		pos = 0
	}
	// P is the offset after our last record, that is its commit marker's
	// (or, at_least_once, the end): nothing committed since.
	if pos+1 >= end && !(pos == 0 && end > 0) {
		if pos == 0 && end == 0 {
			if err := i.db.DeleteRange(prefix, state.PrefixEnd(prefix), pebble.NoSync); err != nil {
				return err
			}
		}
		i.cfg.Logger.Info("task state up to date with the changelog", "topic", topic, "partition", partition, "from", pos, "to", end)
		i.restored(sub, partition, 0)
		return nil
	}
	if pos == 0 {
		if err := i.db.DeleteRange(prefix, state.PrefixEnd(prefix), pebble.NoSync); err != nil {
			return err
		}
	}
	cl, err := kgo.NewClient(append(append(changelogReaderOpts(i.cfg.BootstrapServers, i.cfg.Security),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(pos)}}),
	), i.cfg.reach.opts()...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	cm := newBatchCommitter(i.db)
	defer cm.finish() // on an early return; a second finish is a no-op
	b := i.db.NewBatchWithSize(restoreBatchBytes + restoreBatchBytes/4)
	n, size := 0, int64(0)
	// A long restore says how far it is, every restoreProgressEvery.
	lastProgress, at := start, pos
	for done := false; !done; {
		if time.Since(lastProgress) >= restoreProgressEvery {
			lastProgress = time.Now()
			i.cfg.Logger.Info("restoring task state from the changelog", "topic", topic, "partition", partition, "from", pos, "at", at, "to", end,
				"records", n, "bytes", size, "elapsed", time.Since(start).Round(time.Second))
		}
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Close()
			return err
		}
		if err := fs.Err0(); err != nil {
			b.Close()
			return err
		}
		var perr error
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end-1 {
				done = true
			}
			at = r.Offset
			if r.Offset >= end || r.Attrs.IsControl() || perr != nil {
				return
			}
			n++
			size += int64(len(r.Key) + len(r.Value))
			perr = applyChangelogRecord(b, r)
		})
		if perr != nil {
			b.Close()
			return perr
		}
		if b.Len() >= restoreBatchBytes {
			if err := cm.commit(b); err != nil {
				return err
			}
			b = i.db.NewBatchWithSize(restoreBatchBytes + restoreBatchBytes/4)
		}
	}
	// The position goes with the last records, in order after every
	// earlier batch: a store that has it has all of them. No sync: a
	// position lost in a crash is a restore repeated from the older one.
	if err := b.Set(state.Key(prefix, state.Changelog), binary.BigEndian.AppendUint64(nil, uint64(end)), nil); err != nil {
		b.Close()
		return err
	}
	if err := cm.commit(b); err != nil {
		return err
	}
	if err := cm.finish(); err != nil {
		return err
	}
	took := time.Since(start)
	i.cfg.Logger.Info("task state restored from the changelog", "topic", topic, "partition", partition, "from", pos, "to", end,
		"records", n, "bytes", size, "took", took.Round(time.Millisecond), "throughput", fmt.Sprintf("%.1f MB/s", float64(size)/1e6/max(took.Seconds(), 1e-9)))
	i.restored(sub, partition, n)
	return nil
}

// restoreProgressEvery is how often a long restore logs its progress.
const restoreProgressEvery = 10 * time.Second

// restored tells Hooks.Restored that a task's store is up to date after
// replaying records changelog records.
func (i *instance) restored(sub int, partition int32, records int) {
	i.cfg.Observer.Restored(ref(sub, partition), records)
	if h := i.cfg.Hooks; h != nil && h.Restored != nil {
		h.Restored(sub, partition, records)
	}
}

// restoreBatchBytes is the size at which a restore commits its Pebble
// batch and starts the next.
const restoreBatchBytes = 16 << 20

// maxParallelRestores bounds the tasks restored at once. Each may hold a
// fetch of up to 32 MiB and two batches of restoreBatchBytes; one
// partition's restore already keeps a core and the disk busy.
const maxParallelRestores = 4

// changelogReaderOpts are the options of every client that reads
// changelogs (restores and standbys), besides what it consumes.
//   - read_committed: only committed cycles' records are state.
//   - Control records are kept, so a reader sees the commit marker that
//     ends its range and can move its position past it.
//   - A partition's fetch takes up to 32 MiB: a restore is bound by round
//     trips, one per fetch (TestRestoreThroughput, on a loaded 2-core
//     machine: 16-43 MB/s at franz-go's default of 1 MiB; 40-134 MB/s at
//     32 MiB with batches committed beside the fetching).
func changelogReaderOpts(bootstrap string, sec *kafkaconn.Security) []kgo.Opt {
	return kafkaconn.Opts(bootstrap, sec,
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(32<<20),
	)
}

// applyChangelogRecord applies one changelog record, not a control record,
// to b: a set is 0x01 | value, a delete has no value (task/changelog.go).
func applyChangelogRecord(b *pebble.Batch, r *kgo.Record) error {
	if r.Value == nil {
		return b.Delete(r.Key, nil)
	}
	if len(r.Value) == 0 || r.Value[0] != 1 {
		return fmt.Errorf("changelog %s/%d offset %d: a value that is not a set (0x01 | value)", r.Topic, r.Partition, r.Offset)
	}
	return b.Set(r.Key, r.Value[1:], nil)
}

// batchCommitter commits batches to a store in the order given, on a
// goroutine of its own, so that a restore fills its next batch from the
// fetched records while Pebble writes the previous one. At most one batch
// waits while one commits. It owns (and closes) every batch given to
// commit; its owner calls finish, which stops the goroutine.
type batchCommitter struct {
	in     chan *pebble.Batch
	done   chan struct{} // closed when the goroutine has returned
	closed bool          // in is closed (only the owner touches it)

	mu  sync.Mutex
	err error // the first failed commit; later batches are dropped
}

func newBatchCommitter(db *pebble.DB) *batchCommitter {
	c := &batchCommitter{in: make(chan *pebble.Batch, 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for b := range c.in {
			if c.failure() == nil {
				if err := b.Commit(pebble.NoSync); err != nil {
					c.mu.Lock()
					c.err = fmt.Errorf("committing restored state: %w", err)
					c.mu.Unlock()
				}
			}
			b.Close()
		}
	}()
	return c
}

func (c *batchCommitter) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// commit queues b, returning an earlier commit's failure if any.
func (c *batchCommitter) commit(b *pebble.Batch) error {
	if err := c.failure(); err != nil {
		b.Close()
		return err
	}
	c.in <- b
	return nil
}

// finish waits until every queued batch is committed and stops the
// goroutine; it returns the first failure. Calling it again only returns
// the failure.
func (c *batchCommitter) finish() error {
	if !c.closed {
		c.closed = true
		close(c.in)
	}
	<-c.done
	return c.failure()
}
