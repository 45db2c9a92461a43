package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// The group options the client gets: cooperative-sticky always (explicit);
// classic sends session_timeout_ms and heartbeats every third of it, at
// most every 3 s; consumer opts into KIP-848 and leaves the session to the
// broker.
func TestGroupOpts(t *testing.T) {
	for _, tc := range []struct {
		cfg        Config
		serverSide bool
		session    time.Duration
		heartbeat  time.Duration
	}{
		{Config{}, false, 45 * time.Second, 3 * time.Second},
		{Config{GroupProtocol: GroupProtocolClassic, SessionTimeout: 6 * time.Second}, false, 6 * time.Second, 2 * time.Second},
		{Config{GroupProtocol: GroupProtocolConsumer, SessionTimeout: 6 * time.Second}, true, 45 * time.Second, 3 * time.Second}, // franz-go's defaults: unused
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}, tc.cfg.groupOpts(func() map[string][]int32 { return nil })...)...)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("protocol %q session %v", tc.cfg.GroupProtocol, tc.cfg.SessionTimeout)
		if got := cl.OptValue(kgo.ServerSideBalancer); got != tc.serverSide {
			t.Errorf("%s: ServerSideBalancer %v, want %v", name, got, tc.serverSide)
		}
		if got := cl.OptValue(kgo.SessionTimeout); got != tc.session {
			t.Errorf("%s: SessionTimeout %v, want %v", name, got, tc.session)
		}
		if got := cl.OptValue(kgo.HeartbeatInterval); got != tc.heartbeat {
			t.Errorf("%s: HeartbeatInterval %v, want %v", name, got, tc.heartbeat)
		}
		var names []string
		b, _ := cl.OptValue(kgo.Balancers).([]kgo.GroupBalancer)
		for _, b := range b {
			if !b.IsCooperative() {
				t.Errorf("%s: balancer %s is not cooperative", name, b.ProtocolName())
			}
			names = append(names, b.ProtocolName())
		}
		want := []string{stateBalancerProtocol, "cooperative-sticky"}
		if tc.serverSide {
			want = want[1:] // the broker assigns
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: balancers %v, want %v", name, names, want)
		}
		cl.Close()
	}
}

// What the group management loop injects into a poll: a lost membership,
// a moving coordinator or a broken connection is recovered by joining
// again (nil); a session timeout the broker refuses fails, naming the
// option; another process with this instance's group.instance.id fails,
// naming it.
func TestGroupSessionError(t *testing.T) {
	i := &instance{cfg: Config{ApplicationID: "app", SessionTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ident: identity{id: "0123456789abcdef", stable: true}}
	for _, tc := range []struct {
		err  error
		want string // "": recovered
	}{
		{kerr.UnknownMemberID, ""},
		{kerr.IllegalGeneration, ""},
		{kerr.FencedMemberEpoch, ""},
		{kerr.UnreleasedInstanceID, ""},
		{kerr.CoordinatorNotAvailable, ""},
		{kerr.NotCoordinator, ""},
		{io.EOF, ""},
		{kerr.InvalidSessionTimeout, "option session_timeout_ms: 2000: the broker refuses it"},
		{kerr.FencedInstanceID, "another process joined with this instance's group.instance.id app-0123456789abcdef"},
		{kerr.GroupAuthorizationFailed, "consumer group app: GROUP_AUTHORIZATION_FAILED"},
	} {
		err := i.groupSessionError(&kgo.ErrGroupSession{Err: tc.err})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v, want it recovered", tc.err, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.err)):
			t.Errorf("%v: %v, want an error wrapping it with %q", tc.err, err, tc.want)
		}
	}
}

// Under the consumer protocol a session_timeout_ms other than the default
// becomes the group's consumer.session.timeout.ms; one outside the broker's
// group.consumer.min/max.session.timeout.ms fails, naming the option (kfake
// does not check the range); the default and classic leave the group's
// configs alone.
func TestSetGroupSessionTimeout(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	admin := kafkatest.Client(t, bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	groupConfig := func(group string) string {
		v, err := describeGroupConfig(ctx, admin, group, groupConsumerSessionTimeout)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		protocol string
		session  time.Duration
		want     string // the group's config afterwards
	}{
		{GroupProtocolConsumer, 50 * time.Second, "50000"},
		{GroupProtocolConsumer, DefaultSessionTimeout, ""},
		{GroupProtocolClassic, 50 * time.Second, ""},
	} {
		group := kafkatest.UniqueName(t, "g")
		if err := setGroupSessionTimeout(ctx, admin, Config{ApplicationID: group, GroupProtocol: tc.protocol, SessionTimeout: tc.session}); err != nil {
			t.Fatalf("%s %v: %v", tc.protocol, tc.session, err)
		}
		if got := groupConfig(group); got != tc.want {
			t.Errorf("%s %v: the group's %s is %q, want %q", tc.protocol, tc.session, groupConsumerSessionTimeout, got, tc.want)
		}
	}
	if kafkatest.IsReal() {
		err := setGroupSessionTimeout(ctx, admin, Config{ApplicationID: kafkatest.UniqueName(t, "g"), GroupProtocol: GroupProtocolConsumer, SessionTimeout: 6 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "option session_timeout_ms: 6000: under group_protocol=consumer") {
			t.Errorf("6 s under the consumer protocol: %v, want the broker's refusal naming the option", err)
		}
	}
}

// TestEndWithoutOffsetsUnknownOutcome: a commit of a transaction without
// offsets whose EndTxn gets no answer (the connection drops) is reported
// as an error, not as an abort: the commit may have happened, and the
// caller must not redo the cycle in place. The client stays usable (the
// abort retry fenced the transaction, which here had not committed), and
// a commit refused before it was attempted is an abort.
func TestEndWithoutOffsetsUnknownOutcome(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var drop atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if drop.Load() {
			return nil, errors.New("dropped by the test"), true // closes the connection
		}
		return nil, nil, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()[0]), kgo.TransactionalID("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(v string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	// No answer until the end's context ends, as in an outage (the
	// caller's context is bounded by transaction_timeout_ms).
	drop.Store(true)
	produce("lost answer")
	ectx, ecancel := context.WithTimeout(ctx, 2*time.Second)
	committed, err := endWithoutOffsets(ectx, cl)
	ecancel()
	drop.Store(false)
	t.Logf("the end without an answer: %v", err)
	var unknown *unknownCommitError
	if committed || !errors.As(err, &unknown) || !strings.Contains(err.Error(), "may or may not have happened") {
		t.Fatalf("a commit without an answer: committed %v, error %v; want an error saying its outcome is unknown", committed, err)
	}

	produce("committed")
	if committed, err := endWithoutOffsets(ctx, cl); err != nil || !committed {
		t.Fatalf("the next commit: committed %v, error %v", committed, err)
	}

	checkOnlyCommitted(ctx, t, c.ListenAddrs()[0])
}

// TestEndTransactionUnconfirmedCommit: the broker answers a session's
// commit UNKNOWN_SERVER_ERROR; franz-go's End then aborts anew and reports
// an abort, no error, although the commit may have happened. The cycle
// must not be redone in place as an aborted one: endTransaction returns an
// unknownCommitError (Run starts the instance again) and records the
// transaction's outcome as unknown, so that no marker is ever written for
// its offsets (hangingtxn.go). The commit after it is a commit.
func TestEndTransactionUnconfirmedCommit(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var inject atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		end := req.(*kmsg.EndTxnRequest)
		if !inject.Load() || !end.Commit {
			return nil, nil, false
		}
		resp := end.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	boot := c.ListenAddrs()[0]
	prod, err := kgo.NewClient(kgo.SeedBrokers(boot), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for n := range 4 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(n)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	logger := slog.New(slog.NewTextHandler(io.Discard, nil)) // info: franz-go's info lines are not logged
	i := &instance{cfg: Config{ApplicationID: "g", TransactionTimeout: 10 * time.Second, Logger: logger, outcomes: &txnOutcomes{}}}
	i.cfg.reach = newReach(Config{BootstrapServers: boot, Logger: logger})
	i.rebalance.init()
	i.sess, err = kgo.NewGroupTransactSession(kgo.SeedBrokers(boot), kgo.TransactionalID("t"), kgo.ConsumerGroup("g"),
		kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DefaultProduceTopic("out"),
		kgo.WithLogger(kgoLogger{logger, i.cfg.reach, &i.unconfirmedCommit}))
	if err != nil {
		t.Fatal(err)
	}
	defer i.sess.Close()
	i.cl = i.sess.Client()
	cycle := func(want int) {
		t.Helper()
		got := 0
		for got < want {
			fs := i.cl.PollRecords(ctx, want-got)
			if ctx.Err() != nil {
				t.Fatalf("polling: %v", ctx.Err())
			}
			got += fs.NumRecords()
		}
		if err := i.sess.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := i.cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cycle(2)
	inject.Store(true)
	committed, err := i.endTransaction(ctx, kgo.TryCommit)
	inject.Store(false)
	var unknown *unknownCommitError
	if committed || !errors.As(err, &unknown) {
		t.Fatalf("a commit answered UNKNOWN_SERVER_ERROR: committed %v, error %v; want an unknownCommitError", committed, err)
	}
	t.Logf("the unconfirmed commit: %v", err)
	if _, ok, why, _ := i.cfg.outcomes.decide(pend("in", 0, 2)); ok {
		t.Errorf("the unconfirmed transaction's offsets are decided on (%s); want its outcome unknown", why)
	}

	cycle(2) // the abort rewound the offsets: the same records and the next two
	committed, err = i.endTransaction(ctx, kgo.TryCommit)
	if !committed || err != nil {
		t.Fatalf("the next commit: committed %v, error %v", committed, err)
	}
	if commit, ok, why, _ := i.cfg.outcomes.decide(pend("in", 0, 2)); !ok || !commit {
		t.Errorf("the committed transaction's offsets: commit %v ok %v (%s); want commit", commit, ok, why)
	}
}

// TestEndWithoutOffsetsInterrupted: the group changes the member's
// assignment (onBlocked, under the consumer protocol) while a cycle that
// consumed nothing flushes its records. The end is interrupted before any
// commit was sent, so the cycle aborts, as an End with offsets does: no
// error that would fail the job (TestTwoInstances/consumer/cancel-first
// failed on one), and nothing of it is committed.
func TestEndWithoutOffsetsInterrupted(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hold atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if hold.Load() {
			return nil, errors.New("held by the test"), true // closes the connection: the produce is retried
		}
		return nil, nil, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	boot := c.ListenAddrs()[0]
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	i := &instance{cfg: Config{ApplicationID: "g", TransactionTimeout: 10 * time.Second, Logger: logger, outcomes: &txnOutcomes{}, GroupProtocol: GroupProtocolConsumer}}
	i.cfg.reach = newReach(Config{BootstrapServers: boot, Logger: logger})
	i.rebalance.init()
	i.sess, err = kgo.NewGroupTransactSession(kgo.SeedBrokers(boot), kgo.TransactionalID("t"), kgo.ConsumerGroup("g"),
		kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	defer i.sess.Close()
	i.cl = i.sess.Client()

	if err := i.sess.Begin(); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	i.cl.Produce(ctx, &kgo.Record{Value: []byte("interrupted")}, nil)
	go func() {
		time.Sleep(300 * time.Millisecond) // the end is flushing
		i.onBlocked(ctx, i.cl)
		hold.Store(false)
	}()
	committed, err := i.endTransaction(ctx, kgo.TryCommit)
	if committed || err != nil {
		t.Fatalf("an end without offsets interrupted in its flush: committed %v, error %v; want an abort without error", committed, err)
	}

	i.rebalance.blocked.Store(false)
	if err := i.sess.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := i.cl.ProduceSync(ctx, &kgo.Record{Value: []byte("committed")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if committed, err := i.endTransaction(ctx, kgo.TryCommit); !committed || err != nil {
		t.Fatalf("the next end: committed %v, error %v", committed, err)
	}
	checkOnlyCommitted(ctx, t, boot)
}

// checkOnlyCommitted reads topic "out" read_committed and checks that it
// holds the one record "committed": the second transaction's, not the
// first's.
func checkOnlyCommitted(ctx context.Context, t *testing.T, boot string) {
	t.Helper()
	rd, err := kgo.NewClient(kgo.SeedBrokers(boot), kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []string
	for len(got) < 1 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the output: %v (have %q)", ctx.Err(), got)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) != 1 || got[0] != "committed" {
		t.Errorf("read_committed output %q, want only the second transaction's record", got)
	}
}
