package runtime

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
)

// A hanging offset commit, and how an instance ends it.
//
// Kafka can leave a transactional offset commit of the instance's producer
// pending on the group's __consumer_offsets partition after the
// coordinator ended its transaction: a hanging transaction (KIP-664), seen
// with Kafka 4.4 when the only broker stopped while a cycle committed
// (docs/design-notes.md). The group's offset fetch (require_stable) then
// answers UNSTABLE_OFFSET_COMMIT for as long as it hangs, so the instance
// fetches nothing from those partitions (offsetwait.go).
//
// Kafka's remedy is the marker that never landed, written by hand
// (kafka-transactions.sh abort writes an ABORT). Which marker is the
// question: aborting offsets whose transaction committed redoes its input
// and doubles its output; committing offsets whose transaction aborted
// skips input. The coordinator no longer knows, but the instance that
// ended the transaction does: txnOutcomes keeps, for this process's
// transactions that committed group offsets, the offsets and what End
// answered. Invariants of endHangingOffsets:
//
//   - it touches only a transaction of the instance's own producer id, and
//     only once the coordinator has ended it (Empty, CompleteCommit,
//     CompleteAbort, or a later epoch of the producer under way): the
//     transaction is no one's to finish but the marker's;
//   - it writes COMMIT only for offsets that an End this process ran
//     reported committed, and ABORT only for offsets an End reported
//     aborted, or that later committed offsets of every one of their
//     partitions supersede (then the group's offsets are those either way);
//   - when that End failed, the transaction's own marker on a partition it
//     produced to decides: txnOutcomes keeps where the transaction's first
//     acknowledged record landed, and the first marker of the producer
//     after it ends that transaction (lookupOutcome);
//   - anything else (no such marker yet; a process restarted since;
//     another producer's transaction) is left alone, and the
//     stalled-offsets error says what was found and how to end it by hand.

// txnOutcome is what End answered for one transaction with group offsets.
type txnOutcome int8

const (
	txnUnknown   txnOutcome = iota // End failed: committed or not, no one here knows
	txnCommitted                   // End committed it
	txnAborted                     // End aborted it (nothing of it committed)
)

func (o txnOutcome) String() string {
	switch o {
	case txnCommitted:
		return "committed"
	case txnAborted:
		return "aborted"
	}
	return "of unknown outcome"
}

// maxTxnOutcomes bounds txnOutcomes: about a minute and a half of cycles
// at the default commit interval. A hang is found within seconds of the
// restart that follows it.
const maxTxnOutcomes = 1024

// txnOutcomes is the process's record of its transactions with group
// offsets (Run's, so that it outlives a restarted instance), oldest
// first.
type txnOutcomes struct {
	mu   sync.Mutex
	list []endedTxn
}

type endedTxn struct {
	offsets map[taskID]int64
	outcome txnOutcome
	mark    *producedMark // where a record of the transaction landed; nil: none produced
}

// producedMark is where a record of a transaction landed, and the
// producer id and epoch it was written with. A producer has at most one
// transaction open on a partition, so the first marker of that producer
// after the record is its transaction's end: COMMIT or ABORT, as the
// coordinator decided it.
type producedMark struct {
	topic     string
	partition int32
	offset    int64
	pid       int64
	epoch     int16
}

// outcomeOf is the outcome of a transaction End answered committed, err.
func outcomeOf(committed bool, err error) txnOutcome {
	switch {
	case err != nil:
		return txnUnknown
	case committed:
		return txnCommitted
	}
	return txnAborted
}

// record adds a transaction that committed offsets (as End sends them:
// the client's uncommitted offsets) or produced records, its outcome, and
// where one of its records landed.
func (o *txnOutcomes) record(offsets map[string]map[int32]kgo.EpochOffset, outcome txnOutcome, mark *producedMark) {
	if o == nil || len(offsets) == 0 && mark == nil {
		return
	}
	e := endedTxn{offsets: map[taskID]int64{}, outcome: outcome, mark: mark}
	for topic, ps := range offsets {
		for p, eo := range ps {
			e.offsets[taskID{topic, p}] = eo.Offset
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.list) == maxTxnOutcomes {
		o.list = slices.Delete(o.list, 0, 1)
	}
	o.list = append(o.list, e)
}

// decide says which marker ends a hanging transaction whose pending
// offsets are pending (see the invariants above); ok false: none, and
// why. When End failed, lookup is where a record of that transaction
// landed, if it produced one: its marker there says what End could not
// (lookupOutcome).
func (o *txnOutcomes) decide(pending map[taskID]int64) (commit, ok bool, why string, lookup *producedMark) {
	if o == nil || len(pending) == 0 {
		return false, false, "no record of this process's transactions", nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	superseded := map[taskID]bool{}
	for _, e := range o.list {
		if e.outcome != txnCommitted {
			continue
		}
		for id, off := range pending {
			if e.offsets[id] > off {
				superseded[id] = true
			}
		}
	}
	if len(superseded) == len(pending) {
		return false, true, "later transactions of this process committed offsets past these on every one of their partitions", nil
	}
	for _, e := range slices.Backward(o.list) {
		if !maps.Equal(e.offsets, pending) {
			continue
		}
		switch e.outcome {
		case txnCommitted:
			return true, true, "this process's End committed the transaction with these offsets", nil
		case txnAborted:
			return false, true, "this process's End aborted the transaction with these offsets", nil
		}
		return false, false, "this process's End of the transaction with these offsets failed, so whether it committed is not known", e.mark
	}
	return false, false, "no transaction of this process (since it started, the last 1024) committed these offsets", nil
}

// byEpoch finds the transaction of producer pid at epoch: under
// transaction version 2 each transaction has an epoch of its own, and its
// records carry it. ok false: none recorded, or more than one (version 1,
// where a producer's transactions share an epoch until it restarts).
func (o *txnOutcomes) byEpoch(pid int64, epoch int16) (e endedTxn, ok bool) {
	if o == nil {
		return e, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	seen := map[int16]bool{}
	for _, x := range o.list {
		if x.mark == nil || x.mark.pid != pid {
			continue
		}
		if seen[x.mark.epoch] {
			return e, false // transaction version 1: epochs say nothing
		}
		seen[x.mark.epoch] = true
		if x.mark.epoch == epoch {
			e = x
			n++
		}
	}
	return e, n == 1
}

// hangingCheckAfter is how long an assigned partition waits for its
// committed offset before the instance looks for a hanging transaction of
// its own, and the interval between looks.
const hangingCheckAfter = 10 * time.Second

// hangingTxn is a transaction open on a __consumer_offsets partition.
type hangingTxn struct {
	producer kadm.DescribedProducer
	offsets  map[taskID]int64 // the group's offsets pending in it
}

func (h hangingTxn) String() string {
	p := h.producer
	return fmt.Sprintf("producer %d epoch %d holds a transaction open on %s/%d since offset %d, with offsets of %d partitions of the group",
		p.ProducerID, p.ProducerEpoch, p.Topic, p.Partition, p.CurrentTxnStartOffset, len(h.offsets))
}

// endHangingOffsets looks for a hanging transaction of the instance's
// producer on __consumer_offsets and ends it with the marker the
// invariants above allow. It returns what it did or found, for the log
// and the stalled-offsets error; nothing if there is no such transaction
// (the wait is then another's, or a legal one).
func (i *instance) endHangingOffsets(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, hangingCheckAfter)
	defer cancel()
	adm := kadm.NewClient(i.admin)
	txn, err := i.ownTxn(ctx, adm)
	if err != nil {
		return "", err
	}
	hanging, err := openOffsetCommits(ctx, adm, txn.ProducerID)
	if err != nil || len(hanging) == 0 {
		return "", err
	}
	var found []string
	for _, p := range hanging {
		if !txnEnded(txn, p) {
			found = append(found, fmt.Sprintf("producer %d epoch %d has a transaction open on %s/%d, which its coordinator has %s at epoch %d: not ended yet",
				p.ProducerID, p.ProducerEpoch, p.Topic, p.Partition, txn.State, txn.ProducerEpoch))
			continue
		}
		h := hangingTxn{producer: p}
		if h.offsets, err = i.pendingOffsets(ctx, p); err != nil {
			return "", err
		}
		if len(h.offsets) == 0 {
			found = append(found, h.String()+"; none is of this application's consumer group, so it is left alone")
			continue
		}
		commit, ok, why, lookup := i.cfg.outcomes.decide(h.offsets)
		if !ok && lookup != nil && lookup.pid == p.ProducerID && lookup.epoch == p.ProducerEpoch {
			var err error
			if commit, ok, err = i.lookupOutcome(ctx, lookup); err != nil {
				return "", fmt.Errorf("%s: %w", h, err)
			}
			if ok {
				why = fmt.Sprintf("this process's End of the transaction with these offsets failed, and its marker on %s/%d (after its record at offset %d) is a %s", lookup.topic, lookup.partition, lookup.offset, markerName(commit))
			} else {
				why += fmt.Sprintf(", and its record at %s/%d offset %d has no marker after it yet", lookup.topic, lookup.partition, lookup.offset)
			}
		}
		if !ok {
			c, known, lerr := i.coordinatorOutcome(ctx, p.ProducerID, p.ProducerEpoch)
			switch {
			case known:
				commit, ok = c, true
				why = fmt.Sprintf("%s; its coordinator's log (%s) says it %s", why, transactionStateTopic, pastTense(c))
			case lerr != nil:
				why = fmt.Sprintf("%s, and its coordinator's log could not be read (%v)", why, lerr)
			default:
				why += ", and it is not in its coordinator's log"
			}
		}
		if !ok {
			found = append(found, fmt.Sprintf("%s, after its coordinator ended it (%s at epoch %d); it is left alone: %s", h, txn.State, txn.ProducerEpoch, why))
			continue
		}
		if err := writeMarker(ctx, adm, p, commit); err != nil {
			return "", fmt.Errorf("%s: ending it (%s): %w", h, why, err)
		}
		msg := fmt.Sprintf("a hanging transaction blocked the group's committed offsets: %s, after its coordinator ended it (%s at epoch %d). Wrote its %s marker (as kafka-transactions.sh abort would, KIP-664), because %s",
			h, txn.State, txn.ProducerEpoch, markerName(commit), why)
		i.cfg.Logger.Warn(msg)
		if i.cfg.Warning != nil {
			i.cfg.Warning(msg)
		}
		found = append(found, "ended: "+h.String())
	}
	return strings.Join(found, "; "), nil
}

// endHangingData looks for transactions of the instance's producer left
// open on partitions of topics (its changelogs) by a marker Kafka dropped,
// and ends each with the marker of the transaction its epoch names
// (olderOutcome: what End answered for it, its marker where its first
// record landed, or the coordinator's log). Only older epochs than the
// coordinator's, which has ended them all. A changelog partition held open so keeps its restore waiting
// without end: the producer's next transaction there would close it, but
// that comes only after the restore.
func (i *instance) endHangingData(ctx context.Context, topics []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, hangingCheckAfter)
	defer cancel()
	adm := kadm.NewClient(i.admin)
	txn, err := i.ownTxn(ctx, adm)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(txn.State, "Prepare") {
		return "", nil // markers under way: the next look
	}
	producers, err := adm.DescribeProducers(ctx, topicsSet(topics))
	if err != nil {
		return "", fmt.Errorf("describing the producers of %v: %w", topics, err)
	}
	var found []string
	var errs []error
	producers.EachProducer(func(p kadm.DescribedProducer) {
		if p.ProducerID != txn.ProducerID || p.CurrentTxnStartOffset < 0 || p.ProducerEpoch >= txn.ProducerEpoch {
			return
		}
		what := fmt.Sprintf("producer %d epoch %d holds a transaction open on %s/%d since offset %d, which its coordinator has ended (%s at epoch %d)",
			p.ProducerID, p.ProducerEpoch, p.Topic, p.Partition, p.CurrentTxnStartOffset, txn.State, txn.ProducerEpoch)
		commit, why, err := i.olderOutcome(ctx, p.ProducerID, p.ProducerEpoch, p.Topic, p.Partition)
		if err != nil {
			found = append(found, fmt.Sprintf("%s; it is left alone: %v; %s", what, err, byHand))
			return
		}
		if err := writeMarker(ctx, adm, p, commit); err != nil {
			errs = append(errs, fmt.Errorf("%s: ending it: %w", what, err))
			return
		}
		msg := fmt.Sprintf("a hanging transaction held a changelog partition open: %s. Wrote its %s marker (as kafka-transactions.sh abort would, KIP-664), because %s", what, markerName(commit), why)
		i.cfg.Logger.Warn(msg)
		if i.cfg.Warning != nil {
			i.cfg.Warning(msg)
		}
		found = append(found, "ended: "+what)
	})
	return strings.Join(found, "; "), errors.Join(errs...)
}

// txnEnded reports whether the coordinator has ended the transaction that
// p holds open: its transactional id is idle, or already in a later
// epoch. (Under transaction version 2 every transaction bumps the epoch;
// under version 1 a transaction of the same epoch under way may be the
// one p belongs to.)
func txnEnded(txn kadm.DescribedTransaction, p kadm.DescribedProducer) bool {
	if txn.ProducerID != p.ProducerID {
		return false
	}
	switch txn.State {
	case "Empty", "CompleteCommit", "CompleteAbort":
		return txn.ProducerEpoch >= p.ProducerEpoch
	case "Ongoing":
		return txn.ProducerEpoch > p.ProducerEpoch
	}
	return false // PrepareCommit, PrepareAbort, PrepareEpochFence: markers under way
}

// openOffsetCommits lists the transactions of producer id that are open on
// a __consumer_offsets partition.
func openOffsetCommits(ctx context.Context, adm *kadm.Client, producerID int64) ([]kadm.DescribedProducer, error) {
	described, err := adm.DescribeProducers(ctx, kadm.TopicsSet{offsetsTopic: nil})
	if err != nil {
		return nil, fmt.Errorf("describing the producers of %s: %w", offsetsTopic, err)
	}
	var open []kadm.DescribedProducer
	var errs []error
	for _, ps := range described[offsetsTopic].Partitions {
		if ps.Err != nil {
			errs = append(errs, fmt.Errorf("describing the producers of %s/%d: %w", offsetsTopic, ps.Partition, ps.Err))
			continue
		}
		for _, p := range ps.ActiveProducers {
			if p.ProducerID == producerID && p.CurrentTxnStartOffset >= 0 {
				open = append(open, p)
			}
		}
	}
	slices.SortFunc(open, func(a, b kadm.DescribedProducer) int { return cmp.Compare(a.Partition, b.Partition) })
	if len(open) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return open, nil
}

const offsetsTopic = "__consumer_offsets"

// pendingOffsets reads the offset commits of p's open transaction (from
// its first offset to the partition's high watermark, read_uncommitted)
// and returns those of the instance's group, the last per partition.
func (i *instance) pendingOffsets(ctx context.Context, p kadm.DescribedProducer) (map[taskID]int64, error) {
	group := i.cfg.ApplicationID
	pending := map[taskID]int64{}
	var bad error
	err := i.readPartition(ctx, offsetsTopic, p.Partition, p.CurrentTxnStartOffset, func(r *kgo.Record) bool {
		if r.Attrs.IsControl() || r.ProducerID != p.ProducerID || r.ProducerEpoch != p.ProducerEpoch || len(r.Key) < 2 || r.Value == nil {
			return false
		}
		if v := int16(binary.BigEndian.Uint16(r.Key)); v != 0 && v != 1 {
			return false // not an offset commit (a group's metadata)
		}
		key, val := kmsg.NewOffsetCommitKey(), kmsg.NewOffsetCommitValue()
		if key.ReadFrom(r.Key) != nil || key.Group != group {
			return false
		}
		if err := val.ReadFrom(r.Value); err != nil {
			bad = fmt.Errorf("%s/%d offset %d: the offset commit of %s/%d: %w", offsetsTopic, p.Partition, r.Offset, key.Topic, key.Partition, err)
			return true
		}
		pending[taskID{key.Topic, key.Partition}] = val.Offset
		return false
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, err
	}
	return pending, nil
}

func markerName(commit bool) string {
	if commit {
		return "COMMIT"
	}
	return "ABORT"
}

// lookupOutcome reads, after the record at m, the first marker of m's
// producer (read_uncommitted, control records kept, up to the partition's
// high watermark): the end of the transaction m's record belongs to. ok
// false: there is none yet.
func (i *instance) lookupOutcome(ctx context.Context, m *producedMark) (commit, ok bool, err error) {
	err = i.readPartition(ctx, m.topic, m.partition, m.offset+1, func(r *kgo.Record) (stop bool) {
		commit, ok, stop = m.judge(r)
		return stop
	})
	return commit, ok, err
}

// ownTxn describes the instance's transactional id at its coordinator.
func (i *instance) ownTxn(ctx context.Context, adm *kadm.Client) (kadm.DescribedTransaction, error) {
	txnID := i.ident.transactionalID(i.cfg.ApplicationID)
	described, err := adm.DescribeTransactions(ctx, txnID)
	if err != nil {
		return kadm.DescribedTransaction{}, fmt.Errorf("describing transactional id %s: %w", txnID, err)
	}
	txn, err := described.On(txnID, nil)
	if err == nil {
		err = txn.Err
	}
	if err != nil {
		return txn, fmt.Errorf("describing transactional id %s: %w", txnID, err)
	}
	return txn, nil
}

// readPartition passes each record of topic/partition from offset from to
// the partition's high watermark (as it is now) to each, read_uncommitted
// and with the control records (so that the read reaches the end when
// markers are last), until each says stop.
func (i *instance) readPartition(ctx context.Context, topic string, partition int32, from int64, each func(*kgo.Record) (stop bool)) error {
	ends, err := kadm.NewClient(i.admin).ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	end, found := ends.Lookup(topic, partition)
	if !found || end.Err != nil {
		return fmt.Errorf("listing the end offset of %s/%d: %v", topic, partition, end.Err)
	}
	cl, err := kafkaconn.NewClient(i.cfg.BootstrapServers, i.cfg.Security, append(i.cfg.reach.opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for next := from; next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s/%d from offset %d to %d: %w", topic, partition, from, end.Offset, err)
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("reading %s/%d: %w", topic, partition, fe.Err)
		}
		for _, r := range fs.Records() {
			next = r.Offset + 1
			if each(r) {
				return nil
			}
		}
	}
	return nil
}

// judge reads r, a record after m on m's partition: stop when it tells
// the end of m's transaction (ok: the marker, commit its type) or that it
// cannot be told from here.
//
// Kafka may have dropped this marker too (see above): the producer's next
// transaction there then ends the record with its own marker, which says
// nothing of this one. Under transaction version 2 that transaction has a
// later epoch: its records, or a marker past the bump of m's own end, give
// it away.
func (m *producedMark) judge(r *kgo.Record) (commit, ok, stop bool) {
	if r.ProducerID != m.pid {
		return false, false, false
	}
	if !r.Attrs.IsControl() {
		return false, false, r.ProducerEpoch != m.epoch
	}
	if r.ProducerEpoch > m.epoch+1 || len(r.Key) < 4 {
		return false, false, true
	}
	// A control record's key: version int16, type int16 (0 ABORT, 1
	// COMMIT).
	switch binary.BigEndian.Uint16(r.Key[2:]) {
	case 0:
		return false, true, true
	case 1:
		return true, true, true
	}
	return false, false, true
}

// writeMarker writes p's transaction's marker on its partition.
func writeMarker(ctx context.Context, adm *kadm.Client, p kadm.DescribedProducer, commit bool) error {
	resp, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{
		ProducerID:       p.ProducerID,
		ProducerEpoch:    p.ProducerEpoch,
		Commit:           commit,
		CoordinatorEpoch: p.CoordinatorEpoch,
		Topics:           kadm.TopicsSet{p.Topic: {p.Partition: {}}},
	})
	if err != nil {
		return fmt.Errorf("writing the marker (WriteTxnMarkers needs ClusterAction on the cluster): %w", err)
	}
	var errs []error
	resp.EachPartition(func(r kadm.TxnMarkersPartitionResponse) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("writing the marker on %s/%d: %w", r.Topic, r.Partition, r.Err))
		}
	})
	return errors.Join(errs...)
}
