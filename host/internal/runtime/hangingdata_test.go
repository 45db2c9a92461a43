package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestReconcileWritten makes a transaction of the instance's producer
// hang on a data partition, as a marker Kafka dropped leaves one: on a
// broker without transaction verification, a transactional produce that
// never told the coordinator of its partition, at an epoch the
// coordinator has since ended. Then the instance's look before End:
//   - ends one its transaction has not reached with its own marker;
//   - lets one its transaction extends end with it when the outcomes
//     agree, and keeps its records in case End aborts after all;
//   - aborts its own transaction when the hanging one aborted;
//   - carries a committed one's records into the next transaction when
//     its own must abort;
//   - fails, naming the partition, when the hanging one's outcome is not
//     known.
//
// Each case checks the partition's read_committed content after.
func TestReconcileWritten(t *testing.T) {
	boot := kafkatest.OwnBroker(t, "transaction.partition.verification.enable=false")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := kafkatest.Client(t, boot)
	adm := kadm.NewClient(admin)
	older := []string{"older-1", "older-2"}
	for _, tc := range []struct {
		name    string
		outcome txnOutcome // the hanging transaction's, as this process recorded it
		// unrecorded: this process has no record of it (another process
		// ran it); coordinated: it ended so at its coordinator (its marker
		// landed elsewhere only), "": the coordinator never knew it.
		unrecorded  bool
		coordinated string
		extend      bool // the instance's transaction writes the partition too
		commit      bool // the end the cycle asks for
		abort       bool // the look makes it abort
		ifAborted   int  // records kept should End abort after all
		carried     int  // records to produce again
		err         string
		want        []string // read_committed, after End (and a transaction with the carried records)
	}{
		{name: "not extended, committed", outcome: txnCommitted, commit: true, want: older},
		{name: "not extended, aborted", outcome: txnAborted, commit: true, want: nil},
		{name: "both commit", outcome: txnCommitted, extend: true, commit: true, ifAborted: 2, want: append(slices.Clone(older), "current")},
		{name: "both abort", outcome: txnAborted, extend: true, commit: false, want: nil},
		{name: "hanging aborted, current commits", outcome: txnAborted, extend: true, commit: true, abort: true, want: nil},
		{name: "hanging committed, current aborts", outcome: txnCommitted, extend: true, commit: false, carried: 2, want: older},
		{name: "unknown", outcome: txnUnknown, extend: true, commit: true, err: "nor Kafka knows"},
		{name: "not recorded, the coordinator committed it", unrecorded: true, coordinated: "commit", extend: true, commit: true, ifAborted: 2, want: append(slices.Clone(older), "current")},
		{name: "not recorded, the coordinator aborted it", unrecorded: true, coordinated: "abort", extend: true, commit: true, abort: true, want: nil},
		{name: "not recorded, not extended, the coordinator committed it", unrecorded: true, coordinated: "commit", commit: true, want: older},
		{name: "not recorded, unknown to the coordinator", unrecorded: true, extend: true, commit: true, err: "not in its coordinator's log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := "rw-" + strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
			topic := app + "-data"
			if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			var warned []string
			i := hangTestInstance(boot, app, admin, &warned)
			txnID := i.ident.transactionalID(app)
			mark := makeHangingData(ctx, t, boot, txnID, topic, older, tc.coordinated)
			if !tc.unrecorded {
				i.cfg.outcomes.record(nil, tc.outcome, mark)
			}
			i.cfg.written.wrote(topic)

			i.cl = kafkatest.Client(t, boot, kgo.TransactionalID(txnID), kgo.TransactionTimeout(10*time.Second),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
			if err := i.cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if tc.extend {
				if err := i.cl.ProduceSync(ctx, &kgo.Record{Value: []byte("current")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			abort, ifAborted, err := i.reconcileWritten(ctx, tc.commit)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), topic+"/0") {
					t.Fatalf("reconcileWritten: %v; want an error naming %s/0 and saying %q", err, topic, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("reconcileWritten: %v", err)
			}
			carried := i.cfg.written.carried()
			if abort != tc.abort || len(ifAborted) != tc.ifAborted || len(carried) != tc.carried {
				t.Fatalf("reconcileWritten: abort %v, %d records kept should End abort, %d carried; want %v, %d, %d (warnings %q)",
					abort, len(ifAborted), len(carried), tc.abort, tc.ifAborted, tc.carried, warned)
			}
			if err := i.cl.EndTransaction(ctx, kgo.TransactionEndTry(tc.commit && !abort)); err != nil {
				t.Fatal(err)
			}
			if len(carried) > 0 {
				if err := i.cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for _, c := range carried {
					if err := i.cl.ProduceSync(ctx, c.record()).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
				if err := i.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
			}
			if got := readCommitted(ctx, t, adm, boot, topic); !slices.Equal(got, tc.want) {
				t.Errorf("read_committed %s: %q, want %q (warnings %q)", topic, got, tc.want, warned)
			}
		})
	}
}

// makeHangingData hangs values on topic/0 (kafkatest.HangTransaction).
func makeHangingData(ctx context.Context, t *testing.T, boot, txnID, topic string, values []string, end string) *producedMark {
	t.Helper()
	var kvs [][2][]byte
	for _, v := range values {
		kvs = append(kvs, [2][]byte{nil, []byte(v)})
	}
	h := kafkatest.HangTransaction(ctx, t, boot, txnID, topic, 0, kvs, end)
	return &producedMark{topic: topic, partition: 0, offset: h.Offset, pid: h.PID, epoch: h.Epoch}
}

// readCommitted waits until topic/0 has no open transaction (its last
// stable offset is its end) and returns its values, read_committed.
func readCommitted(ctx context.Context, t *testing.T, adm *kadm.Client, boot, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var end int64
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := ends.Lookup(topic, 0)
		s, _ := stable.Lookup(topic, 0)
		if e.Err == nil && s.Err == nil && e.Offset == s.Offset {
			end = e.Offset
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s/0 still has an open transaction: end %d, last stable %d", topic, e.Offset, s.Offset)
		case <-time.After(50 * time.Millisecond):
		}
	}
	rd := kafkatest.Client(t, boot, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	var got []string
	for next := int64(0); next < end; {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s/0 to %d: %v (have %q)", topic, end, ctx.Err(), got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				got = append(got, string(r.Value))
			}
		})
	}
	return got
}

// TestLookFailure: the cluster's refusals of the look's requests and its
// passing troubles, however wrapped and joined, are told apart from the
// failures that must stop the job.
func TestLookFailure(t *testing.T) {
	wrap := func(err error) error {
		return fmt.Errorf("looking: %w", errors.Join(errors.New("describing the producers of out/1: no answer"), fmt.Errorf("out/0: %w", err)))
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{wrap(kerr.TopicAuthorizationFailed), lookRefused},
		{wrap(kerr.TransactionalIDAuthorizationFailed), lookRefused},
		{wrap(kerr.ClusterAuthorizationFailed), lookRefused},
		{wrap(kerr.NotLeaderForPartition), lookAgain},
		{wrap(kerr.CoordinatorLoadInProgress), lookAgain},
		{fmt.Errorf("reading out/0: %w", context.DeadlineExceeded), lookAgain},
		{errors.New("on out/0, ...: neither this process nor Kafka knows whether the transaction of epoch 3 committed"), lookFails},
		{wrap(kerr.InvalidProducerEpoch), lookFails},
		{context.Canceled, lookFails},
	} {
		if got := lookFailure(tc.err); got != tc.want {
			t.Errorf("lookFailure(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestWrittenCarry: carried records stay until a transaction that
// produced them commits, and those added meanwhile stay after it.
func TestWrittenCarry(t *testing.T) {
	w := &written{}
	rec := func(v string) carriedRecord { return carriedRecord{topic: "out", value: []byte(v)} }
	values := func() (l []string) {
		for _, c := range w.carried() {
			l = append(l, string(c.value))
		}
		return l
	}
	w.addCarry(nil)
	w.committed(0)
	if got := values(); got != nil {
		t.Fatalf("carried %q, want none", got)
	}
	w.addCarry([]carriedRecord{rec("a"), rec("b")})
	n := len(w.carried()) // a transaction produces them
	w.addCarry([]carriedRecord{rec("c")})
	w.committed(0) // a transaction without them committed
	if got := values(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("carried %q after a commit that had none of them, want a b c", got)
	}
	w.committed(n)
	if got := values(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("carried %q after the commit of the first two, want c", got)
	}
	r := rec("c").record()
	if r.Topic != "out" || string(r.Value) != "c" {
		t.Errorf("record %+v", r)
	}
	var nilW *written
	nilW.wrote("x")
	if nilW.list() != nil || nilW.carried() != nil {
		t.Error("a nil written lists or carries something")
	}
}

// TestTransactionStatePartition: the partition of __transaction_state is
// Java's String.hashCode, made non-negative as Kafka's Utils.abs does
// (MinInt32 to 0), modulo the partition count.
func TestTransactionStatePartition(t *testing.T) {
	for _, tc := range []struct {
		id   string
		hash int32
		part int32 // of 50
	}{
		{"", 0, 0},
		{"hello", 99162322, 22},
		{"Aa", 2112, 12},
		{"polygenelubricants", -1 << 31, 0}, // Java's hashCode is MinInt32
		{"ksrunner-ü", javaStringHash("ksrunner-")*31 + 0xfc, -1},
		{"𝄞", 0xd834*31 + 0xdd1e, -1}, // a surrogate pair: two UTF-16 units
	} {
		if got := javaStringHash(tc.id); got != tc.hash {
			t.Errorf("javaStringHash(%q) = %d, want %d", tc.id, got, tc.hash)
		}
		if tc.part >= 0 {
			if got := transactionStatePartition(tc.id, 50); got != tc.part {
				t.Errorf("transactionStatePartition(%q, 50) = %d, want %d", tc.id, got, tc.part)
			}
		}
	}
	if got := transactionStatePartition("ab", 50); got != (97*31+98)%50 {
		t.Errorf("transactionStatePartition(ab) = %d", got)
	}
}

// TestTxnLogDecision: the first end the coordinator logged after the
// transaction's Ongoing at its epoch decides, under transaction version 2
// only.
func TestTxnLogDecision(t *testing.T) {
	const (
		empty    = kmsg.TransactionStateEmpty
		ongoing  = kmsg.TransactionStateOngoing
		pcommit  = kmsg.TransactionStatePrepareCommit
		ccommit  = kmsg.TransactionStateCompleteCommit
		pabort   = kmsg.TransactionStatePrepareAbort
		cabort   = kmsg.TransactionStateCompleteAbort
		fence    = kmsg.TransactionStatePrepareEpochFence
		pid      = int64(7)
		otherPID = int64(8)
	)
	type st struct {
		pid   int64
		epoch int16
		state kmsg.TransactionState
		tv    int16
	}
	for _, tc := range []struct {
		name       string
		log        []st
		commit, ok bool
	}{
		{"committed", []st{{pid, 4, empty, 0}, {pid, 4, ongoing, 2}, {pid, 5, pcommit, 2}, {pid, 5, ccommit, 2}}, true, true},
		{"aborted", []st{{pid, 4, ongoing, 2}, {pid, 5, pabort, 2}, {pid, 5, cabort, 2}}, false, true},
		{"fenced", []st{{pid, 4, ongoing, 2}, {pid, 5, fence, 2}}, false, true},
		{"complete only", []st{{pid, 4, ongoing, 2}, {pid, 5, ccommit, 2}}, true, true},
		{"the next transaction's end does not count", []st{{pid, 3, ongoing, 2}, {pid, 4, pabort, 2}, {pid, 4, ongoing, 2}, {pid, 5, pcommit, 2}}, true, true},
		{"an earlier transaction's end does not count", []st{{pid, 3, ongoing, 2}, {pid, 4, pcommit, 2}, {pid, 4, ccommit, 2}, {pid, 4, ongoing, 2}}, false, false},
		{"another producer", []st{{otherPID, 4, ongoing, 2}, {otherPID, 5, pcommit, 2}}, false, false},
		{"another producer's end", []st{{pid, 4, ongoing, 2}, {otherPID, 5, pabort, 2}, {pid, 5, pcommit, 2}}, true, true},
		{"version 1", []st{{pid, 4, ongoing, 0}, {pid, 4, pcommit, 0}}, false, false},
		{"version 1, epochs shared", []st{{pid, 4, ongoing, 2}, {pid, 4, ongoing, 2}, {pid, 4, pcommit, 2}}, false, false},
		{"no end yet", []st{{pid, 4, ongoing, 2}}, false, false},
		{"compacted away", []st{{pid, 9, ccommit, 2}}, false, false},
	} {
		d := txnLogDecision{pid: pid, epoch: 4}
		for _, s := range tc.log {
			if d.add(&kmsg.TxnMetadataValue{ProducerID: s.pid, ProducerEpoch: s.epoch, State: s.state, ClientTransactionVersion: s.tv}) {
				break
			}
		}
		if d.commit != tc.commit || d.ok != tc.ok {
			t.Errorf("%s: commit %v ok %v, want %v %v", tc.name, d.commit, d.ok, tc.commit, tc.ok)
		}
	}
}

// TestReconcileBeforeFenceFirstStart: an instance whose transactional id
// the coordinator has never seen (a state_dir's first start) has nothing
// to fence and nothing to look at: the look before the fence is no error.
func TestReconcileBeforeFenceFirstStart(t *testing.T) {
	boot := kafkatest.Broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app := kafkatest.UniqueName(t, "first")
	topic := app + "-out"
	kafkatest.CreateTopic(t, boot, topic, 2)
	i := hangTestInstance(boot, app, kafkatest.Client(t, boot), nil)
	i.ident = identity{id: "00aa11bb22cc33dd", stable: true, created: true}
	i.cfg.written.wrote(topic)
	if err := i.reconcileBeforeFence(ctx); err != nil {
		t.Fatalf("reconcileBeforeFence on a first start: %v", err)
	}
}

// hangTestInstance is an instance of application app, enough for the looks
// for hanging transactions (an admin client, the records Run keeps, no
// tasks); warned, if not nil, gets the job's warnings.
func hangTestInstance(boot, app string, admin *kgo.Client, warned *[]string) *instance {
	i := &instance{
		cfg: Config{
			ApplicationID:      app,
			BootstrapServers:   boot,
			ExactlyOnce:        true,
			TransactionTimeout: 10 * time.Second,
			Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
			outcomes:           &txnOutcomes{},
			written:            &written{},
		},
		ident: identity{id: "0123456789abcdef"},
		admin: admin,
	}
	if warned != nil {
		i.cfg.Warning = func(msg string) { *warned = append(*warned, msg) }
	}
	i.cfg.reach = newReach(i.cfg)
	return i
}
