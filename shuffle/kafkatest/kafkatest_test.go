package kafkatest_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func TestUniqueName(t *testing.T) {
	legal := regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	a := kafkatest.UniqueName(t, "in")
	b := kafkatest.UniqueName(t, "in")
	if a == b {
		t.Fatalf("two calls gave the same name %q", a)
	}
	if !strings.HasPrefix(a, "in-TestUniqueName-") || !legal.MatchString(a) {
		t.Fatalf("bad name %q", a)
	}
	t.Run("sub test/with odd:chars", func(t *testing.T) {
		n := kafkatest.UniqueName(t, "")
		if !legal.MatchString(n) || len(n) > 100 {
			t.Fatalf("bad name %q", n)
		}
	})
	t.Run(strings.Repeat("x", 300), func(t *testing.T) {
		if n := kafkatest.UniqueName(t, "p"); len(n) > 100 {
			t.Fatalf("name too long (%d): %q", len(n), n)
		}
	})
}

func TestBroker(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	t.Logf("bootstrap %s (real broker: %v)", bootstrap, kafkatest.IsReal())
	topic := kafkatest.UniqueName(t, "t")
	kafkatest.CreateTopic(t, bootstrap, topic, 3)
	cl := kafkatest.Client(t, bootstrap, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("hello")).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func produceN(t *testing.T, cl *kgo.Client, topic, prefix string, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		v := fmt.Sprintf("%s-%04d", prefix, i)
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// TestExactlyOnce copies topic A to topic B with a GroupTransactSession (consume, produce,
// commit offsets and output in one transaction). Its first transaction is aborted after its
// records reached the broker, so the aborted copies are in B's log; a separate transactional
// producer also writes and aborts records in B. A read_committed consumer of B must see
// every record of A exactly once and none of the aborted ones; a read_uncommitted consumer
// shows the aborted records really were written.
func TestExactlyOnce(t *testing.T) {
	const n = 300
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "in"), kafkatest.UniqueName(t, "out")
	kafkatest.CreateTopic(t, bootstrap, in, 3)
	kafkatest.CreateTopic(t, bootstrap, out, 3)
	produceN(t, kafkatest.Client(t, bootstrap), in, "r", 0, n)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A transaction that is aborted after its records reached the broker.
	txp := kafkatest.Client(t, bootstrap, kgo.TransactionalID(kafkatest.UniqueName(t, "txp")))
	if err := txp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		v := fmt.Sprintf("aborted-%04d", i)
		txp.Produce(ctx, &kgo.Record{Topic: out, Key: []byte(v), Value: []byte(v)}, nil)
	}
	if err := txp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := txp.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.TransactionalID(kafkatest.UniqueName(t, "txn")),
		kgo.ConsumerGroup(kafkatest.UniqueName(t, "group")),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	copied, aborted := 0, 0
	for copied < n {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("copied %d of %d before the deadline", copied, n)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("poll: %v", errs)
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, nil)
		})
		try := kgo.TryCommit
		if aborted == 0 {
			// flush first: End(TryAbort) drops records still buffered in the client
			if err := sess.Client().Flush(ctx); err != nil {
				t.Fatal(err)
			}
			try = kgo.TryAbort
		}
		committed, err := sess.End(ctx, try)
		if err != nil {
			t.Fatalf("end: %v", err)
		}
		switch {
		case try == kgo.TryAbort:
			aborted += fs.NumRecords()
		case committed:
			copied += fs.NumRecords()
		}
	}
	t.Logf("copied %d records, aborted a transaction of %d first", copied, aborted)
	if copied != n {
		t.Fatalf("copied %d records, want %d (duplicates consumed from %s)", copied, n, in)
	}

	// read_uncommitted sees the aborted records
	seenUncommitted := consumeAll(t, bootstrap, out, kgo.ReadUncommitted(), func(m map[string]int) bool {
		return len(m) >= n+30
	})
	abortedSeen := 0
	for v := range seenUncommitted {
		if strings.HasPrefix(v, "aborted-") {
			abortedSeen++
		}
	}
	if abortedSeen != 30 {
		t.Errorf("read_uncommitted saw %d records of the aborted producer transaction, want 30", abortedSeen)
	}
	if total := sum(seenUncommitted); total < n+30+aborted {
		t.Errorf("read_uncommitted saw %d records, want at least %d", total, n+30+aborted)
	}

	// read_committed sees each record of the input exactly once, and nothing aborted
	seen := consumeAll(t, bootstrap, out, kgo.ReadCommitted(), func(m map[string]int) bool { return len(m) >= n })
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("r-%04d", i)
		if seen[v] != 1 {
			t.Errorf("read_committed saw %s %d times, want once", v, seen[v])
		}
	}
	for v := range seen {
		if !strings.HasPrefix(v, "r-") {
			t.Errorf("read_committed saw %s, which was aborted", v)
		}
	}
}

func sum(m map[string]int) int {
	s := 0
	for _, c := range m {
		s += c
	}
	return s
}

// consumeAll reads topic from the start until done(counts) holds, then one more second
// to catch late duplicates, and returns how often each value was seen.
func consumeAll(t *testing.T, bootstrap, topic string, iso kgo.IsolationLevel, done func(map[string]int) bool) map[string]int {
	t.Helper()
	cl := kafkatest.Client(t, bootstrap,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso),
	)
	defer cl.Close()
	seen := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	var quietUntil time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		if quietUntil.IsZero() && done(seen) {
			quietUntil = time.Now().Add(time.Second)
		}
		if !quietUntil.IsZero() && time.Now().After(quietUntil) {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("consuming %s: only %d distinct records before the deadline", topic, len(seen))
		}
	}
}

// member is one consumer-group member that records what it consumes and which
// partitions it owns, committing after every poll (at-least-once).
type member struct {
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	owned map[int32]bool
	got   map[string]int
	errs  []error
}

func startMember(t *testing.T, name, bootstrap, group, topic string, protocol848 bool) *member {
	t.Helper()
	m := &member{name: name, owned: map[int32]bool{}, got: map[string]int{}, done: make(chan struct{})}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(10 * time.Second),
		kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range a[topic] {
				m.owned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				m.mu.Lock()
				m.errs = append(m.errs, err)
				m.mu.Unlock()
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range r[topic] {
				delete(m.owned, p)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range l[topic] {
				delete(m.owned, p)
			}
		}),
	}
	if protocol848 {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(topic string, p int32, err error) {
				if ctx.Err() == nil {
					m.mu.Lock()
					m.errs = append(m.errs, fmt.Errorf("%s[%d]: %w", topic, p, err))
					m.mu.Unlock()
				}
			})
			m.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { m.got[string(r.Value)]++ })
			m.mu.Unlock()
			if ctx.Err() == nil && fs.NumRecords() > 0 {
				if err := cl.CommitRecords(ctx, fs.Records()...); err != nil && ctx.Err() == nil {
					m.mu.Lock()
					m.errs = append(m.errs, fmt.Errorf("commit: %w", err))
					m.mu.Unlock()
				}
			}
			cl.AllowRebalance()
		}
	}()
	return m
}

// stop stops polling and leaves the group.
func (m *member) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.cancel = nil
	<-m.done
	m.cl.Close() // leaves the group
}

func (m *member) snapshot() (owned []int32, got map[string]int, errs []error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.owned {
		owned = append(owned, p)
	}
	sort.Slice(owned, func(i, j int) bool { return owned[i] < owned[j] })
	got = make(map[string]int, len(m.got))
	for k, v := range m.got {
		got[k] = v
	}
	return owned, got, append([]error(nil), m.errs...)
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGroupRebalance: two members of one group split a topic's partitions; records
// produced then are consumed between them; one member leaves, the other gets every
// partition and consumes what is produced after. No record is lost.
func TestGroupRebalance(t *testing.T) {
	for _, proto := range []struct {
		name string
		is   bool
	}{{"classic", false}, {"consumer_KIP848", true}} {
		t.Run(proto.name, func(t *testing.T) { testGroupRebalance(t, proto.is) })
	}
}

func testGroupRebalance(t *testing.T, protocol848 bool) {
	const parts, perPhase = 4, 200
	bootstrap := kafkatest.Broker(t)
	topic, group := kafkatest.UniqueName(t, "in"), kafkatest.UniqueName(t, "group")
	kafkatest.CreateTopic(t, bootstrap, topic, parts)
	prod := kafkatest.Client(t, bootstrap)

	m1 := startMember(t, "m1", bootstrap, group, topic, protocol848)
	defer m1.stop()
	m2 := startMember(t, "m2", bootstrap, group, topic, protocol848)
	defer m2.stop()

	waitFor(t, "both members to own partitions, together all of them", 60*time.Second, func() bool {
		o1, _, _ := m1.snapshot()
		o2, _, _ := m2.snapshot()
		if len(o1) == 0 || len(o2) == 0 || len(o1)+len(o2) != parts {
			return false
		}
		all := map[int32]bool{}
		for _, p := range append(o1, o2...) {
			all[p] = true
		}
		return len(all) == parts
	})
	o1, _, _ := m1.snapshot()
	o2, _, _ := m2.snapshot()
	t.Logf("split: m1 %v, m2 %v", o1, o2)

	// Phase 1: records spread over all partitions, consumed by both members.
	produceN(t, prod, topic, "p1", 0, perPhase)
	waitFor(t, "phase 1 records to be consumed", 60*time.Second, func() bool {
		_, g1, _ := m1.snapshot()
		_, g2, _ := m2.snapshot()
		return countPrefix(g1, "p1-")+countPrefix(g2, "p1-") >= perPhase
	})
	_, g1, _ := m1.snapshot()
	_, g2, _ := m2.snapshot()
	if countPrefix(g1, "p1-") == 0 || countPrefix(g2, "p1-") == 0 {
		t.Errorf("phase 1: m1 consumed %d, m2 %d; want both > 0", countPrefix(g1, "p1-"), countPrefix(g2, "p1-"))
	}

	// m2 leaves; m1 must get every partition.
	m2.stop()
	waitFor(t, "m1 to own every partition", 60*time.Second, func() bool {
		o, _, _ := m1.snapshot()
		return len(o) == parts
	})

	// Phase 2: everything goes to m1.
	produceN(t, prod, topic, "p2", 0, perPhase)
	waitFor(t, "phase 2 records to be consumed by m1", 60*time.Second, func() bool {
		_, g, _ := m1.snapshot()
		return countPrefix(g, "p2-") >= perPhase
	})

	_, g1, e1 := m1.snapshot()
	_, g2, e2 := m2.snapshot()
	for _, err := range append(e1, e2...) {
		t.Errorf("member error: %v", err)
	}
	dups := 0
	for phase, prefix := range []string{"p1", "p2"} {
		for i := 0; i < perPhase; i++ {
			v := fmt.Sprintf("%s-%04d", prefix, i)
			c := g1[v] + g2[v]
			if c == 0 {
				t.Errorf("phase %d: record %s lost", phase+1, v)
			}
			if c > 1 {
				dups++
			}
		}
	}
	t.Logf("m1 consumed %d, m2 %d, redelivered %d (allowed: at-least-once)", sum(g1), sum(g2), dups)
}

func countPrefix(m map[string]int, prefix string) int {
	c := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			c++
		}
	}
	return c
}
