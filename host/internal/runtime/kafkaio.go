package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/translate"
)

// Where a Kafka read starts and ends.
//
// A partition of a read starts at the group's committed offset, else (with
// start_read_time) at the first offset whose timestamp is at or after it
// (the end if there is none), else per auto.offset.reset: earliest,
// latest (Kafka's default), or none, which makes a partition without a
// committed offset fail the job (Kafka's NoOffsetForPartitionException):
// checkResetNone at Run, startOffsets for a partition assigned later
// without one (added to the topic since, or its commit expired).
// startOffsets applies this when the group assigns the partition;
// readBounds applies the same rule at Run to split max_num_records.

// startOffsets is the group's AdjustFetchOffsetsFn: a partition without a
// committed offset starts at the start (the consumer's reset offset), which
// internal topics need; a Kafka read's partition starts at its
// start_read_time or per its auto.offset.reset instead.
//
// A Kafka read's partition without a commit starts at an exact offset,
// listed here (with the admin client, read_committed for the end), not at
// a reset the client resolves: sourceEnds needs the position of a task
// that has handled nothing to tell when its partition is caught up.
//
// Only the first assignment goes through here: an offset out of range
// later (the committed offset deleted by retention) resets to the start.
func (i *instance) startOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	i.offsets.fetched(offsets)
	for topic, ps := range offsets {
		st := i.subByTopic[topic]
		if st == nil || st.Root.Kind != translate.RootKafkaSource {
			continue
		}
		var uncommitted []int32
		for p, o := range ps {
			if o.EpochOffset().Offset == -2 { // no commit: the reset offset, AtStart
				uncommitted = append(uncommitted, p)
			}
		}
		if len(uncommitted) == 0 {
			continue
		}
		r := st.Root.KafkaRead
		if resetNone(r) {
			// Nothing of these partitions may be read: they leave the
			// assignment, and the instance fails.
			for _, p := range uncommitted {
				delete(ps, p)
			}
			slices.Sort(uncommitted)
			i.setProduceErr(noOffsetError(st.Root.TransformID, topic, uncommitted, i.cfg.ApplicationID))
			continue
		}
		var (
			what  string
			list  func(context.Context, ...string) (kadm.ListedOffsets, error)
			admin = kadm.NewClient(i.admin)
		)
		switch {
		case r.StartReadTimeMs != nil:
			what = fmt.Sprintf("the offsets after start_read_time %d", *r.StartReadTimeMs)
			list = func(ctx context.Context, t ...string) (kadm.ListedOffsets, error) {
				return admin.ListOffsetsAfterMilli(ctx, *r.StartReadTimeMs, t...)
			}
		case r.ConsumerConfig["auto.offset.reset"] == "earliest":
			what, list = "the start offsets (auto.offset.reset earliest)", admin.ListStartOffsets
		default:
			what, list = "the end offsets (auto.offset.reset latest)", admin.ListCommittedOffsets
		}
		listed, err := list(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("transform %s: topic %s: listing %s: %w", st.Root.TransformID, topic, what, err)
		}
		started := map[int32]int64{}
		for _, p := range uncommitted {
			o, ok := listed.Lookup(topic, p)
			if !ok || o.Err != nil {
				return nil, fmt.Errorf("transform %s: topic %s partition %d: listing %s: %v", st.Root.TransformID, topic, p, what, cmp.Or(o.Err, errors.New("not listed")))
			}
			ps[p] = kgo.NewOffset().At(o.Offset)
			started[p] = o.Offset
		}
		if i.sourceEnds != nil {
			i.sourceEnds.started(topic, started)
		}
	}
	return offsets, nil
}

// resetNone reports whether a read fails on a partition without a
// committed offset: auto.offset.reset none, and no start_read_time.
func resetNone(r *translate.KafkaRead) bool {
	return r.ConsumerConfig["auto.offset.reset"] == "none" && r.StartReadTimeMs == nil
}

func noOffsetError(transform, topic string, parts []int32, group string) error {
	return fmt.Errorf("transform %s: topic %s partitions %v: no committed offset in consumer group %s (the application_id), and auto.offset.reset is none: commit the offsets to start from (kafka-consumer-groups.sh --group %s --reset-offsets), or set auto.offset.reset to earliest or latest", transform, topic, parts, group, group)
}

// checkResetNone fails, naming the partitions, when a read whose
// auto.offset.reset is none has a partition without a committed offset,
// before anything is read.
func checkResetNone(ctx context.Context, cfg Config, ts *topics.Set, adm *kadm.Client) error {
	var committed kadm.OffsetResponses
	fetched := false
	for _, st := range cfg.Plan.SubTopologies {
		if st.Root.Kind != translate.RootKafkaSource || !resetNone(st.Root.KafkaRead) {
			continue
		}
		if !fetched {
			var err error
			if committed, err = groupCommits(ctx, adm, cfg.ApplicationID); err != nil {
				return fmt.Errorf("transform %s: the committed offsets of group %s: %w", st.Root.TransformID, cfg.ApplicationID, err)
			}
			fetched = true
		}
		var missing []int32
		for p := range ts.Partitions[st.Input] {
			if c, ok := committed.Lookup(st.Input, p); !ok || c.Err != nil || c.At < 0 {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			return noOffsetError(st.Root.TransformID, st.Input, missing, cfg.ApplicationID)
		}
	}
	return nil
}

// readBounds fixes, once at Run, where the plan's bounded Kafka reads end
// (task.ReadBound), by sub-topology id: the deadline of max_read_time from
// now, and max_num_records split into per-partition quotas (splitQuota)
// over the records available now, from each partition's start (as
// startOffsets will start it) to its last stable offset (available). Every task of the
// run gets the same bounds, whichever instance opens it and however often.
func readBounds(ctx context.Context, cfg Config, ts *topics.Set, adm *kadm.Client, now time.Time) (map[int]*task.ReadBound, error) {
	run := fmt.Sprintf("%d-%s", now.UnixMilli(), randomSuffix())
	bounds := map[int]*task.ReadBound{}
	// The source sub-topologies of each bounded read (one per topic), in
	// plan order: max_num_records counts them all together.
	var reads []string
	subs := map[string][]*translate.SubTopology{}
	for _, st := range cfg.Plan.SubTopologies {
		if r := st.Root.KafkaRead; r != nil && st.Root.Kind == translate.RootKafkaSource && r.Bounded() {
			if subs[st.Root.TransformID] == nil {
				reads = append(reads, st.Root.TransformID)
			}
			subs[st.Root.TransformID] = append(subs[st.Root.TransformID], st)
		}
	}
	var committed kadm.OffsetResponses
	fetchedCommits := false
	for _, id := range reads {
		r := subs[id][0].Root.KafkaRead
		b := &task.ReadBound{Run: run}
		if r.MaxReadTimeMs != nil {
			b.Deadline = now.Add(time.Duration(*r.MaxReadTimeMs) * time.Millisecond)
		}
		if r.MaxNumRecords == nil {
			for _, st := range subs[id] {
				bounds[st.ID] = b
			}
			continue
		}
		if !fetchedCommits {
			var err error
			if committed, err = groupCommits(ctx, adm, cfg.ApplicationID); err != nil {
				return nil, fmt.Errorf("transform %s: the committed offsets of group %s: %w", id, cfg.ApplicationID, err)
			}
			fetchedCommits = true
		}
		var avail []int64 // the partitions of every topic, in order
		for _, st := range subs[id] {
			a, err := available(ctx, cfg, adm, st, ts.Partitions[st.Input], committed, *r.MaxNumRecords)
			if err != nil {
				return nil, fmt.Errorf("transform %s: max_num_records: %w", id, err)
			}
			avail = append(avail, a...)
		}
		q := splitQuota(*r.MaxNumRecords, avail)
		cfg.Logger.Info("bounded Kafka read", "transform", id, "max_num_records", *r.MaxNumRecords, "available", avail, "quotas", q)
		for _, st := range subs[id] {
			sb := &task.ReadBound{Run: run, Deadline: b.Deadline, Quota: map[int32]int64{}}
			for p := range ts.Partitions[st.Input] {
				sb.Quota[p], q = q[0], q[1:]
			}
			bounds[st.ID] = sb
		}
	}
	return bounds, nil
}

// groupCommits are the group's committed offsets (none if the group does
// not exist), retried while the coordinator is not there yet: a real
// cluster answers COORDINATOR_NOT_AVAILABLE until its offsets topic exists.
func groupCommits(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	for {
		committed, err := adm.FetchOffsets(kadm.RequireStable(ctx), group)
		switch {
		case err == nil:
			err = committed.Error()
		case errors.Is(err, kerr.GroupIDNotFound):
			return nil, nil
		}
		if err == nil || !kerr.IsRetriable(err) {
			return committed, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %w)", context.Cause(ctx), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// available is how many records each of the read's partitions holds now,
// from its start to its last stable offset, counted up to n (a partition
// never takes more than n): offsets alone over-count records where
// transaction markers sit (and a start_read_time lookup can land on a
// marker), and a quota a partition cannot fill would wait forever.
func available(ctx context.Context, cfg Config, adm *kadm.Client, st *translate.SubTopology, parts int32, committed kadm.OffsetResponses, n int64) ([]int64, error) {
	topic, r := st.Input, st.Root.KafkaRead
	list := func(what string, f func(context.Context, ...string) (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
		l, err := f(ctx, topic)
		if err == nil {
			err = l.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("topic %s: listing %s offsets: %w", topic, what, err)
		}
		return l, nil
	}
	ends, err := list("end", adm.ListCommittedOffsets)
	if err != nil {
		return nil, err
	}
	var reset kadm.ListedOffsets
	switch {
	case r.StartReadTimeMs != nil:
		ms := *r.StartReadTimeMs
		reset, err = list("start_read_time", func(ctx context.Context, t ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, ms, t...)
		})
	case r.ConsumerConfig["auto.offset.reset"] == "earliest":
		reset, err = list("start", adm.ListStartOffsets)
	default:
		reset = ends
	}
	if err != nil {
		return nil, err
	}
	from, to := make([]int64, parts), make([]int64, parts)
	for p := range parts {
		end, ok := ends.Lookup(topic, p)
		if !ok {
			return nil, fmt.Errorf("topic %s partition %d: no end offset listed", topic, p)
		}
		from[p], to[p] = end.Offset, end.Offset
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			from[p] = min(c.At, end.Offset)
		} else if o, ok := reset.Lookup(topic, p); ok && o.Offset >= 0 {
			from[p] = min(o.Offset, end.Offset)
		}
	}
	return countRecords(ctx, cfg.BootstrapServers, cfg.Security, topic, from, to, n)
}

// countRecords counts the records (not transaction markers, read_committed)
// of each partition p of topic in [from[p], to[p]), up to limit each. The
// markers are fetched too (KeepControlRecords), so a partition whose range
// ends with one is known to be read through.
func countRecords(ctx context.Context, brokers string, sec *kafkaconn.Security, topic string, from, to []int64, limit int64) ([]int64, error) {
	count := make([]int64, len(from))
	start := map[int32]kgo.Offset{}
	for p := range from {
		if from[p] < to[p] && limit > 0 {
			start[int32(p)] = kgo.NewOffset().At(from[p])
		}
	}
	if len(start) == 0 {
		return count, nil
	}
	cl, err := kafkaconn.NewClient(brokers, sec,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return nil, fmt.Errorf("topic %s: counting records: %w", topic, err)
	}
	defer cl.Close()
	for len(start) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("topic %s: counting records: %w", topic, context.Cause(ctx))
		}
		if err := fetches.Err0(); err != nil {
			return nil, fmt.Errorf("topic %s: counting records: %w", topic, err)
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			p := rec.Partition
			if _, open := start[p]; !open {
				return
			}
			if rec.Offset < to[p] && !rec.Attrs.IsControl() {
				count[p]++
			}
			if rec.Offset+1 >= to[p] || count[p] >= limit {
				delete(start, p)
				cl.PauseFetchPartitions(map[string][]int32{topic: {p}})
			}
		})
	}
	return count, nil
}

// splitQuota splits n records over partitions with avail records available
// now, deterministically: if they hold n or more, in proportion to what
// each holds (largest remainders first, lower partitions first among
// equals), never more than it holds; else each takes what it holds and
// the rest, records still to come, is spread evenly (lower partitions
// first). The quotas sum to n.
func splitQuota(n int64, avail []int64) []int64 {
	q := make([]int64, len(avail))
	if len(avail) == 0 {
		return q
	}
	var total int64
	for _, a := range avail {
		total += a
	}
	if total < n {
		rest, parts := n-total, int64(len(avail))
		for p, a := range avail {
			q[p] = a + rest/parts
			if int64(p) < rest%parts {
				q[p]++
			}
		}
		return q
	}
	if n == 0 {
		return q
	}
	rem := make([]uint64, len(avail))
	left := n
	for p, a := range avail {
		// n*a/total in 128 bits: n, a <= total < 2^63, so the quotient fits.
		hi, lo := bits.Mul64(uint64(n), uint64(a))
		quo, r := bits.Div64(hi, lo, uint64(total))
		q[p], rem[p] = int64(quo), r
		left -= int64(quo)
	}
	order := make([]int, len(avail))
	for p := range order {
		order[p] = p
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
	for _, p := range order[:left] {
		q[p]++
	}
	return q
}

// endSources keeps the records that bounded reads' tasks did not emit
// (task.SourceEnd) out of the group's committed offsets, and stops
// fetching their partitions. The caller holds mu.
//
// How: franz-go commits (GroupTransactSession.End, at_least_once
// CommitUncommittedOffsets) each partition's uncommitted head, which
// PollRecords moves past every record it returned. SetOffsets moves the
// head, and the fetch position, back to the first record not emitted, so
// the cycle commits exactly up to the last emitted record (or a
// transaction marker after it: offsets are not contiguous, which is why
// the task names the next record's offset rather than counting). We
// chose SetOffsets over AutoCommitMarks with MarkCommitRecords, which
// would make every task of every topic mark each record it consumed.
// Pausing the partition keeps the loop from fetching the same records
// again; resumeSources undoes it when the cycle aborts, since the task
// reopened from the store may not have ended.
func (i *instance) endSources(fetches kgo.Fetches) {
	var set map[string]map[int32]kgo.EpochOffset
	var pause map[string][]int32
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		t := i.tasks[taskID{p.Topic, p.Partition}]
		if t == nil {
			return
		}
		resume, ok := t.SourceEnd()
		if !ok {
			return
		}
		if set == nil {
			set, pause = map[string]map[int32]kgo.EpochOffset{}, map[string][]int32{}
		}
		if set[p.Topic] == nil {
			set[p.Topic] = map[int32]kgo.EpochOffset{}
		}
		set[p.Topic][p.Partition] = kgo.EpochOffset{Epoch: -1, Offset: resume}
		pause[p.Topic] = append(pause[p.Topic], p.Partition)
	})
	if set != nil {
		i.cl.SetOffsets(set)
		i.cl.PauseFetchPartitions(pause)
	}
}

// resumeSources fetches again the partitions endSources paused: a cycle
// aborted, and the tasks reopened from the store may not have ended (if
// they have, they pause again at their first record).
func (i *instance) resumeSources() {
	if paused := i.cl.PauseFetchPartitions(nil); len(paused) > 0 {
		i.cl.ResumeFetchPartitions(paused)
	}
}
