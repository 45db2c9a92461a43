package runtime

import (
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// intake holds the records the loop polled and has not handed to tasks
// yet, and cuts each cycle from them: every partition that has records gets
// a share of the cycle's bound (read_max_elements_per_poll).
//
// Why: a poll hands out the client's buffered records partition by
// partition, and one fetch answer often holds a long run of one partition
// (a producer batch of packs is megabytes). A cycle sized to its bound then
// fed one or two of an instance's tasks while the others waited for the
// next cycle, and a stage whose elements are slow (a side input lookup, a
// state request each) ran one bundle at a time: the side join of `bench
// suite` took twice as long as when cycles were unbounded. So the loop
// polls up to twice the bound, each cycle takes a fair share of every
// partition, and what it leaves is carried to the next cycle. Rewinding
// the client instead (as the loop once did) drops its buffered fetches and
// fetches the same megabytes again at every cycle.
//
// Invariants:
//   - A partition's carried records follow the records handed to its task
//     with no gap, in offset order, and the client's fetch position for
//     the partition is just past the last carried one. So the offset the
//     group may commit for a partition with carried records is its first
//     carried record's (commitOffsets), never the client's position, which
//     is what franz-go would commit: the commit paths rewrite it (see
//     rewriteTxnCommit, rewriteCommit). Committed past them, the carried
//     records would be lost by the next abort or owner.
//   - Whatever moves the client's position of a partition back (an aborted
//     transaction resets every partition to its committed offset; a
//     rewind; a revoked or lost partition) drops that partition's carried
//     records: they are fetched again from where the group committed.
//     merge also drops carried records a polled record of the same
//     partition does not follow, should a reset have gone unnoticed.
//   - A cycle holds at most its bound of elements, a quarter more when all
//     of the intake fits that (cutting it would leave a few packs to a
//     cycle of their own), and at least one record when the intake has
//     any, so it always makes progress however large one pack is.
//   - A partition whose records are carried is never handed to its task as
//     an empty fetch: an empty fetch tells a Kafka source that it reached
//     the partition's end.
//   - The records held are at most about twice the bound's elements (the
//     loop polls 2×bound less what is carried), raw: packs, not decoded
//     elements.
type intake struct {
	mu       sync.Mutex
	parts    []*intakePartition // partitions with carried records, in the order they came
	elements int                // elements of the carried records
	turn     int                // the partition a cut's share starts at, counted up at every cut
}

// intakePartition is one partition's carried records and what the latest
// poll said of it.
type intakePartition struct {
	id       taskID
	fp       kgo.FetchPartition // Records: the carried ones; the rest: the latest poll's
	counts   []int              // elements of each record of fp.Records
	elements int
}

// size is how many elements the intake carries.
func (in *intake) size() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.elements
}

// drop forgets every carried record: the client's positions went back to
// the committed offsets.
func (in *intake) drop() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.parts, in.elements = nil, 0
}

// dropPartitions forgets the carried records of the given partitions.
func (in *intake) dropPartitions(parts map[string][]int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.parts = slices.DeleteFunc(in.parts, func(p *intakePartition) bool {
		if slices.Contains(parts[p.id.topic], p.id.partition) {
			in.elements -= p.elements
			return true
		}
		return false
	})
}

// dropOffsets forgets the carried records of the partitions in offsets
// (a SetOffsets map).
func (in *intake) dropOffsets(offsets map[string]map[int32]kgo.EpochOffset) {
	parts := map[string][]int32{}
	for topic, ps := range offsets {
		for p := range ps {
			parts[topic] = append(parts[topic], p)
		}
	}
	in.dropPartitions(parts)
}

// commitOffsets is, for each partition with carried records, the offset the
// group may commit: its first carried record's.
func (in *intake) commitOffsets() map[string]map[int32]kgo.EpochOffset {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.parts) == 0 {
		return nil
	}
	out := map[string]map[int32]kgo.EpochOffset{}
	for _, p := range in.parts {
		r := p.fp.Records[0]
		if out[p.id.topic] == nil {
			out[p.id.topic] = map[int32]kgo.EpochOffset{}
		}
		out[p.id.topic][p.id.partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
	}
	return out
}

// adjust replaces in offsets (what franz-go would commit) the offsets of
// partitions with carried records by theirs (at); it returns offsets.
func adjust(offsets, at map[string]map[int32]kgo.EpochOffset) map[string]map[int32]kgo.EpochOffset {
	for topic, ps := range offsets {
		for p := range ps {
			if o, ok := at[topic][p]; ok {
				ps[p] = o
			}
		}
	}
	return offsets
}

// rewriteTxnCommit makes a transaction's offset commit commit at, not the
// client's positions, for the partitions in at (commitOffsets). franz-go
// records what was sent as the committed offsets.
func rewriteTxnCommit(at map[string]map[int32]kgo.EpochOffset) func(*kmsg.TxnOffsetCommitRequest) error {
	return func(req *kmsg.TxnOffsetCommitRequest) error {
		for ti := range req.Topics {
			t := &req.Topics[ti]
			for pi := range t.Partitions {
				p := &t.Partitions[pi]
				if o, ok := at[t.Topic][p.Partition]; ok {
					p.Offset, p.LeaderEpoch = o.Offset, o.Epoch
				}
			}
		}
		return nil
	}
}

// rewriteCommit is rewriteTxnCommit for at_least_once's offset commit.
func rewriteCommit(at map[string]map[int32]kgo.EpochOffset) func(*kmsg.OffsetCommitRequest) error {
	return func(req *kmsg.OffsetCommitRequest) error {
		for ti := range req.Topics {
			t := &req.Topics[ti]
			for pi := range t.Partitions {
				p := &t.Partitions[pi]
				if o, ok := at[t.Topic][p.Partition]; ok {
					p.Offset, p.LeaderEpoch = o.Offset, o.Epoch
				}
			}
		}
		return nil
	}
}

// cycle adds the polled records to what the intake carries and cuts the
// cycle's records from them: all of them if they hold at most
// maxElements plus a quarter, else a share of maxElements for each
// partition (share), filled up to maxElements in turn; then each partition
// left without a record gets one while the cycle stays within
// hardElements (records are whole: a pack of thousands of elements passes
// a small bound, and one partition at a time would idle the other tasks).
// It returns the cycle's fetches and their elements; the rest is carried.
// Each record's elements are counted once: a pack's count for an internal
// topic (internal), one for any other record. maxElements is the cycle's
// bound (cycleBound), hardElements the option's, at least maxElements.
func (in *intake) cycle(polled kgo.Fetches, maxElements, hardElements int, internal func(topic string) bool) (kgo.Fetches, int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	empty := in.merge(polled, internal)
	var cycle kgo.Fetch
	add := func(topic string, fp kgo.FetchPartition) {
		cycle.Topics = append(cycle.Topics, kgo.FetchTopic{Topic: topic, Partitions: []kgo.FetchPartition{fp}})
	}
	// A partition the poll found at its end, with nothing carried: its
	// task learns the end.
	for _, e := range empty {
		if !slices.ContainsFunc(in.parts, func(p *intakePartition) bool { return p.id == e.id }) {
			add(e.id.topic, e.fp)
		}
	}
	if in.elements <= maxElements+maxElements/overshoot {
		n := in.elements
		for _, p := range in.parts {
			add(p.id.topic, p.fp)
		}
		in.parts, in.elements = nil, 0
		return kgo.Fetches{cycle}, n
	}

	order := slices.Clone(in.parts)
	start := in.turn % len(order)
	order = append(order[start:], order[:start]...)
	in.turn++
	sizes := make([]int, len(order))
	for k, p := range order {
		sizes[k] = p.elements
	}
	s := share(sizes, maxElements)
	take := make([]int, len(order)) // records taken of each partition
	took := make([]int, len(order)) // their elements
	n := 0
	for k, p := range order {
		for take[k] < len(p.counts) && took[k]+p.counts[take[k]] <= s {
			took[k] += p.counts[take[k]]
			take[k]++
		}
		n += took[k]
	}
	// Whole records leave the shares short of the bound: fill it in turn.
	for k, p := range order {
		for take[k] < len(p.counts) && n+p.counts[take[k]] <= maxElements {
			took[k] += p.counts[take[k]]
			n += p.counts[take[k]]
			take[k]++
		}
	}
	for k, p := range order {
		if take[k] == 0 && len(p.counts) > 0 && n+p.counts[0] <= hardElements {
			took[k], n, take[k] = p.counts[0], n+p.counts[0], 1
		}
	}
	if n == 0 { // one record larger than the bound: it goes alone
		take[0], took[0], n = 1, order[0].counts[0], order[0].counts[0]
	}
	for k, p := range order {
		if take[k] == 0 {
			continue
		}
		fp := p.fp
		fp.Records = p.fp.Records[:take[k]:take[k]]
		add(p.id.topic, fp)
		// Copied, not resliced: the handed records stay in a reslice's
		// array, and with them their fetched batches, for as long as the
		// partition carries records.
		p.fp.Records, p.counts = slices.Clone(p.fp.Records[take[k]:]), slices.Clone(p.counts[take[k]:])
		p.elements -= took[k]
	}
	in.elements -= n
	in.parts = slices.DeleteFunc(in.parts, func(p *intakePartition) bool { return len(p.fp.Records) == 0 })
	return kgo.Fetches{cycle}, n
}

// merge appends the polled records to the carried ones (the caller holds
// mu). It returns the polled partitions that brought no record, with what
// the poll said of them. An entry the poll made for its own error (its
// context ended) is no partition's.
func (in *intake) merge(polled kgo.Fetches, internal func(topic string) bool) (empty []*intakePartition) {
	find := func(id taskID) *intakePartition {
		for _, p := range in.parts {
			if p.id == id {
				return p
			}
		}
		return nil
	}
	polled.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Err != nil && len(fp.Records) == 0 {
			return
		}
		id := taskID{fp.Topic, fp.Partition}
		if len(fp.Records) == 0 {
			if p := find(id); p != nil {
				p.latest(fp.FetchPartition)
			} else {
				empty = append(empty, &intakePartition{id: id, fp: fp.FetchPartition})
			}
			return
		}
		p := find(id)
		if p != nil {
			last := p.fp.Records[len(p.fp.Records)-1]
			if fp.Records[0].Offset <= last.Offset {
				// The client went back without a drop: what it
				// fetches again replaces what was carried.
				in.elements -= p.elements
				p.fp.Records, p.counts, p.elements = nil, nil, 0
			}
		} else {
			p = &intakePartition{id: id}
			in.parts = append(in.parts, p)
		}
		p.latest(fp.FetchPartition)
		for _, r := range fp.Records {
			c := 1
			if internal(fp.Topic) {
				c = packedCount(r.Value)
			}
			p.fp.Records = append(p.fp.Records, r)
			p.counts = append(p.counts, c)
			p.elements += c
			in.elements += c
		}
	})
	return empty
}

// latest keeps what the latest poll said of the partition, not its records.
func (p *intakePartition) latest(fp kgo.FetchPartition) {
	recs := p.fp.Records
	p.fp = fp
	p.fp.Records = recs
}

// share is the largest s such that the partitions' min(size, s) sum to at
// most limit: water-filling, so that a partition with less than its share
// leaves the rest to the others.
func share(sizes []int, limit int) int {
	sorted := slices.Clone(sizes)
	slices.Sort(sorted)
	left := limit
	for k, n := range sorted {
		rest := len(sorted) - k
		if n*rest > left {
			return left / rest
		}
		left -= n
	}
	return limit // everything fits
}
