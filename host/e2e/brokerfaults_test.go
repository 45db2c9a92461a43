package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// The broker fault suite: the fault tests' application (faults_test.go) on
// Kafka brokers of the test's own, started with .ci/kafka-broker.sh on free
// ports (never the shared broker of KSRUNNER_TEST_BOOTSTRAP, which they
// stop and kill), while a broker is stopped and started again, or the
// group's coordinator is killed. Each checks the output read_committed
// against the exact expected sums. They need Java and the Kafka jars
// (.ci/kafka-broker.sh fetch); without them they skip, saying so. They run
// once, in this package, whichever broker the other tests use.

// brokerFaultTimeout is the jobs' broker_unavailable_timeout_ms: longer
// than any outage the tests make.
const brokerFaultTimeout = "120000"

// ownKafka is a Kafka of a test's own: one broker, or three in a KRaft
// cluster.
type ownKafka struct {
	script    string
	env       []string
	bootstrap string
}

// startOwnKafka starts nodes (1 or 3) brokers with .ci/kafka-broker.sh on
// free ports, data in a temporary directory; the test's end kills them.
func startOwnKafka(t *testing.T, nodes int) *ownKafka {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java is not on PATH: the broker fault tests run Kafka brokers of their own (.ci/kafka-broker.sh needs Java 17+)")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	k := &ownKafka{script: filepath.Join(wd, "..", "..", ".ci", "kafka-broker.sh")}
	if out, err := exec.Command("bash", k.script, "fetch").CombinedOutput(); err != nil {
		t.Skipf("the Kafka jars are not available (.ci/kafka-broker.sh fetch: %v; it needs Maven and Maven Central, or the jars in its cache):\n%s", err, out)
	}
	port := freePorts(t, 2*nodes)
	dir := t.TempDir()
	k.env = append(os.Environ(),
		"KSRUNNER_KAFKA_NODES="+strconv.Itoa(nodes),
		"KSRUNNER_KAFKA_PORT="+strconv.Itoa(port),
		"KSRUNNER_KAFKA_CONTROLLER_PORT="+strconv.Itoa(port+1),
		"KSRUNNER_KAFKA_DIR="+dir,
		"KSRUNNER_KAFKA_KEEP_DATA=",
		"KSRUNNER_KAFKA_HEAP=-Xms128m -Xmx512m",
		// a loaded machine starts three JVMs slowly (two minutes seen)
		"KSRUNNER_KAFKA_READY_TIMEOUT=300",
	)
	t.Cleanup(func() {
		for n := 1; n <= nodes; n++ {
			k.cmd(t, "kill-node", strconv.Itoa(n))
		}
	})
	// Registered after t.TempDir, so it runs before the brokers' data and
	// logs are removed.
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("KSRUNNER_KEEP_BROKER_LOGS") != "" {
			logBrokerTransactions(t, dir)
		}
	})
	start := time.Now()
	out := k.run(t, "up")
	k.bootstrap = strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	t.Logf("%d Kafka broker(s) of the test's own on %s, up in %v", nodes, k.bootstrap, time.Since(start).Round(100*time.Millisecond))
	return k
}

// logBrokerTransactions prints what the brokers' own logs (server.log
// under dir, at INFO) say about transactions, their markers and the
// coordinators' loading and unloading: a failed fault test's stalled job
// is told apart from a broker that lost a transaction marker by them.
// With KSRUNNER_KEEP_BROKER_LOGS set (a directory) it runs for a test that
// passed too, and keeps the whole logs there: for a loop that looks for
// Kafka's side of a hanging transaction the job ended.
func logBrokerTransactions(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "server.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*", "server.log"))
	logs = append(logs, more...)
	logs = slices.DeleteFunc(logs, func(p string) bool { return strings.Contains(p, "readycheck") })
	const limit = 400
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Logf("broker log %s: %v", path, err)
			continue
		}
		var lines []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "\t") {
				continue // a client's or a component's configuration dump
			}
			l := strings.ToLower(line)
			noise := strings.Contains(l, "heartbeat") || strings.Contains(l, "sharecoordinator") || strings.Contains(l, "reaper") ||
				strings.Contains(l, "quorumcontroller") || strings.Contains(l, "wrote producer snapshot")
			if !noise && (strings.Contains(l, "transaction") || strings.Contains(l, "marker") || strings.Contains(l, "txn") ||
				strings.Contains(l, "producer") || strings.Contains(l, "coordinator") || strings.Contains(l, "unclean")) {
				lines = append(lines, line)
			}
		}
		if len(lines) > limit {
			lines = append([]string{fmt.Sprintf("(the first %d of %d lines left out)", len(lines)-limit, len(lines))}, lines[len(lines)-limit:]...)
		}
		t.Logf("the broker log %s on transactions, markers and coordinators:\n%s", path, strings.Join(lines, "\n"))
		if keep := os.Getenv("KSRUNNER_KEEP_BROKER_LOGS"); keep != "" {
			// a directory for the whole logs, to read after the test
			// (kept for a test that passed too)
			name := filepath.Join(keep, fmt.Sprintf("%s-%d-%s.log", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix(), filepath.Base(filepath.Dir(filepath.Dir(path)))))
			if err := os.WriteFile(name, b, 0o644); err == nil {
				t.Logf("the whole broker log is in %s", name)
			}
		}
	}
	if len(logs) == 0 {
		t.Logf("no broker server.log under %s", dir)
	}
}

// freePorts finds n consecutive free loopback ports and returns the first.
// They are below Linux's ephemeral range (32768 and up by default): a
// broker stopped for a fault test must get its ports back when it starts
// again, and an outgoing connection of another process took one during
// the outage once (the broker could not restart).
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(12000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// cmd runs .ci/kafka-broker.sh with args, returning its stdout and error.
func (k *ownKafka) cmd(t *testing.T, args ...string) (string, error) {
	c := exec.Command("bash", append([]string{k.script}, args...)...)
	c.Env = k.env
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	if err != nil {
		err = fmt.Errorf("%s %v: %w\n%s", filepath.Base(k.script), args, err, stderr.Bytes())
	}
	return stdout.String(), err
}

// run runs .ci/kafka-broker.sh with args and fails the test if it fails.
func (k *ownKafka) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := k.cmd(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkRecovered waits for the output of third k of the data (produced
// before the fault) and checks that the job is still RUNNING; it reports
// how long the output took after the brokers were back.
func (a *faultApp) checkRecovered(t *testing.T, k int, what string, back time.Time) {
	t.Helper()
	a.awaitThird(t, k)
	t.Logf("%s: the job's output caught up %v after the broker(s) were back", what, time.Since(back).Round(100*time.Millisecond))
	st, err := ksrunner.GetState(a.ctx, &jobpb.GetJobStateRequest{JobId: a.jobID})
	if err != nil || st.GetState() != jobpb.JobState_RUNNING {
		t.Fatalf("%s: the job is %v (%v), want RUNNING", what, st.GetState(), err)
	}
}

// finishAndMessages finishes the application (faultApp.finish) and returns
// the job's messages.
func (a *faultApp) finishAndMessages(t *testing.T) []string {
	t.Helper()
	a.finish(t)
	r, err := wait(a.ctx, ksrunner, a.jobID)
	if err != nil {
		t.Fatal(err)
	}
	return r.Messages
}

// TestBrokerStoppedAndRestartedTwice: the only broker of the job stops
// (a controlled shutdown) while the job has input to process, stays down
// for 8 seconds and starts again on its data, twice in one job. The job
// stays RUNNING, tells its client that the brokers are out of reach and
// back, resumes by itself and ends with every window's sum exactly once.
func TestBrokerStoppedAndRestartedTwice(t *testing.T) {
	k := startOwnKafka(t, 1)
	in, out := countTopics(t, k.bootstrap, "brestart", faultPartitions)
	a := startFaultAppOn(t, k.bootstrap, in, out, "brestart", map[string]string{"broker_unavailable_timeout_ms": brokerFaultTimeout})
	for round := 1; round <= 2; round++ {
		a.produceThird(t, round)
		k.run(t, "stop-node", "1")
		time.Sleep(8 * time.Second) // the outage: the broker stays down this long
		k.run(t, "start-node", "1")
		a.checkRecovered(t, round, fmt.Sprintf("restart %d", round), time.Now())
	}
	msgs := strings.Join(a.finishAndMessages(t), "\n")
	logFaultMessages(t, msgs)
	for _, want := range []string{"cannot reach the Kafka brokers " + k.bootstrap, "answer again"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("the job's messages do not say %q:\n%s", want, msgs)
		}
	}
}

// TestBrokerOutageKfake: the in-process broker closes every connection
// for 6 seconds while the job has input to process, twice in one job (as
// a broker stopped and started again looks to the clients): the job stays
// RUNNING, resumes by itself and ends with every window's sum exactly
// once. Without Java; the same faults as TestBrokerStoppedAndRestartedTwice.
func TestBrokerOutageKfake(t *testing.T) {
	b := kafkatest.NewSwitchedBroker(t, kfake.DefaultNumPartitions(1))
	bootstrap := b.Addr
	in, out := countTopics(t, bootstrap, "boutage", faultPartitions)
	a := startFaultAppOn(t, bootstrap, in, out, "boutage", map[string]string{"broker_unavailable_timeout_ms": brokerFaultTimeout})
	for round := 1; round <= 2; round++ {
		a.produceThird(t, round)
		b.Off.Store(true)
		time.Sleep(6 * time.Second) // the outage
		b.Off.Store(false)
		a.checkRecovered(t, round, fmt.Sprintf("outage %d", round), time.Now())
	}
	msgs := strings.Join(a.finishAndMessages(t), "\n")
	logFaultMessages(t, msgs)
	for _, want := range []string{"cannot reach the Kafka brokers " + bootstrap, "answer again"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("the job's messages do not say %q:\n%s", want, msgs)
		}
	}
}

// TestBrokerOutageLongerThanTransactionKfake: the in-process broker closes
// every connection for 14 seconds, longer than the job's 10 s
// transaction_timeout_ms, while the job has input to process: the cycle
// the outage caught cannot commit (kfake aborts its transaction at the
// timeout; a real broker, back after it, does so at its next check). The
// job stays RUNNING, restarts its instance and ends with every window's
// sum exactly once.
func TestBrokerOutageLongerThanTransactionKfake(t *testing.T) {
	b := kafkatest.NewSwitchedBroker(t, kfake.DefaultNumPartitions(1))
	bootstrap := b.Addr
	in, out := countTopics(t, bootstrap, "blong", faultPartitions)
	a := startFaultAppOn(t, bootstrap, in, out, "blong", map[string]string{"broker_unavailable_timeout_ms": brokerFaultTimeout})
	a.produceThird(t, 1)
	b.Off.Store(true)
	time.Sleep(14 * time.Second) // the outage, past transaction_timeout_ms 10000
	b.Off.Store(false)
	a.checkRecovered(t, 1, "the outage", time.Now())
	a.produceThird(t, 2)
	a.awaitThird(t, 2)
	logFaultMessages(t, strings.Join(a.finishAndMessages(t), "\n"))
}

// rejectingBroker starts an in-process broker that answers an EndTxn commit
// with INVALID_TXN_STATE, without ending the transaction, whenever reject
// (called once per such request) says so; it returns its address.
func rejectingBroker(t *testing.T, reject func() bool) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.Control(func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req, ok := kreq.(*kmsg.EndTxnRequest)
		if !ok || !req.Commit || !reject() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.InvalidTxnState.Code
		return resp, nil, true
	})
	return c.ListenAddrs()[0]
}

// TestTransactionRejected: the transaction coordinator (the in-process
// broker) rejects cycles' commits with INVALID_TXN_STATE, as Kafka does for
// a transaction it aborted itself (past its timeout): twice in a row, then
// once more later. The job stays RUNNING: its instance starts again from
// the last committed cycle, says why, and the job ends with every window's
// sum exactly once.
func TestTransactionRejected(t *testing.T) {
	var reject, rejected atomic.Int32
	bootstrap := rejectingBroker(t, func() bool {
		if reject.Add(-1) < 0 {
			reject.Add(1)
			return false
		}
		rejected.Add(1)
		return true
	})
	in, out := countTopics(t, bootstrap, "txnrejected", faultPartitions)
	a := startFaultAppOn(t, bootstrap, in, out, "txnrejected", nil)
	for round, n := range []int32{2, 1} {
		reject.Store(n)
		a.produceThird(t, round+1)
		a.checkRecovered(t, round+1, fmt.Sprintf("%d rejected commits", n), time.Now())
	}
	if n := rejected.Load(); n != 3 {
		t.Errorf("%d commits rejected, want 3", n)
	}
	msgs := strings.Join(a.finishAndMessages(t), "\n")
	logFaultMessages(t, msgs)
	if !strings.Contains(msgs, "rejected the cycle's transaction") {
		t.Errorf("the job's messages do not say that the transaction was rejected:\n%s", msgs)
	}
}

// TestTransactionRejectedAlways: a coordinator that rejects every commit
// is not a passing fault: after maxTxnRejections restarts in a row with no
// cycle committed, the job fails, saying why.
func TestTransactionRejectedAlways(t *testing.T) {
	var rejecting atomic.Bool
	bootstrap := rejectingBroker(t, rejecting.Load)
	in, out := countTopics(t, bootstrap, "txnrejall", faultPartitions)
	a := startFaultAppOn(t, bootstrap, in, out, "txnrejall", nil)
	rejecting.Store(true)
	a.produceThird(t, 1)
	r, err := wait(a.ctx, ksrunner, a.jobID)
	if err != nil {
		t.Fatal(err)
	}
	errs := strings.Join(r.Errors, "\n")
	if r.State != jobpb.JobState_FAILED || !strings.Contains(errs, "rejected the cycle's transaction") || !strings.Contains(errs, "6 times in a row") {
		t.Errorf("job ended %v with %q, want FAILED: rejected the cycle's transaction, 6 times in a row", r.State, errs)
	}
}

// TestCoordinatorBrokerKilled: on a three-broker KRaft cluster, the broker
// that coordinates the application's consumer group is killed (kill -9)
// while the job has input to process. The group's coordinator moves to
// another broker; the job goes on by itself and ends with every window's
// sum exactly once.
func TestCoordinatorBrokerKilled(t *testing.T) {
	k := startOwnKafka(t, 3)
	in, out := kafkatest.UniqueName(t, "bcoord-in"), kafkatest.UniqueName(t, "bcoord-out")
	createReplicated(t, k.bootstrap, map[string]int32{in: faultPartitions, out: kafkatest.CountOutPartitions})
	a := startFaultAppOn(t, k.bootstrap, in, out, "bcoord", map[string]string{"broker_unavailable_timeout_ms": brokerFaultTimeout})
	coord := groupCoordinator(t, a.ctx, k.bootstrap, a.appID)
	a.produceThird(t, 1)
	k.run(t, "kill-node", strconv.Itoa(int(coord)))
	a.checkRecovered(t, 1, fmt.Sprintf("the group's coordinator, broker %d, killed", coord), time.Now())
	if moved := groupCoordinator(t, a.ctx, k.bootstrap, a.appID); moved == coord {
		t.Errorf("the group's coordinator is still broker %d, which was killed", coord)
	}
	a.produceThird(t, 2)
	a.awaitThird(t, 2)
	logFaultMessages(t, strings.Join(a.finishAndMessages(t), "\n"))
}

// logFaultMessages logs the job's messages about the brokers and its
// instance's restarts.
func logFaultMessages(t *testing.T, msgs string) {
	for _, m := range strings.Split(msgs, "\n") {
		if strings.Contains(m, "Kafka brokers") || strings.Contains(m, "starts again") || strings.Contains(m, "lost its partitions") || strings.Contains(m, "fenced") || strings.Contains(m, "hanging transaction") {
			t.Logf("job message: %s", m)
		}
	}
}

// createReplicated creates topics (name → partitions) with the brokers'
// default replication factor (three on the three-node cluster) and waits
// until every partition has a leader.
func createReplicated(t *testing.T, bootstrap string, topics map[string]int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	for name, parts := range topics {
		if _, err := adm.CreateTopic(ctx, parts, -1, nil, name); err != nil {
			t.Fatalf("creating topic %s: %v", name, err)
		}
	}
	for {
		md, err := adm.Metadata(ctx)
		ready := err == nil
		for name, parts := range topics {
			td := md.Topics[name]
			ready = ready && td.Err == nil && len(td.Partitions) == int(parts)
			for _, p := range td.Partitions {
				ready = ready && p.Err == nil && p.Leader >= 0 && len(p.Replicas) == 3
			}
		}
		if ready {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topics %v not ready: %v", topics, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// groupCoordinator is the broker coordinating group.
func groupCoordinator(t *testing.T, ctx context.Context, bootstrap, group string) int32 {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	for {
		r := adm.FindGroupCoordinators(ctx, group)[group]
		if r.Err == nil {
			return r.NodeID
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the coordinator of group %s: %v", group, r.Err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
