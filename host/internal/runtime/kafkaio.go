package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"sync"
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
// latest (Kafka's default), by_duration:D (its first record no more than D
// older than the Run's start, Config.resetStart, else the end: Kafka 4.0's
// KIP-1106), or none, which makes a partition without a
// committed offset fail the job (Kafka's NoOffsetForPartitionException):
// checkResetNone at Run, startOffsets for a partition assigned later
// without one (added to the topic since, or its commit expired). A
// partition added to the topic after the application began reading it
// (knownReadPartitions) starts at its beginning instead, unless the reset
// is none. startOffsets applies this when the group assigns the partition,
// and commitStarts commits where it started; readBounds applies the same
// rule at Run to split max_num_records.
//
// Partitions added while a job runs: the group assigns them once the
// instances' clients see them, which they look for every
// metadata.max.age.ms (5 minutes by default; Java's
// dynamic_read_poll_interval_seconds sets it at expansion). Their tasks'
// changelog partitions are added first (growChangelogs). The tasks
// downstream count the new tasks' watermark reports as they come
// (watermark.Aggregator: more producers than expected each count).

// startOffsets is the group's AdjustFetchOffsetsFn: a partition without a
// committed offset starts at the start (the consumer's reset offset), which
// internal topics need; a Kafka read's partition starts at its
// start_read_time or per its auto.offset.reset instead, unless it was
// added to the topic after the application began reading it
// (addedReadPartition): that one starts at its beginning.
//
// A Kafka read's partition without a commit starts at an exact offset,
// listed here (with the admin client, read_committed for the end), not at
// a reset the client resolves: sourceEnds needs the position of a task
// that has handled nothing to tell when its partition is caught up. The
// next cycle commits that offset (commitStarts), so that wherever the
// partition goes next, and a later run of the job, starts there rather
// than resolving auto.offset.reset again at another end offset.
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
		var uncommitted, added []int32
		for p, o := range ps {
			if o.EpochOffset().Offset != -2 { // -2: no commit, the reset offset (AtStart)
				continue
			}
			if i.cfg.addedReadPartition(topic, p) {
				added = append(added, p)
			} else {
				uncommitted = append(uncommitted, p)
			}
		}
		if len(uncommitted) == 0 && len(added) == 0 {
			continue
		}
		slices.Sort(added)
		slices.Sort(uncommitted)
		r := st.Root.KafkaRead
		admin := kadm.NewClient(i.admin)
		started := map[int32]int64{}
		if len(added) > 0 {
			i.cfg.Logger.Info("partitions added to a topic the job reads: they start at their beginning", "transform", st.Root.TransformID, "topic", topic, "partitions", added)
			if err := i.listStarts(ctx, st, topic, added, "the start offsets (partitions added since the job started)", admin.ListStartOffsets, ps, started); err != nil {
				return nil, err
			}
		}
		if len(uncommitted) > 0 && resetNone(r) {
			// Nothing of these partitions may be read: they leave the
			// assignment, and the instance fails.
			for _, p := range uncommitted {
				delete(ps, p)
			}
			i.setProduceErr(noOffsetError(st.Root.TransformID, topic, uncommitted, i.cfg.ApplicationID))
			uncommitted = nil
		}
		if len(uncommitted) > 0 {
			what, list, _ := i.cfg.resetOffsets(r, admin)
			if err := i.listStarts(ctx, st, topic, uncommitted, what, list, ps, started); err != nil {
				return nil, err
			}
		}
		if len(started) == 0 {
			continue
		}
		if i.sourceEnds != nil {
			i.sourceEnds.started(topic, started)
		}
		i.starts.add(topic, started)
	}
	return offsets, nil
}

// resetOffsets is where read r starts a partition without a committed
// offset, for startOffsets and for readBounds' quotas alike: at
// start_read_time, else per auto.offset.reset. what names the offsets in
// messages, list lists them, and atEnd says they are the end offsets
// (latest, Kafka's default).
func (c *Config) resetOffsets(r *translate.KafkaRead, adm *kadm.Client) (what string, list func(context.Context, ...string) (kadm.ListedOffsets, error), atEnd bool) {
	after := func(ms int64) func(context.Context, ...string) (kadm.ListedOffsets, error) {
		return func(ctx context.Context, t ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, ms, t...)
		}
	}
	if r.StartReadTimeMs != nil {
		return fmt.Sprintf("the offsets after start_read_time %d", *r.StartReadTimeMs), after(*r.StartReadTimeMs), false
	}
	if d, ok := r.ResetByDuration(); ok {
		ms := c.resetStart(d)
		return fmt.Sprintf("the offsets after %d (auto.offset.reset by_duration:%s before the job started)", ms, d), after(ms), false
	}
	if r.ConsumerConfig["auto.offset.reset"] == "earliest" {
		return "the start offsets (auto.offset.reset earliest)", adm.ListStartOffsets, false
	}
	return "the end offsets (auto.offset.reset latest)", adm.ListCommittedOffsets, true
}

// resetStart is where auto.offset.reset by_duration:d starts a partition:
// the timestamp (Unix milliseconds) d before this Run began reading, one
// time for every partition and for readBounds' quotas, so that a quota
// split at Run counts the records its partition then starts at.
func (c *Config) resetStart(d time.Duration) int64 {
	at := c.resetAt
	if at.IsZero() {
		at = time.Now()
	}
	// A duration reaching before 1970 asks for every record: ListOffsets
	// takes negative timestamps for its special lookups (-1 the end, -2
	// the start, ...).
	return max(at.Add(-d).UnixMilli(), 0)
}

// listStarts lists where each of the partitions parts of topic starts,
// with list (what names it in errors), and sets it in ps and started. The
// admin client lists the partitions its metadata knows: one added to the
// topic a moment ago may not be there yet, so it looks again, with fresh
// metadata, for a while.
func (i *instance) listStarts(ctx context.Context, st *translate.SubTopology, topic string, parts []int32, what string, list func(context.Context, ...string) (kadm.ListedOffsets, error), ps map[int32]kgo.Offset, started map[int32]int64) error {
	deadline := time.Now().Add(addedPartitionWait)
	for {
		listed, err := list(ctx, topic)
		if err != nil {
			return fmt.Errorf("transform %s: topic %s: listing %s: %w", st.Root.TransformID, topic, what, err)
		}
		var missing bool
		for _, p := range parts {
			o, ok := listed.Lookup(topic, p)
			if !ok && time.Now().Before(deadline) {
				missing = true
				break
			}
			if !ok || o.Err != nil {
				return fmt.Errorf("transform %s: topic %s partition %d: listing %s: %v", st.Root.TransformID, topic, p, what, cmp.Or(o.Err, errors.New("not listed")))
			}
			ps[p] = kgo.NewOffset().At(o.Offset)
			started[p] = o.Offset
		}
		if !missing {
			return nil
		}
		i.admin.ForceMetadataRefresh()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// addedPartitionWait bounds how long listStarts waits for the admin
// client's metadata to show a partition the group assigned.
const addedPartitionWait = 30 * time.Second

// addedReadPartition says whether partition p of a topic the job reads
// was added to it after the application began reading it: it is above
// every partition the application had read when this Run began
// (knownReadPartitions). The group assigns such a partition once the
// client's metadata shows it (metadata.max.age.ms).
func (c Config) addedReadPartition(topic string, p int32) bool {
	n, ok := c.readPartitions[topic]
	return ok && p >= n
}

// knownReadPartitions is, per topic the plan's Kafka reads read, how many
// of its partitions the application knows: partitions are only ever added
// to a topic, after the others, so those it has read are the ones below
// the highest with a committed offset in the group (every partition a
// read starts gets its start offset committed, commitStarts); an
// application that has committed none of the topic's partitions knows
// those the topic has now (Discover). A partition above is new: written
// to only after the application began reading the topic, it starts at
// its beginning, whatever auto.offset.reset says (but none, which fails on
// a partition without a committed offset, new or not, as Kafka's consumer
// does), so that what was written to it before a job's client noticed it,
// or while no job ran, is read.
//
// The one other way a partition above them lacks a commit: the group's
// offsets of some partitions were deleted by hand (kafka-consumer-groups
// --delete-offsets); it starts at its beginning too.
func knownReadPartitions(ctx context.Context, cfg Config, ts *topics.Set, commits *runCommits) (map[string]int32, error) {
	known := map[string]int32{}
	for _, st := range cfg.Plan.SubTopologies {
		if st.Root.Kind != translate.RootKafkaSource || resetNone(st.Root.KafkaRead) {
			// auto.offset.reset none: a partition without a committed
			// offset fails the job, new or not, as in Kafka's consumer.
			continue
		}
		committed, err := commits.get(ctx, st.Root.TransformID)
		if err != nil {
			return nil, err
		}
		n := int32(-1)
		for p, c := range committed[st.Input] {
			if c.Err == nil && c.At >= 0 {
				n = max(n, p+1)
			}
		}
		if n < 0 {
			n = ts.Partitions[st.Input]
		}
		known[st.Input] = n
	}
	return known, nil
}

// growChangelogs gives the tasks of partitions added to a topic the job
// reads since Run their changelog partitions, before they restore: a
// source sub-topology's changelog has a partition per partition of its
// topic as Run found it (topics.Set.Create grows it then), and grows with
// the topic here.
func (i *instance) growChangelogs(ctx context.Context, ids []taskID) error {
	need := map[int]int32{} // sub-topology -> partitions
	for _, id := range ids {
		if isSource(i.subByTopic[id.topic]) && id.partition >= i.topics.Partitions[id.topic] {
			sub := i.subByTopic[id.topic].ID
			need[sub] = max(need[sub], id.partition+1)
		}
	}
	for sub, n := range need {
		if err := i.topics.GrowChangelog(ctx, i.admin, sub, n); err != nil {
			return fmt.Errorf("sub-topology %d: %w", sub, err)
		}
	}
	return nil
}

// startCommits are the start offsets startOffsets chose for partitions
// without a commit, until a cycle commits them (commitStarts). It is
// filled from the client's goroutine and drained by the loop.
type startCommits struct {
	mu      sync.Mutex
	pending map[string]map[int32]int64
}

func (s *startCommits) add(topic string, started map[int32]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[string]map[int32]int64{}
	}
	if s.pending[topic] == nil {
		s.pending[topic] = map[int32]int64{}
	}
	maps.Copy(s.pending[topic], started)
}

func (s *startCommits) take() map[string]map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	return p
}

// commitStarts makes the running cycle commit the start offset of each
// Kafka read partition that started without a commit and has returned no
// record yet: without it, such a partition (an empty one, or one past
// which nothing was written) would have no committed offset, and the next
// instance to own it would resolve auto.offset.reset anew, at a later end
// offset, skipping what was written in between. A partition that returned
// records needs nothing: the cycle commits past them. Called by the loop
// before the cycle's commit.
//
// How: SetOffsets gives the partition an uncommitted head at its start
// offset, which the cycle's End (or CommitUncommittedOffsets) commits. It
// also moves the fetch position there, where it is already (nothing was
// returned from it), dropping at most a buffered fetch, fetched again.
func (i *instance) commitStarts() {
	pending := i.starts.take()
	if len(pending) == 0 {
		return
	}
	heads := i.cl.UncommittedOffsets()
	i.mu.Lock()
	defer i.mu.Unlock()
	set := map[string]map[int32]kgo.EpochOffset{}
	for topic, ps := range pending {
		for p, o := range ps {
			if _, polled := heads[topic][p]; polled || i.tasks[taskID{topic, p}] == nil {
				continue // committed past its records, or no longer here
			}
			if set[topic] == nil {
				set[topic] = map[int32]kgo.EpochOffset{}
			}
			set[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
		}
	}
	if len(set) > 0 {
		i.cl.SetOffsets(set)
	}
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
func checkResetNone(ctx context.Context, cfg Config, ts *topics.Set, commits *runCommits) error {
	for _, st := range cfg.Plan.SubTopologies {
		if st.Root.Kind != translate.RootKafkaSource || !resetNone(st.Root.KafkaRead) {
			continue
		}
		committed, err := commits.get(ctx, st.Root.TransformID)
		if err != nil {
			return err
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
func readBounds(ctx context.Context, cfg Config, ts *topics.Set, adm *kadm.Client, commits *runCommits, now time.Time) (map[int]*task.ReadBound, error) {
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
		committed, err := commits.get(ctx, id)
		if err != nil {
			return nil, err
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

// runCommits fetches the group's committed offsets for Run's look at the
// Kafka reads (knownReadPartitions, checkResetNone, readBounds): once, when
// the first of them needs them.
type runCommits struct {
	adm       *kadm.Client
	group     string
	committed kadm.OffsetResponses
	fetched   bool
}

// get returns the committed offsets; transform names the read asking, in
// the error.
func (c *runCommits) get(ctx context.Context, transform string) (kadm.OffsetResponses, error) {
	if !c.fetched {
		committed, err := groupCommits(ctx, c.adm, c.group)
		if err != nil {
			return nil, fmt.Errorf("transform %s: the committed offsets of group %s: %w", transform, c.group, err)
		}
		c.committed, c.fetched = committed, true
	}
	return c.committed, nil
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
			return nil, fmt.Errorf("topic %s: listing %s: %w", topic, what, err)
		}
		return l, nil
	}
	ends, err := list("the end offsets", adm.ListCommittedOffsets)
	if err != nil {
		return nil, err
	}
	reset := ends
	if what, f, atEnd := cfg.resetOffsets(r, adm); !atEnd {
		if reset, err = list(what, f); err != nil {
			return nil, err
		}
	}
	var beginnings kadm.ListedOffsets // of partitions added since the application read the topic
	if known, ok := cfg.readPartitions[topic]; ok && known < parts {
		if beginnings, err = list("the start offsets", adm.ListStartOffsets); err != nil {
			return nil, err
		}
	}
	from, to := make([]int64, parts), make([]int64, parts)
	for p := range parts {
		end, ok := ends.Lookup(topic, p)
		if !ok {
			return nil, fmt.Errorf("topic %s partition %d: no end offset listed", topic, p)
		}
		from[p], to[p] = end.Offset, end.Offset
		start := reset
		if cfg.addedReadPartition(topic, p) {
			start = beginnings
		}
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			from[p] = min(c.At, end.Offset)
		} else if o, ok := start.Lookup(topic, p); ok && o.Offset >= 0 {
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
		i.intake.dropOffsets(set) // past the end: not to be handed out
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
