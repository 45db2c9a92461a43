package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func offs(kv ...any) map[string]map[int32]kgo.EpochOffset {
	m := map[string]map[int32]kgo.EpochOffset{}
	for n := 0; n < len(kv); n += 3 {
		topic, p, o := kv[n].(string), int32(kv[n+1].(int)), int64(kv[n+2].(int))
		if m[topic] == nil {
			m[topic] = map[int32]kgo.EpochOffset{}
		}
		m[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	return m
}

func pend(kv ...any) map[taskID]int64 {
	m := map[taskID]int64{}
	for n := 0; n < len(kv); n += 3 {
		m[taskID{kv[n].(string), int32(kv[n+1].(int))}] = int64(kv[n+2].(int))
	}
	return m
}

// TestTxnOutcomesDecide: the marker for a hanging transaction's pending
// offsets follows what End answered for those offsets, and later commits
// past them on every partition make an abort safe; nothing else decides.
func TestTxnOutcomesDecide(t *testing.T) {
	type rec struct {
		offsets map[string]map[int32]kgo.EpochOffset
		outcome txnOutcome
	}
	for _, tc := range []struct {
		name    string
		records []rec
		pending map[taskID]int64
		commit  bool
		ok      bool
	}{
		{"committed", []rec{{offs("in", 0, 42, "in", 1, 7), txnCommitted}}, pend("in", 0, 42, "in", 1, 7), true, true},
		{"aborted", []rec{{offs("in", 0, 42, "in", 1, 7), txnAborted}}, pend("in", 0, 42, "in", 1, 7), false, true},
		{"unknown", []rec{{offs("in", 0, 42, "in", 1, 7), txnUnknown}}, pend("in", 0, 42, "in", 1, 7), false, false},
		{"no record", []rec{{offs("in", 0, 40, "in", 1, 7), txnCommitted}}, pend("in", 0, 42, "in", 1, 7), false, false},
		{"other partitions", []rec{{offs("in", 0, 42), txnCommitted}}, pend("in", 0, 42, "in", 1, 7), false, false},
		{"redone after an abort", []rec{{offs("in", 0, 42), txnAborted}, {offs("in", 0, 42), txnCommitted}}, pend("in", 0, 42), true, true},
		{"the last end failed", []rec{{offs("in", 0, 42), txnCommitted}, {offs("in", 0, 42), txnUnknown}}, pend("in", 0, 42), false, false},
		{"superseded on every partition", []rec{{offs("in", 0, 42, "in", 1, 7), txnUnknown}, {offs("in", 0, 50), txnCommitted}, {offs("in", 1, 9), txnCommitted}}, pend("in", 0, 42, "in", 1, 7), false, true},
		{"superseded on one partition only", []rec{{offs("in", 0, 42, "in", 1, 7), txnUnknown}, {offs("in", 0, 50), txnCommitted}}, pend("in", 0, 42, "in", 1, 7), false, false},
		{"later aborted offsets do not supersede", []rec{{offs("in", 0, 42), txnUnknown}, {offs("in", 0, 50), txnAborted}}, pend("in", 0, 42), false, false},
		{"nothing recorded", nil, pend("in", 0, 42), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &txnOutcomes{}
			for _, r := range tc.records {
				o.record(r.offsets, r.outcome, nil)
			}
			commit, ok, why, _ := o.decide(tc.pending)
			if commit != tc.commit || ok != tc.ok {
				t.Errorf("decide = commit %v ok %v (%s), want commit %v ok %v", commit, ok, why, tc.commit, tc.ok)
			}
		})
	}
}

func TestTxnOutcomesBounded(t *testing.T) {
	o := &txnOutcomes{}
	o.record(offs("in", 0, 1), txnCommitted, nil)
	for n := range maxTxnOutcomes {
		o.record(offs("in", 1, n+1), txnCommitted, nil)
	}
	if len(o.list) != maxTxnOutcomes {
		t.Fatalf("%d outcomes kept, want %d", len(o.list), maxTxnOutcomes)
	}
	if _, ok, _, _ := o.decide(pend("in", 0, 1)); ok {
		t.Error("the oldest outcome is still decided on after maxTxnOutcomes more")
	}
}

// TestTxnEnded: a producer's open transaction on __consumer_offsets counts
// as ended only when its transactional id's coordinator has no transaction
// under way at that epoch or before.
func TestTxnEnded(t *testing.T) {
	p := kadm.DescribedProducer{ProducerID: 3, ProducerEpoch: 5}
	for _, tc := range []struct {
		state string
		pid   int64
		epoch int16
		want  bool
	}{
		{"CompleteCommit", 3, 19, true},
		{"CompleteAbort", 3, 5, true},
		{"Empty", 3, 6, true},
		{"Ongoing", 3, 6, true}, // a later transaction under way
		{"Ongoing", 3, 5, false},
		{"PrepareCommit", 3, 6, false},
		{"PrepareAbort", 3, 6, false},
		{"PrepareEpochFence", 3, 6, false},
		{"CompleteCommit", 3, 4, false}, // the coordinator is behind what the partition saw
		{"CompleteCommit", 4, 19, false},
	} {
		got := txnEnded(kadm.DescribedTransaction{State: tc.state, ProducerID: tc.pid, ProducerEpoch: tc.epoch}, p)
		if got != tc.want {
			t.Errorf("%s producer %d epoch %d: ended %v, want %v", tc.state, tc.pid, tc.epoch, got, tc.want)
		}
	}
}

// TestEndHangingOffsets makes a hanging transaction on a real broker: with
// its transaction verification off, the producer's TxnOffsetCommit (v3,
// without AddOffsetsToTxn) leaves the group's offsets pending on
// __consumer_offsets while the coordinator has no transaction under way,
// as Kafka 4.4 did after a broker's stop (docs/design-notes.md). The
// instance ends it with the marker its record of End says, and the group's
// stable offsets are then the committed transaction's, or the ones before
// an aborted one; a transaction whose outcome it does not know stays
// pending.
func TestEndHangingOffsets(t *testing.T) {
	boot := kafkatest.OwnBroker(t, "transaction.partition.verification.enable=false")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := kafkatest.Client(t, boot)
	adm := kadm.NewClient(admin)
	const topic = "hang-in"
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	const dataTopic = "hang-data"
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, dataTopic); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		outcome txnOutcome
		dataEnd string // how the transaction's data partition says it ended ("": no data)
		record  bool
		healed  bool
		want    map[int32]int64 // the group's stable offsets after
		found   string
	}{
		{name: "committed", outcome: txnCommitted, record: true, healed: true, want: map[int32]int64{0: 42, 1: 7}},
		{name: "aborted", outcome: txnAborted, record: true, healed: true, want: map[int32]int64{0: 10, 1: 3}},
		{name: "unknown", outcome: txnUnknown, record: true, found: "whether it committed is not known"},
		{name: "unknown, committed on its data partition", outcome: txnUnknown, dataEnd: "commit", record: true, healed: true, want: map[int32]int64{0: 42, 1: 7}},
		{name: "unknown, aborted on its data partition", outcome: txnUnknown, dataEnd: "abort", record: true, healed: true, want: map[int32]int64{0: 10, 1: 3}},
		{name: "not recorded", found: "no transaction of this process"},
		{name: "not recorded, committed at its coordinator", dataEnd: "commit", healed: true, want: map[int32]int64{0: 42, 1: 7}},
		{name: "not recorded, aborted at its coordinator", dataEnd: "abort", healed: true, want: map[int32]int64{0: 10, 1: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := "hang-" + strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
			var warned []string
			i := hangTestInstance(boot, app, admin, &warned)
			// The offsets the group had before (committed plainly).
			if _, err := adm.CommitOffsets(ctx, app, kadm.Offsets{topic: {
				0: {Topic: topic, Partition: 0, At: 10, LeaderEpoch: -1},
				1: {Topic: topic, Partition: 1, At: 3, LeaderEpoch: -1},
			}}); err != nil {
				t.Fatal(err)
			}
			mark := makeHangingOffsetCommit(ctx, t, boot, i.ident.transactionalID(app), app, topic, map[int32]int64{0: 42, 1: 7}, dataTopic, tc.dataEnd)
			if tc.record {
				i.cfg.outcomes.record(offs(topic, 0, 42, topic, 1, 7), tc.outcome, mark)
			}
			if _, err := stableOffsets(ctx, admin, app, topic); !errorIs(err, kerr.UnstableOffsetCommit) {
				t.Fatalf("before: stable offsets: %v, want UNSTABLE_OFFSET_COMMIT", err)
			}

			// The partitions were assigned a while ago, and their offsets
			// have not come (the client's offset fetch would be answered
			// UNSTABLE_OFFSET_COMMIT): the instance's loop looks.
			i.offsets.assigned([]taskID{{topic, 0}, {topic, 1}}, time.Now().Add(-hangingCheckAfter))
			if err := i.checkOffsetWait(ctx); err != nil {
				t.Fatalf("the instance's check: %v, want no error before offsetWaitLimit", err)
			}
			found := i.hangFound
			t.Logf("found: %s", found)
			got, err := stableOffsets(ctx, admin, app, topic)
			if !tc.healed {
				if !errorIs(err, kerr.UnstableOffsetCommit) {
					t.Errorf("after: stable offsets %v (%v), want still UNSTABLE_OFFSET_COMMIT", got, err)
				}
				if !strings.Contains(found, tc.found) || len(warned) > 0 {
					t.Errorf("found %q, warned %q; want it to say %q and no warning", found, warned, tc.found)
				}
				// At offsetWaitLimit the instance fails, saying what it found.
				i.offsets.assigned([]taskID{{topic, 0}, {topic, 1}}, time.Now().Add(-i.cfg.offsetWaitLimit()))
				err := i.checkOffsetWait(ctx)
				var stalled *stalledOffsetsError
				if !errors.As(err, &stalled) || !strings.Contains(err.Error(), tc.found) {
					t.Errorf("at offsetWaitLimit: %v; want a stalledOffsetsError saying %q", err, tc.found)
				}
				return
			}
			if err != nil {
				t.Fatalf("after: stable offsets: %v", err)
			}
			if got[0] != tc.want[0] || got[1] != tc.want[1] || len(got) != 2 {
				t.Errorf("after: stable offsets %v, want %v", got, tc.want)
			}
			if len(warned) != 1 || !strings.Contains(warned[0], "hanging transaction") {
				t.Errorf("warnings %q, want one naming the hanging transaction", warned)
			}
		})
	}
}

func errorIs(err error, target error) bool {
	return err != nil && strings.Contains(err.Error(), target.Error())
}

// makeHangingOffsetCommit commits offsets for group in a transaction of
// txnID that the broker's coordinator never hears of (the broker runs
// without transaction verification), then bumps the producer's epoch, so
// the coordinator has ended everything of it while the offsets stay
// pending.
//
// With dataEnd "commit" or "abort", the transaction also produces a record
// to dataTopic (a franz-go transactional client of txnID) and ends with
// that outcome: the coordinator writes the marker there, and mark says
// where the record landed.
func makeHangingOffsetCommit(ctx context.Context, t *testing.T, boot, txnID, group, topic string, offsets map[int32]int64, dataTopic, dataEnd string) (mark *producedMark) {
	t.Helper()
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.TxnOffsetCommit.Int16(), 3)
	cl := kafkatest.Client(t, boot, kgo.MaxVersions(v))
	var data *kgo.Client
	initPID := func() (int64, int16) { return kafkatest.InitProducerID(ctx, t, cl, txnID) }
	var pid int64
	var epoch int16
	if dataEnd == "" {
		pid, epoch = initPID()
	} else {
		data = kafkatest.Client(t, boot, kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(dataTopic), kgo.TransactionTimeout(10*time.Second))
		if err := data.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r, err := data.ProduceSync(ctx, &kgo.Record{Value: []byte("in the transaction")}).First()
		if err != nil {
			t.Fatal(err)
		}
		pid, epoch = r.ProducerID, r.ProducerEpoch
		mark = &producedMark{r.Topic, r.Partition, r.Offset, pid, epoch}
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = txnID, group, pid, epoch, -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	for p, o := range offsets {
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, o, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
		if err == nil {
			break
		}
		if !kerr.IsRetriable(err) && err != kerr.UnknownTopicID && err != kerr.UnknownTopicOrPartition {
			t.Fatalf("TxnOffsetCommit: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if data != nil {
		if err := data.EndTransaction(ctx, kgo.TransactionEndTry(dataEnd == "commit")); err != nil {
			t.Fatalf("ending the transaction (%s): %v", dataEnd, err)
		}
		// EndTxn answers once the outcome is decided; the markers follow.
		// A hang is what is left after they were all written.
		for adm := kadm.NewClient(cl); ; time.Sleep(50 * time.Millisecond) {
			described, err := adm.DescribeTransactions(ctx, txnID)
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := described.On(txnID, nil); d.State == "CompleteCommit" || d.State == "CompleteAbort" {
				break
			}
		}
	} else {
		initPID() // the coordinator's transaction of this producer, if any, ends
	}

	// A marker of another producer after it, so that the partition ends in
	// a control record, which a read of the pending offsets must pass.
	adm := kadm.NewClient(cl)
	described, err := adm.DescribeProducers(ctx, kadm.TopicsSet{offsetsTopic: nil})
	if err != nil {
		t.Fatal(err)
	}
	var hang *kadm.DescribedProducer
	described.EachProducer(func(d kadm.DescribedProducer) {
		if d.ProducerID == pid && d.CurrentTxnStartOffset >= 0 {
			hang = &d
		}
	})
	if hang == nil {
		t.Fatalf("no transaction of producer %d open on %s: %v", pid, offsetsTopic, described)
	}
	other := txnID + "-other"
	txnID = other
	opid, oepoch := initPID()
	if err := writeMarker(ctx, adm, kadm.DescribedProducer{ProducerID: opid, ProducerEpoch: oepoch, Topic: hang.Topic, Partition: hang.Partition}, false); err != nil {
		t.Fatalf("a marker of producer %d on %s/%d: %v", opid, hang.Topic, hang.Partition, err)
	}
	return mark
}

// stableOffsets fetches group's committed offsets of topic with
// require_stable, as a consumer of read_committed does.
func stableOffsets(ctx context.Context, cl *kgo.Client, group, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = group, true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0, 1}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	topics := resp.Topics
	if len(resp.Groups) > 0 { // OffsetFetch v8+
		if err := kerr.ErrorForCode(resp.Groups[0].ErrorCode); err != nil {
			return nil, err
		}
		topics = nil
		for _, gt := range resp.Groups[0].Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = gt.Topic
			for _, gp := range gt.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = gp.Partition, gp.Offset, gp.ErrorCode
				rt.Partitions = append(rt.Partitions, rp)
			}
			topics = append(topics, rt)
		}
	}
	got := map[int32]int64{}
	for _, rt := range topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, err
			}
			got[rp.Partition] = rp.Offset
		}
	}
	return got, nil
}

// TestProducedMarkJudge: after a transaction's record, the producer's first
// marker is that transaction's end, unless a later transaction of the same
// producer (a later epoch, under transaction version 2) shows that Kafka
// dropped it there too.
func TestProducedMarkJudge(t *testing.T) {
	m := &producedMark{topic: "t", partition: 0, offset: 10, pid: 3, epoch: 7}
	control := func(pid int64, epoch int16, typ uint16) *kgo.Record {
		return &kgo.Record{ProducerID: pid, ProducerEpoch: epoch, Attrs: kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Transactional: true, Control: true}), Key: []byte{0, 0, byte(typ >> 8), byte(typ)}}
	}
	data := func(pid int64, epoch int16) *kgo.Record {
		return &kgo.Record{ProducerID: pid, ProducerEpoch: epoch}
	}
	for _, tc := range []struct {
		name             string
		records          []*kgo.Record
		commit, ok, stop bool
	}{
		{"commit", []*kgo.Record{control(3, 8, 1)}, true, true, true},
		{"abort", []*kgo.Record{control(3, 8, 0)}, false, true, true},
		{"commit at the same epoch (version 1)", []*kgo.Record{control(3, 7, 1)}, true, true, true},
		{"more of the transaction, then its commit", []*kgo.Record{data(3, 7), data(3, 7), control(3, 8, 1)}, true, true, true},
		{"other producers first", []*kgo.Record{data(4, 0), control(4, 1, 0), control(3, 8, 1)}, true, true, true},
		{"a later transaction's records first", []*kgo.Record{data(3, 8), control(3, 9, 0)}, false, false, true},
		{"a later transaction's marker", []*kgo.Record{control(3, 9, 1)}, false, false, true},
		{"no marker yet", []*kgo.Record{data(3, 7), data(4, 1)}, false, false, false},
	} {
		var commit, ok, stop bool
		for _, r := range tc.records {
			if commit, ok, stop = m.judge(r); stop {
				break
			}
		}
		if commit != tc.commit || ok != tc.ok || stop != tc.stop {
			t.Errorf("%s: commit %v ok %v stop %v, want %v %v %v", tc.name, commit, ok, stop, tc.commit, tc.ok, tc.stop)
		}
	}
}

// TestTxnOutcomesByEpoch: a producer epoch names one transaction only
// under transaction version 2, where every transaction has its own; when
// two recorded transactions of the producer share an epoch (version 1)
// none is named.
func TestTxnOutcomesByEpoch(t *testing.T) {
	mark := func(pid int64, epoch int16) *producedMark {
		return &producedMark{topic: "c", partition: 0, offset: 1, pid: pid, epoch: epoch}
	}
	o := &txnOutcomes{}
	o.record(nil, txnCommitted, mark(3, 5))
	o.record(offs("in", 0, 9), txnAborted, mark(3, 6))
	o.record(nil, txnUnknown, mark(3, 7))
	o.record(nil, txnCommitted, nil) // produced nothing: not recorded
	o.record(nil, txnCommitted, mark(4, 6))
	for _, tc := range []struct {
		pid     int64
		epoch   int16
		ok      bool
		outcome txnOutcome
	}{
		{3, 5, true, txnCommitted},
		{3, 6, true, txnAborted},
		{3, 7, true, txnUnknown},
		{3, 8, false, 0},
		{4, 6, true, txnCommitted},
	} {
		e, ok := o.byEpoch(tc.pid, tc.epoch)
		if ok != tc.ok || ok && e.outcome != tc.outcome {
			t.Errorf("producer %d epoch %d: %v %v, want %v %v", tc.pid, tc.epoch, e.outcome, ok, tc.outcome, tc.ok)
		}
	}
	o.record(nil, txnCommitted, mark(3, 6)) // a second transaction at epoch 6
	if _, ok := o.byEpoch(3, 5); ok {
		t.Error("producer 3's epochs name transactions after two shared one")
	}
	if _, ok := o.byEpoch(4, 6); !ok {
		t.Error("producer 4's epoch no longer names its transaction")
	}
}
