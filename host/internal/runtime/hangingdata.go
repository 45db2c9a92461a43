package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/shuffle"
)

// Hanging transactions on the partitions the instance writes.
//
// A marker Kafka dropped (hangingtxn.go) can leave a transaction of the
// instance's producer open on a data partition it writes: a repartition,
// changelog or output partition. Nothing reads past it under
// read_committed, and the producer's next transaction there does not start
// a transaction of its own: the broker counts its records into the open
// one (a producer has one transaction per partition), and the marker that
// ends the next one ends both. When the two outcomes differ, that is wrong
// either way: a committed cycle's records there go with a later abort
// (lost: the cycle's input offsets committed), an aborted cycle's with a
// later commit (doubled: its input is redone).
//
// So, before End, whenever a hang could have arisen since the last look
// (the instance's start, a broker it could not reach, an End that aborted
// or failed: lookDue), reconcileWritten looks at every partition of the
// topics the plan writes (topics.Set.Written) and this process produced
// to. Invariants:
//
//   - It acts only on the instance's own producer id, on a transaction
//     that began at an older epoch than the one under way. Under
//     transaction version 2 every transaction has its own epoch, and
//     Kafka's coordinator has ended every older one (a producer starts a
//     transaction only after the last one completed). Under version 1
//     epochs do not tell transactions apart, and nothing is found.
//   - An older transaction the one under way has not written to is ended
//     by its own marker, as endHangingData ends one on a changelog.
//   - An older transaction that the one under way extends (its first
//     record there has an older epoch) gets the outcome it had: the same
//     as this one's needs nothing; an aborted one makes this one abort
//     (its cycle is redone); a committed one under a transaction that
//     must abort has its records there read back and produced again at
//     the start of the next transaction (carried, kept until a
//     transaction commits). The outcome comes from End's answer or the
//     coordinator's marker (txnOutcomes), never a guess: an unknown one
//     fails the job, naming the partition.
//   - A process that restarts between the abort and the next commit loses
//     what it carried; the README says so.

// written records the topics this process's producers wrote to and
// carries records to produce again (see above); Run owns it, with the
// outcomes, so that it outlives a restarted instance.
type written struct {
	topics sync.Map // topic → struct{}
	mu     sync.Mutex
	carry  []carriedRecord
	// toldNotAllowed: the job was told once that its permissions do not
	// allow the look.
	toldNotAllowed atomic.Bool
}

// How a failed look is taken (lookFailure).
const (
	lookFails   = iota // the job fails: it cannot go on without knowing
	lookRefused        // the cluster's ACLs refuse it: warn once, go on
	lookAgain          // retriable: the next End looks again
)

// lookFailure classifies the error of a look for hanging transactions.
func lookFailure(err error) int {
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed):
		return lookRefused
	case kerr.IsRetriable(err), errors.Is(err, context.DeadlineExceeded):
		return lookAgain
	}
	return lookFails
}

// carriedRecord is a record of a committed transaction that a later abort
// took with it, to produce again at its partition.
type carriedRecord struct {
	topic      string
	partition  int32
	key, value []byte
	headers    []kgo.RecordHeader
	timestamp  time.Time
	from       string // where it was: topic/partition offset, for messages
}

func (w *written) wrote(topic string) {
	if w == nil {
		return
	}
	if _, ok := w.topics.Load(topic); !ok {
		w.topics.Store(topic, struct{}{})
	}
}

func (w *written) list() []string {
	var l []string
	if w != nil {
		w.topics.Range(func(k, _ any) bool { l = append(l, k.(string)); return true })
	}
	slices.Sort(l)
	return l
}

func (w *written) addCarry(rs []carriedRecord) {
	if w == nil || len(rs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.carry = append(w.carry, rs...)
}

// carried is what the next transaction produces first.
func (w *written) carried() []carriedRecord {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.carry)
}

// committed drops the first n carried records: a transaction that
// produced them committed.
func (w *written) committed(n int) {
	if w == nil || n == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.carry = slices.Delete(w.carry, 0, min(n, len(w.carry)))
}

func (c carriedRecord) record() *kgo.Record {
	r := &kgo.Record{Topic: c.topic, Key: c.key, Value: c.value, Headers: c.headers, Timestamp: c.timestamp}
	shuffle.SetPartition(r, c.partition)
	return r
}

// produceCarried produces, at the start of a transaction, the records a
// past abort took from a committed transaction; it returns how many.
func (i *instance) produceCarried() int {
	cs := i.cfg.written.carried()
	for _, c := range cs {
		i.produce(c.record())
	}
	if len(cs) > 0 {
		i.cfg.Logger.Warn("producing again the records of a committed transaction that an abort took with it", "records", len(cs), "first", cs[0].from)
	}
	return len(cs)
}

// lookDue reports whether reconcileWritten must look before this End.
func (i *instance) lookDue() bool {
	return i.cfg.ExactlyOnce && (i.writtenLookDue || i.cfg.reach.troubleSince(i.writtenLookMark))
}

// mergedTxn is a partition where the transaction under way extends an
// older one of the same producer.
type mergedTxn struct {
	p     kadm.DescribedProducer
	epoch int16 // the older transaction's
	older endedTxn
}

func (m mergedTxn) String() string {
	return fmt.Sprintf("on %s/%d, producer %d's transaction of epoch %d (since offset %d) is still open and the transaction under way (epoch %d) extends it",
		m.p.Topic, m.p.Partition, m.p.ProducerID, m.epoch, m.p.CurrentTxnStartOffset, m.p.ProducerEpoch)
}

// reconcileWritten looks for older transactions of the instance's producer
// open on the partitions this process wrote to, before End, and ends or
// reconciles them (see the invariants above). commit is the end the cycle
// asks for; abort says that it must abort instead. ifAborted are the
// records of committed transactions the one under way extends: should End
// abort after all (a rebalance, a lost membership), the caller carries
// them.
func (i *instance) reconcileWritten(ctx context.Context, commit bool) (abort bool, ifAborted []carriedRecord, err error) {
	mark := i.cfg.reach.mark()
	if len(i.cfg.written.list()) == 0 {
		i.writtenLookDue, i.writtenLookMark = false, mark
		return false, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, hangingCheckAfter)
	defer cancel()
	merged, found, markersDue, err := i.lookWritten(ctx)
	if err != nil {
		kind := lookFailure(err)
		if kind == lookFails && i.cfg.reach.troubleSince(mark) {
			// The brokers were out of reach: End meets the outage next,
			// and the look is due again once they are back.
			kind = lookAgain
		}
		switch kind {
		case lookRefused:
			// Not the job's failure: it ran without the look before.
			i.toldRefused(err)
			i.writtenLookDue, i.writtenLookMark = false, mark
			return false, nil, nil
		case lookAgain:
			// A leader moving, a broker slow to answer: not the job's
			// failure either; the next End looks again.
			i.cfg.Logger.Info("the look for hanging transactions failed; the next End looks again", "error", err)
			return false, nil, nil
		}
		return false, nil, err
	}
	if markersDue {
		return false, nil, nil // the last transaction's markers are under way: the next End looks
	}
	if found != "" {
		i.cfg.Logger.Info("hanging transactions on the partitions this process wrote", "found", found)
	}
	for _, m := range merged {
		if m.older.outcome == txnAborted && commit {
			abort = true
		}
	}
	final := commit && !abort
	var carry []carriedRecord
	for _, m := range merged {
		olderCommitted := m.older.outcome == txnCommitted
		if !olderCommitted {
			if commit {
				i.warn(fmt.Sprintf("a hanging transaction: %s; it aborted, so the transaction under way aborts too, and its cycle is redone", m))
			}
			continue
		}
		rs, err := i.readOlder(ctx, m)
		if err != nil {
			return false, nil, fmt.Errorf("%s: reading its records, to produce them again should the transaction under way abort: %w", m, err)
		}
		if final {
			i.cfg.Logger.Info("a hanging transaction ends with the one under way, which commits as it did", "what", m.String(), "records", len(rs))
			ifAborted = append(ifAborted, rs...)
			continue
		}
		carry = append(carry, rs...)
		i.warn(fmt.Sprintf("a hanging transaction: %s; it committed, and the transaction under way aborts, so its %d records there are produced again in the next transaction", m, len(rs)))
	}
	i.cfg.written.addCarry(carry)
	i.writtenLookDue, i.writtenLookMark = false, mark
	return abort, ifAborted, nil
}

// lookWritten is reconcileWritten's look: findHanging for the producer's
// current epoch, unless the coordinator is still writing the last
// transaction's markers (markersDue).
func (i *instance) lookWritten(ctx context.Context) (merged []mergedTxn, found string, markersDue bool, err error) {
	pid, epoch, err := i.cl.ProducerID(ctx)
	if err != nil {
		return nil, "", false, fmt.Errorf("looking for hanging transactions: the producer id: %w", err)
	}
	txn, err := i.ownTxn(ctx, kadm.NewClient(i.admin))
	if err != nil {
		return nil, "", false, fmt.Errorf("looking for hanging transactions: %w", err)
	}
	if strings.HasPrefix(txn.State, "Prepare") {
		return nil, "", true, nil
	}
	merged, found, err = i.findHanging(ctx, pid, epoch)
	if err != nil {
		return nil, "", false, fmt.Errorf("looking for hanging transactions of producer %d on the partitions this process wrote: %w", pid, err)
	}
	return merged, found, false, nil
}

// toldRefused tells the job once that the cluster's ACLs refuse the looks.
func (i *instance) toldRefused(err error) {
	if !i.cfg.written.toldNotAllowed.Swap(true) {
		i.warn(err.Error() + "; a transaction Kafka left hanging on them (docs/design-notes.md) is not repaired without Describe on the topics and the transactional id, and ClusterAction to write a marker")
	}
}

// reconcileBeforeFence runs before a restarted instance's producer fences
// its predecessor's open transaction, which the coordinator then aborts:
// the committed transactions that one extends have their records there
// carried to the new instance's first transaction.
func (i *instance) reconcileBeforeFence(ctx context.Context) error {
	if len(i.cfg.written.list()) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, i.restoreTimeout())
	defer cancel()
	var merged []mergedTxn
	var found string
	for {
		txn, err := i.ownTxn(ctx, kadm.NewClient(i.admin))
		if errors.Is(err, kerr.TransactionalIDNotFound) || err == nil && txn.State != "Ongoing" {
			return nil // a first start: no transaction to fence
		}
		if err == nil {
			merged, found, err = i.findHanging(ctx, txn.ProducerID, txn.ProducerEpoch)
		}
		if err == nil {
			break
		}
		err = fmt.Errorf("looking for hanging transactions on the partitions this process wrote, before fencing its open transaction: %w", err)
		switch lookFailure(err) {
		case lookRefused:
			i.toldRefused(err)
			return nil
		case lookAgain:
			if ctx.Err() == nil {
				i.cfg.Logger.Info("the look for hanging transactions failed; looking again", "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
		}
		return err
	}
	if found != "" {
		i.cfg.Logger.Info("hanging transactions on the partitions this process wrote", "found", found)
	}
	for _, m := range merged {
		if m.older.outcome != txnCommitted {
			continue
		}
		rs, err := i.readOlder(ctx, m)
		if err != nil {
			return fmt.Errorf("%s: reading its records to produce them again: %w", m, err)
		}
		i.cfg.written.addCarry(rs)
		i.warn(fmt.Sprintf("a hanging transaction: %s; it committed, and fencing the transaction under way aborts both, so its %d records there are produced again in the next transaction", m, len(rs)))
	}
	return nil
}

func (i *instance) warn(msg string) {
	i.cfg.Logger.Warn(msg)
	if i.cfg.Warning != nil {
		i.cfg.Warning(msg)
	}
}

// findHanging describes the producers of every partition this process
// wrote to and ends each older transaction of producer pid that the
// current one (epoch) has not reached (one of unknown outcome is left
// alone); it returns those the current one has reached, with the outcome
// of the older one, and what it found, for the log. An older transaction
// of unknown outcome that the current one extends is an error: whichever
// marker ends it may lose or double its records.
func (i *instance) findHanging(ctx context.Context, pid int64, epoch int16) (merged []mergedTxn, found string, err error) {
	topicList := i.cfg.written.list()
	if len(topicList) == 0 {
		return nil, "", nil
	}
	adm := kadm.NewClient(i.admin)
	described, err := adm.DescribeProducers(ctx, topicsSet(topicList))
	if err != nil {
		return nil, "", fmt.Errorf("describing the producers of %v: %w", topicList, err)
	}
	var notes []string
	var errs []error
	extends := map[taskID]kadm.DescribedProducer{}
	described.EachPartition(func(ps kadm.DescribedProducersPartition) {
		if ps.Err != nil {
			errs = append(errs, fmt.Errorf("describing the producers of %s/%d: %w", ps.Topic, ps.Partition, ps.Err))
		}
	})
	described.EachProducer(func(p kadm.DescribedProducer) {
		if p.ProducerID != pid || p.CurrentTxnStartOffset < 0 || p.ProducerEpoch > epoch {
			return
		}
		if p.ProducerEpoch == epoch {
			extends[taskID{p.Topic, p.Partition}] = p // its own, or an older one it extends: the first record tells
			return
		}
		what := fmt.Sprintf("producer %d epoch %d holds a transaction open on %s/%d since offset %d, and the producer is at epoch %d",
			p.ProducerID, p.ProducerEpoch, p.Topic, p.Partition, p.CurrentTxnStartOffset, epoch)
		commit, why, err := i.olderOutcome(ctx, p.ProducerID, p.ProducerEpoch, p.Topic, p.Partition)
		if err != nil {
			// Left alone: should a later transaction extend it, that
			// transaction's look stops the job.
			notes = append(notes, fmt.Sprintf("%s; it is left alone: %v; %s", what, err, byHand))
			return
		}
		if err := writeMarker(ctx, adm, p, commit); err != nil {
			errs = append(errs, fmt.Errorf("%s: ending it: %w", what, err))
			return
		}
		i.warn(fmt.Sprintf("a hanging transaction: %s. Wrote its %s marker (as kafka-transactions.sh abort would, KIP-664), because %s", what, markerName(commit), why))
		notes = append(notes, "ended: "+what)
	})
	if len(errs) > 0 {
		return nil, "", errors.Join(errs...)
	}
	if len(extends) == 0 {
		return nil, strings.Join(notes, "; "), nil
	}
	starts := map[taskID]int64{}
	for id, p := range extends {
		starts[id] = p.CurrentTxnStartOffset
	}
	first, err := i.firstRecords(ctx, starts)
	if err != nil {
		return nil, "", err
	}
	for id, p := range extends {
		r := first[id]
		if r == nil || r.ProducerID != pid || r.ProducerEpoch >= epoch {
			continue // the transaction under way began it
		}
		m := mergedTxn{p: p, epoch: r.ProducerEpoch}
		commit, why, err := i.olderOutcome(ctx, pid, r.ProducerEpoch, p.Topic, p.Partition)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w. The job stops, and the abort of its open transaction ends the hanging one's records there too: should it have committed, they stay in the log, readable read_uncommitted from offset %d (producer %d, epoch %d)",
				m, err, p.CurrentTxnStartOffset, pid, r.ProducerEpoch))
			continue
		}
		m.older.outcome = txnAborted
		if commit {
			m.older.outcome = txnCommitted
		}
		notes = append(notes, fmt.Sprintf("%s (it %s: %s)", m, m.older.outcome, why))
		merged = append(merged, m)
	}
	slices.SortFunc(merged, func(a, b mergedTxn) int {
		return strings.Compare(fmt.Sprint(a.p.Topic, a.p.Partition), fmt.Sprint(b.p.Topic, b.p.Partition))
	})
	return merged, strings.Join(notes, "; "), errors.Join(errs...)
}

func topicsSet(l []string) kadm.TopicsSet {
	s := kadm.TopicsSet{}
	for _, t := range l {
		s.Add(t)
	}
	return s
}

// olderOutcome is the outcome of the transaction of producer pid whose
// records carry epoch, open on topic/partition: what this process's End
// answered; if End failed, its marker where its first record landed (not
// this partition); else the coordinator's log. An unknown one is an
// error.
func (i *instance) olderOutcome(ctx context.Context, pid int64, epoch int16, topic string, partition int32) (commit bool, why string, err error) {
	if e, ok := i.cfg.outcomes.byEpoch(pid, epoch); ok {
		switch e.outcome {
		case txnCommitted:
			return true, "this process's End committed it", nil
		case txnAborted:
			return false, "this process's End aborted it", nil
		}
		if e.mark.topic != topic || e.mark.partition != partition {
			c, ok, err := i.lookupOutcome(ctx, e.mark)
			if err != nil {
				return false, "", err
			}
			if ok {
				return c, fmt.Sprintf("this process's End of it failed, and its marker on %s/%d (after its record at offset %d) is a %s", e.mark.topic, e.mark.partition, e.mark.offset, markerName(c)), nil
			}
		}
	}
	c, ok, lerr := i.coordinatorOutcome(ctx, pid, epoch)
	if ok {
		return c, fmt.Sprintf("its coordinator's log (%s) says it %s", transactionStateTopic, pastTense(c)), nil
	}
	looked := "it is not in its coordinator's log"
	if lerr != nil {
		looked = fmt.Sprintf("its coordinator's log could not be read (%v)", lerr)
	}
	return false, "", fmt.Errorf("neither this process nor Kafka knows whether the transaction of epoch %d committed (%s)", epoch, looked)
}

// byHand is what an operator can do with a hang whose outcome no one
// knows.
const byHand = "it may hold committed records, which an ABORT would lose, or aborted ones, which a COMMIT would double: end it by hand once its outcome is known (kafka-transactions.sh abort writes an ABORT)"

func pastTense(commit bool) string {
	if commit {
		return "committed"
	}
	return "aborted"
}

// firstRecords reads the record at each partition's offset
// (read_uncommitted).
func (i *instance) firstRecords(ctx context.Context, at map[taskID]int64) (map[taskID]*kgo.Record, error) {
	parts := map[string]map[int32]kgo.Offset{}
	for id, o := range at {
		if parts[id.topic] == nil {
			parts[id.topic] = map[int32]kgo.Offset{}
		}
		parts[id.topic][id.partition] = kgo.NewOffset().At(o)
	}
	cl, err := kafkaconn.NewClient(i.cfg.BootstrapServers, i.cfg.Security, append(i.cfg.reach.opts(),
		kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
	)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	got := map[taskID]*kgo.Record{}
	for len(got) < len(at) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading the first records of %d open transactions: %w", len(at), err)
		}
		for _, fe := range fs.Errors() {
			return nil, fmt.Errorf("reading %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		for _, r := range fs.Records() {
			id := taskID{r.Topic, r.Partition}
			if got[id] == nil {
				got[id] = r
				cl.PauseFetchPartitions(map[string][]int32{r.Topic: {r.Partition}})
			}
		}
	}
	return got, nil
}

// readOlder reads the records of m's older transaction on its partition:
// those of its producer and epoch from where it began to the partition's
// high watermark.
func (i *instance) readOlder(ctx context.Context, m mergedTxn) ([]carriedRecord, error) {
	var rs []carriedRecord
	err := i.readPartition(ctx, m.p.Topic, m.p.Partition, m.p.CurrentTxnStartOffset, func(r *kgo.Record) bool {
		if r.Attrs.IsControl() || r.ProducerID != m.p.ProducerID || r.ProducerEpoch != m.epoch {
			return false
		}
		rs = append(rs, carriedRecord{
			topic: r.Topic, partition: r.Partition, key: r.Key, value: r.Value, headers: r.Headers,
			timestamp: r.Timestamp,
			from:      fmt.Sprintf("%s/%d offset %d", r.Topic, r.Partition, r.Offset),
		})
		return false
	})
	return rs, err
}
