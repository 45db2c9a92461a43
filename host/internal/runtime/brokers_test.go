package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// messages collects what an instance tells the job's client.
type messages struct {
	mu   sync.Mutex
	list []string
}

func (m *messages) add(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.list = append(m.list, s)
}

// matching returns the messages that contain sub.
func (m *messages) matching(sub string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.list {
		if strings.Contains(s, sub) {
			out = append(out, s)
		}
	}
	return out
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, within)
		}
	}
}

// TestReachReportsAndGivesUp: reach reports an outage once it has lasted
// its notice, again at every reminder (not at every failed attempt), and
// when a broker answers again; an outage as long as
// broker_unavailable_timeout_ms ends its context with an error naming the
// brokers and the option.
func TestReachReportsAndGivesUp(t *testing.T) {
	b := kafkatest.NewSwitchedBroker(t, kfake.DefaultNumPartitions(1), kfake.SeedTopics(1, "polled"))
	var warned, told messages
	r := newReach(Config{
		BootstrapServers:         b.Addr,
		BrokerUnavailableTimeout: 2 * time.Second,
		Logger:                   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Warning:                  warned.add,
		Progress:                 told.add,
	})
	r.notice, r.reminder = 200*time.Millisecond, 500*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A consumer keeps asking the broker, as an instance does; it retries
	// every 50ms and refreshes its metadata as often, rather than backing
	// off to 5s, so that the short outage ends within the timeout.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr), kgo.ConsumeTopics("polled"), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }), kgo.MetadataMinAge(50 * time.Millisecond)}, r.opts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	go func() {
		defer wg.Done()
		r.watch(ctx)
	}()
	answered := func() bool { return r.lastOK.Load() > r.lastFail.Load() && r.failures.Load() == 0 }
	waitFor(t, "the broker answers", 10*time.Second, answered)

	// A short outage: reported, then its end; the brokers are not given up.
	b.Off.Store(true)
	waitFor(t, "the outage reported", 5*time.Second, func() bool { return len(warned.matching("cannot reach the Kafka brokers "+b.Addr)) > 0 })
	b.Off.Store(false)
	waitFor(t, "the end of the outage reported", 10*time.Second, func() bool { return len(told.matching("answer again")) > 0 })
	if err := r.failure(); err != nil {
		t.Fatalf("given up after a short outage: %v", err)
	}
	if n := len(warned.matching("")); n > 3 {
		t.Errorf("a short outage reported %d times, want about once (notice 200ms, reminder 500ms): %q", n, warned.matching(""))
	}

	// A long one: reported at the notice and each reminder, then given up.
	before := len(warned.matching(""))
	b.Off.Store(true)
	start := time.Now()
	select {
	case <-r.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the brokers not given up 10s into an outage (broker_unavailable_timeout_ms 2000)")
	}
	took := time.Since(start)
	err = r.failure()
	for _, want := range []string{"cannot reach the Kafka brokers " + b.Addr, "broker_unavailable_timeout_ms 2000", "last error: "} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the error giving up: %v, want it to say %q", err, want)
		}
	}
	if took < 2*time.Second || took > 5*time.Second {
		t.Errorf("given up %v into the outage, want 2s (broker_unavailable_timeout_ms) and a little", took)
	}
	// notice at 200ms, reminders at 700, 1200, 1700 ms: 3 to 4 by 2s,
	// however many attempts the client made.
	long := warned.matching("")[before:]
	if len(long) < 2 || len(long) > 5 || !strings.HasPrefix(long[1], "still cannot reach") {
		t.Errorf("a 2s outage reported %d times, want 3 or 4 (a notice, then reminders): %q", len(long), long)
	}
	t.Logf("given up after %v; reports: %q", took.Round(time.Millisecond), long)
}

// runSwitched runs an application of a changelogApp's plan on a switched
// broker until the test ends, with broker_unavailable_timeout; told gets
// the messages for the job's client, assigned the Assigned hook. done
// receives Run's error.
func runSwitched(t *testing.T, timeout time.Duration, told *messages, assigned func()) (b *kafkatest.SwitchedBroker, done chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	b = kafkatest.NewSwitchedBroker(t, kfake.DefaultNumPartitions(1), kfake.SeedTopics(1, "polled"))
	a := newChangelogApp(t, b.Addr, 2)
	logs := &testkit.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			all := logs.String()
			t.Logf("the instance's log, last 20 KB:\n%s", all[max(0, len(all)-20<<10):])
		}
	})
	cfg := Config{
		Plan: a.plan, BootstrapServers: b.Addr, ApplicationID: a.app, ReplicationFactor: 1, Parallelism: 2,
		StateDir: t.TempDir(), ExactlyOnce: true, CommitInterval: 50 * time.Millisecond,
		TransactionTimeout:       10 * time.Second,
		BrokerUnavailableTimeout: timeout,
		Logger:                   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Warning:                  told.add,
		Progress:                 told.add,
		Hooks:                    &Hooks{Assigned: func(int, int32) { assigned() }},
	}
	done = make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not end 30s after its context")
		}
	})
	return b, done
}

// TestRunGivesUpOnBrokers: Run fails an instance whose brokers stay out of
// reach for broker_unavailable_timeout_ms, with the error naming them; it
// told the job's client once, not at every attempt.
func TestRunGivesUpOnBrokers(t *testing.T) {
	var told messages
	var assigned atomic.Int32
	b, done := runSwitched(t, 3*time.Second, &told, func() { assigned.Add(1) })
	waitFor(t, "tasks assigned", 30*time.Second, func() bool { return assigned.Load() == 2 })
	b.Off.Store(true)
	start := time.Now()
	var err error
	select {
	case err = <-done:
		done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("Run still runs 20s into an outage (broker_unavailable_timeout_ms 3000)")
	}
	took := time.Since(start)
	for _, want := range []string{"cannot reach the Kafka brokers " + b.Addr, "broker_unavailable_timeout_ms 3000"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run's error: %v, want it to say %q", err, want)
		}
	}
	if took < 3*time.Second || took > 8*time.Second {
		t.Errorf("Run failed %v into the outage, want 3s (broker_unavailable_timeout_ms) and a little", took)
	}
	if w := told.matching("cannot reach the Kafka brokers"); len(w) != 1 {
		t.Errorf("the outage was reported %d times in 3s, want once (at 2s; then every 30s): %q", len(w), w)
	}
	t.Logf("Run failed %v into the outage: %v", took.Round(time.Millisecond), err)
}

// TestRunRidesOutAnOutage: an instance whose brokers are out of reach for
// less than broker_unavailable_timeout_ms goes on: it gets its tasks back
// when they answer, and Run does not fail.
func TestRunRidesOutAnOutage(t *testing.T) {
	var told messages
	var assigned atomic.Int32
	b, done := runSwitched(t, 30*time.Second, &told, func() { assigned.Add(1) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what the job was told: %q", told.matching(""))
		}
	})
	waitFor(t, "tasks assigned", 30*time.Second, func() bool { return assigned.Load() == 2 })
	b.Off.Store(true)
	waitFor(t, "the outage reported", 10*time.Second, func() bool { return len(told.matching("cannot reach the Kafka brokers")) > 0 })
	time.Sleep(2 * time.Second) // an outage of about 4s
	b.Off.Store(false)
	back := time.Now()
	var ended error
	waitFor(t, "the tasks assigned again", 30*time.Second, func() bool {
		select {
		case ended = <-done:
			done <- ended
			t.Fatalf("Run ended after a 4s outage: %v", ended)
		default:
		}
		return assigned.Load() >= 4
	})
	t.Logf("tasks assigned again %v after the broker answers again", time.Since(back).Round(time.Millisecond))
	// Told by the instance's loop when a request succeeds again, which
	// under load may come after the new instance's assignment.
	waitFor(t, "the end of the outage told", 10*time.Second, func() bool { return len(told.matching("answer again")) > 0 })
	select {
	case err := <-done:
		done <- err
		t.Fatalf("Run ended after a 4s outage: %v", err)
	default:
	}
}

// rejectedTxn marks INVALID_TXN_STATE, however wrapped, and nothing else:
// the errors another producer of the same transactional id causes stay
// failures (see rejectedTxnError).
func TestRejectedTxn(t *testing.T) {
	for _, tc := range []struct {
		err      error
		restarts bool
	}{
		{nil, false},
		{kerr.InvalidTxnState, true},
		{fmt.Errorf("ending the transaction: %w", kerr.InvalidTxnState), true},
		{&rejectedTxnError{kerr.InvalidTxnState}, true},
		{fmt.Errorf("ending the transaction: %w", kerr.InvalidProducerEpoch), false},
		{kerr.ProducerFenced, false},
		{errors.New("stage s1: bundle failed"), false},
	} {
		got := rejectedTxn(tc.err)
		var rejected *rejectedTxnError
		if errors.As(got, &rejected) != tc.restarts {
			t.Errorf("rejectedTxn(%v) = %v: restarts %v, want %v", tc.err, got, !tc.restarts, tc.restarts)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("rejectedTxn(%v) = %v: lost the error", tc.err, got)
		}
	}
}

// TestReachDown: the brokers are down from the latest answer once one
// failed after it, unless another broker answered within answeringWindow
// and has not failed since (one of several brokers stopped, seen by an
// instance that hears from the others only every few seconds).
func TestReachDown(t *testing.T) {
	errDial := errors.New("unable to dial: connection refused")
	type event struct {
		at   time.Duration // since the start
		addr string
		err  error
	}
	for _, tc := range []struct {
		name   string
		events []event
		at     time.Duration
		want   time.Duration
	}{
		{"all answer", []event{{0, "a:1", nil}, {time.Second, "b:1", nil}}, 5 * time.Second, 0},
		{"the only broker fails", []event{{0, "a:1", nil}, {time.Second, "a:1", errDial}}, 3 * time.Second, 3 * time.Second},
		{"it answers again", []event{{0, "a:1", nil}, {time.Second, "a:1", errDial}, {2 * time.Second, "a:1", nil}}, 3 * time.Second, 0},
		{"one of three fails, the others answered lately", []event{{0, "a:1", nil}, {time.Second, "b:1", nil}, {2 * time.Second, "c:1", nil}, {4 * time.Second, "c:1", errDial}}, 9 * time.Second, 0},
		{"one of three fails, the others' answers are old", []event{{0, "a:1", nil}, {time.Second, "b:1", nil}, {2 * time.Second, "c:1", nil}, {4 * time.Second, "c:1", errDial}}, 12 * time.Second, 10 * time.Second},
		{"all three fail", []event{{0, "a:1", nil}, {time.Second, "b:1", nil}, {2 * time.Second, "c:1", nil}, {3 * time.Second, "a:1", errDial}, {3 * time.Second, "b:1", errDial}, {4 * time.Second, "c:1", errDial}}, 5 * time.Second, 3 * time.Second},
		{"a failure of ours is none", []event{{0, "a:1", nil}, {time.Second, "a:1", context.Canceled}}, 3 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			now := start
			r := newReach(Config{BootstrapServers: "a:1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			r.now = func() time.Time { return now }
			for _, e := range tc.events {
				now = start.Add(e.at)
				r.observe(e.addr, e.err)
			}
			now = start.Add(tc.at)
			if got := r.down(); got != tc.want {
				t.Errorf("down() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFlushContext: under exactly_once a cycle's flush ends at
// transaction_timeout_ms only when a broker could not be reached during
// the cycle, with an error saying why; without an outage it waits on (a
// slow broker that answers decides), and at_least_once has no such bound.
func TestFlushContext(t *testing.T) {
	const limit = 100 * time.Millisecond
	newInst := func(exactlyOnce bool) *instance {
		r := newReach(Config{BootstrapServers: "a:1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		i := &instance{cfg: Config{TransactionTimeout: limit, reach: r}}
		if exactlyOnce {
			i.sess = &kgo.GroupTransactSession{}
		}
		i.cycleMark = r.mark()
		return i
	}
	ended := func(ctx context.Context, within time.Duration) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(within):
			return false
		}
	}

	i := newInst(true)
	ctx, cancel := i.flushContext(context.Background())
	if ended(ctx, 3*limit) {
		t.Errorf("without an outage the flush's context ended: %v", context.Cause(ctx))
	}
	i.cfg.reach.observe("a:1", errors.New("unable to dial"))
	if !ended(ctx, 3*limit) {
		t.Fatalf("after an outage the flush's context did not end past transaction_timeout_ms")
	}
	if err := context.Cause(ctx); err == nil || !strings.Contains(err.Error(), "transaction_timeout_ms") {
		t.Errorf("cause %v, want it to name transaction_timeout_ms", err)
	}
	cancel()

	i = newInst(false)
	ctx, cancel = i.flushContext(context.Background())
	i.cfg.reach.observe("a:1", errors.New("unable to dial"))
	if ended(ctx, 3*limit) {
		t.Errorf("at_least_once: the flush's context ended: %v", context.Cause(ctx))
	}
	cancel()
}

// TestOutageSpansTheCycleBefore: a cycle's failure counts as the brokers'
// outage (the instance starts again) when a broker failed during it or the
// cycle before, since what the client failed to do during an outage (a
// fetch error it injected) may surface in the next poll, after the brokers
// are back; two cycles on, it is the job's own failure.
func TestOutageSpansTheCycleBefore(t *testing.T) {
	r := newReach(Config{BootstrapServers: "a:1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	i := &instance{cfg: Config{reach: r}, cycleMark: r.mark()}
	failure := errors.New("fetching t/0: broker closed the connection")
	isOutage := func() bool {
		var o *outageError
		return errors.As(i.outage(failure), &o)
	}
	i.markCycle()
	if isOutage() {
		t.Fatal("a failure with no broker failure counted as an outage")
	}
	r.observe("a:1", errors.New("unable to dial: connection refused"))
	if !isOutage() {
		t.Error("a failure in the cycle a broker failed in is not an outage")
	}
	r.observe("a:1", nil)
	i.markCycle()
	if !isOutage() {
		t.Error("a failure in the cycle after the one a broker failed in is not an outage")
	}
	i.markCycle()
	if isOutage() {
		t.Error("a failure two cycles after a broker failed counts as an outage")
	}
}
