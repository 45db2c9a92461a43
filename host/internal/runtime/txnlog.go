package runtime

import (
	"context"
	"fmt"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The coordinator's own record of a transaction's outcome.
//
// A transaction coordinator logs every state of a transactional id to
// __transaction_state (keyed by the id, compacted). Under transaction
// version 2 a transaction whose records carry epoch E is logged Ongoing at
// E, and its end at E+1: PrepareCommit and CompleteCommit, or PrepareAbort
// (or PrepareEpochFence, when a new producer fenced it) and CompleteAbort.
// So the first end state logged after Ongoing at E is the coordinator's
// decision for that transaction, whatever became of its markers, and
// whichever process ran it: what txnOutcomes cannot say after a restart.
// It answers only while compaction has kept those records (the active
// segment is never compacted), and only for version 2, where an epoch
// names one transaction.

// transactionStateTopic is Kafka's transaction log.
const transactionStateTopic = "__transaction_state"

// javaStringHash is Java's String.hashCode, over UTF-16 code units.
func javaStringHash(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}

// transactionStatePartition is the partition of __transaction_state (of n)
// that holds txnID, as Kafka's coordinator places it
// (Utils.abs(hashCode) % n; Utils.abs maps MinInt32 to 0).
func transactionStatePartition(txnID string, n int32) int32 {
	h := javaStringHash(txnID)
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % n
}

// txnLogDecision reads the decision in a sequence of a transactional id's
// logged states: the first end after Ongoing at epoch of producer pid
// (transaction version 2 only). ok false: not there.
type txnLogDecision struct {
	pid        int64
	epoch      int16
	sawOngoing bool
	commit, ok bool
}

// add takes the next logged state of the transactional id; it reports
// whether the decision is found.
func (d *txnLogDecision) add(v *kmsg.TxnMetadataValue) (done bool) {
	if v.ProducerID != d.pid {
		return false
	}
	switch v.State {
	case kmsg.TransactionStateOngoing:
		// Another Ongoing at this epoch before its end: version 1, whose
		// transactions share an epoch, or a log this does not read right.
		if v.ProducerEpoch == d.epoch {
			if d.sawOngoing || v.ClientTransactionVersion < 2 {
				d.sawOngoing = false
				return true
			}
			d.sawOngoing = true
		}
		return false
	case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStateCompleteCommit:
		if d.sawOngoing {
			d.commit, d.ok = true, true
			return true
		}
	case kmsg.TransactionStatePrepareAbort, kmsg.TransactionStateCompleteAbort, kmsg.TransactionStatePrepareEpochFence:
		if d.sawOngoing {
			d.commit, d.ok = false, true
			return true
		}
	}
	return false
}

// coordinatorOutcome reads the instance's transactional id's states from
// __transaction_state and returns the coordinator's decision for the
// transaction of producer pid whose records carry epoch. ok false: not
// found (compacted away, transaction version 1, no access to the topic).
func (i *instance) coordinatorOutcome(ctx context.Context, pid int64, epoch int16) (commit, ok bool, err error) {
	txnID := i.ident.transactionalID(i.cfg.ApplicationID)
	meta, err := kadm.NewClient(i.admin).Metadata(ctx, transactionStateTopic)
	if err != nil {
		return false, false, fmt.Errorf("the metadata of %s: %w", transactionStateTopic, err)
	}
	td, found := meta.Topics[transactionStateTopic]
	if !found || td.Err != nil || len(td.Partitions) == 0 {
		return false, false, fmt.Errorf("the metadata of %s: %v", transactionStateTopic, td.Err)
	}
	d := txnLogDecision{pid: pid, epoch: epoch}
	err = i.readPartition(ctx, transactionStateTopic, transactionStatePartition(txnID, int32(len(td.Partitions))), 0, func(r *kgo.Record) bool {
		if r.Value == nil || len(r.Key) < 2 {
			return false
		}
		var k kmsg.TxnMetadataKey
		if k.ReadFrom(r.Key) != nil || k.TransactionalID != txnID {
			return false
		}
		var v kmsg.TxnMetadataValue
		if v.ReadFrom(r.Value) != nil {
			return false
		}
		return d.add(&v)
	})
	if err != nil {
		return false, false, err
	}
	return d.commit, d.ok, nil
}
