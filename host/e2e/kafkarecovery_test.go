package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.DoFn3x0[string, int64, func(string, int64)]((*gateFn)(nil))
	register.Emitter2[string, int64]()
}

// gate holds a bundle of gateFn open, in the LOOPBACK worker of this test
// process, once armed: the job server's commit cycle waits for the bundle,
// so the cycle's transaction stays open until the test kills the server.
var gate struct {
	mu      sync.Mutex
	armed   int           // FinishBundle calls to let through before blocking; 0: disarmed
	blocked chan struct{} // closed when a bundle blocks
	release chan struct{} // closing it lets the blocked bundle go
}

// gateFn passes its elements through. Armed, it blocks in the FinishBundle
// of the gate.armed-th bundle after arming. A source task runs one bundle
// per cycle, and the tasks of a cycle close their bundles in parallel: when
// the input reaches every task in one cycle and the gate blocks the last of
// them, the others' outputs are in the cycle's transaction, open on the
// broker (the test checks that it is).
type gateFn struct{}

func (*gateFn) ProcessElement(k string, v int64, emit func(string, int64)) { emit(k, v) }

func (*gateFn) FinishBundle(func(string, int64)) {
	gate.mu.Lock()
	if gate.armed == 0 {
		gate.mu.Unlock()
		return
	}
	if gate.armed--; gate.armed > 0 {
		gate.mu.Unlock()
		return
	}
	blocked, release := gate.blocked, gate.release
	gate.mu.Unlock()
	close(blocked)
	<-release
}

// armGate makes the after-th bundle from now block until the test ends.
func armGate(t *testing.T, after int) <-chan struct{} {
	gate.mu.Lock()
	defer gate.mu.Unlock()
	gate.armed, gate.blocked, gate.release = after, make(chan struct{}), make(chan struct{})
	release := gate.release
	t.Cleanup(func() { close(release) })
	return gate.blocked
}

// kafkaGatedCountPipeline is kafkaCountPipeline with gateFn after the read,
// its LOOPBACK workers started by the pool at env.
func kafkaGatedCountPipeline(t *testing.T, env func(context.Context) string, in, out string) *pipepb.Pipeline {
	t.Helper()
	return kafkaSumPipeline(t, env, in, out, time.Minute, &gateFn{})
}

// jobServerProcess is a `ksrunner jobserver` subprocess.
type jobServerProcess struct {
	cmd    *exec.Cmd
	client jobpb.JobServiceClient
}

// startJobServer starts `ksrunner jobserver` on bootstrap; t.Cleanup kills it.
// Its log goes to log (appended).
func startJobServer(t *testing.T, bootstrap, log string) *jobServerProcess {
	t.Helper()
	cmd := exec.Command(ksrunnerBinary(t), "jobserver", "--job_port", "0", "--expansion_port", "0", "--status_port", "0", "--bootstrap_servers", bootstrap)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	lf, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); lf.Close() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`^job endpoint: (\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var endpoint string
	select {
	case endpoint = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("ksrunner jobserver did not print its endpoint in 30s")
	}
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &jobServerProcess{cmd: cmd, client: jobpb.NewJobServiceClient(cc)}
}

// kill is kill -9: the process gets no chance to abort its transaction or
// leave the group.
func (p *jobServerProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
}

// openTransaction reports a partition of topics whose last stable offset is
// below its end: a transaction is open on it.
func openTransaction(ctx context.Context, t *testing.T, adm *kadm.Client, topics ...string) (string, bool) {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatalf("listing end offsets: %v", err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		t.Fatalf("listing last stable offsets: %v", err)
	}
	var open string
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := stable.Lookup(o.Topic, o.Partition); ok && o.Err == nil && s.Err == nil && s.Offset < o.Offset && open == "" {
			open = fmt.Sprintf("%s/%d (stable %d, end %d)", o.Topic, o.Partition, s.Offset, o.Offset)
		}
	})
	return open, open != ""
}

// TestKafkaKillInTransactionAndRestart: a job server killed (kill -9) inside
// an open transaction of an unbounded Kafka-to-Kafka job, and a new one
// started on the same state_dir with the job resubmitted under the same
// application_id, resumes at once: the new instance has the dead one's
// identity (state_dir/<application_id>/instance-id), so its transactional
// producer aborts the open transaction as it starts and its static
// membership takes the dead member's place in the group without waiting
// for its session to expire. The output, read read_committed, holds each
// fired window's sum exactly once.
//
// The job's transaction_timeout_ms is the old default of five minutes: an
// instance that could not fence its predecessor would wait that long for
// the changelogs' and outputs' last stable offsets, past the test's
// deadline; one that joined as a new member would wait for the dead
// member's session (45 s), past the recovery bound below.
func TestKafkaKillInTransactionAndRestart(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	const partitions, n = 4, 400
	in, out := countTopics(t, bootstrap, "kin", partitions)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute).UnixMilli()
	type rec struct {
		key       string
		ts, value int64
		partition int32
	}
	recs := make([]rec, n)
	for i := range recs {
		recs[i] = rec{key: fmt.Sprintf("k%d", i%10), ts: base + int64(i)*7000, value: int64(1 + i%3), partition: int32(i % partitions)}
	}
	produce := func(rs []rec) {
		cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for _, r := range rs {
			cl.Produce(ctx, &kgo.Record{Topic: in, Partition: r.partition, Key: []byte(r.key), Value: be8(r.value), Timestamp: time.UnixMilli(r.ts)}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("producing: %v", err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil || t.Failed() {
			t.Fatalf("producing the input: %v", err)
		}
	}
	// fired: see TestKafkaCancelAndResume (the same data and windows).
	fired := func(rs []rec) map[string]int64 {
		maxTs := map[int32]int64{}
		for _, r := range rs {
			maxTs[r.partition] = max(maxTs[r.partition], r.ts)
		}
		wm := int64(1<<63 - 1)
		for p := range int32(partitions) {
			wm = min(wm, maxTs[p])
		}
		want := map[string]int64{}
		for _, r := range recs {
			if start := r.ts - r.ts%60000; start+60000 <= wm {
				want[fmt.Sprintf("%s@%d", r.key, start)] += r.value
			}
		}
		return want
	}
	first := recs[:n/2]
	want1, want2 := fired(first), fired(recs)
	if len(want1) == 0 || len(want2) <= len(want1) {
		t.Fatalf("test data: %d windows fire in the first job, %d in both", len(want1), len(want2))
	}

	appID := kafkatest.UniqueName(t, "recover")
	stateDir := t.TempDir()
	log := filepath.Join(t.TempDir(), "jobserver.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("job server log:\n%s", b)
		}
	})
	// Each job's workers start in a LOOPBACK pool of its own, not the
	// tests' shared one: the dead job's worker stays in its pool, held by
	// the gate, under the worker id that the new job server (and the tests'
	// own job server) gives its first worker too.
	pool := func() func(context.Context) string {
		p, err := extworker.StartLoopback(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(context.Background()) })
		return p.EnvironmentConfig
	}
	pipe := kafkaGatedCountPipeline(t, pool(), in, out)
	pipe2 := kafkaGatedCountPipeline(t, pool(), in, out)
	opts := map[string]string{
		"application_id": appID, "bootstrap_servers": bootstrap, "state_dir": stateDir,
		"internal_parallelism": "2", "source_idle_timeout_ms": "3600000",
		"transaction_timeout_ms": "300000",
	}

	// The first job server runs the job through the first half of the input.
	srv1 := startJobServer(t, bootstrap, log)
	produce(first)
	if _, err := submit(ctx, t, srv1.client, pipe, opts); err != nil {
		t.Fatalf("submit: %v", err)
	}
	kafkatest.CheckCounts(t, "before the kill", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want1)), want1)

	// The second half goes in with the gate armed: a cycle blocks with its
	// transaction open, and the server is killed in it.
	blocked := armGate(t, partitions)
	produce(recs[n/2:])
	select {
	case <-blocked:
	case <-ctx.Done():
		t.Fatal("no bundle of the second half reached the gate")
	}
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	topics := []string{out}
	for _, name := range listed.Names() {
		if strings.HasPrefix(name, "__beam_"+appID+"_") {
			topics = append(topics, name)
		}
	}
	var open string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ok bool
		if open, ok = openTransaction(ctx, t, adm, topics...); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the blocked cycle has no open transaction on %v after 20s", topics)
		}
	}
	srv1.kill(t)
	if _, ok := openTransaction(ctx, t, adm, topics...); !ok {
		t.Fatalf("no transaction open after the kill (one was on %s)", open)
	}
	t.Logf("killed the job server inside a transaction open on %s", open)

	// A new job server on the same state_dir; the job resubmitted.
	srv2 := startJobServer(t, bootstrap, log)
	resubmitted := time.Now()
	id, err := submit(ctx, t, srv2.client, pipe2, opts)
	if err != nil {
		t.Fatalf("resubmit: %v", err)
	}
	ended := make(chan jobEnd, 1)
	var messages atomic.Pointer[[]string]
	go func() {
		r, err := wait(ctx, srv2.client, id)
		messages.Store(&r.Messages)
		ended <- jobEnd{r.State, r.Errors, err}
	}()
	kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want1)+1)
	firstNew := time.Since(resubmitted)
	kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want2))
	all := time.Since(resubmitted)
	t.Logf("after the resubmission: first new output in %v, all %d windows in %v (transaction_timeout_ms 300000)", firstNew.Round(time.Millisecond), len(want2), all.Round(time.Millisecond))
	// Generous next to the seconds it takes, short of the dead member's
	// session timeout (45 s), which a dynamic member would wait out.
	if all > 40*time.Second {
		t.Errorf("the resubmitted job took %v to write its output, want well under the dead member's session timeout (45s)", all)
	}

	if _, err := srv2.client.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r := <-ended; r.err != nil || r.state != jobpb.JobState_CANCELLED {
		t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", r.state, r.errs, r.err)
	}
	kafkatest.CheckCounts(t, "after the restart", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), want2)

	// The client was told how the recovery went.
	msgs := strings.Join(*messages.Load(), "\n")
	for _, want := range []string{
		"read from " + filepath.Join(stateDir, appID, "instance-id") + " (a restart)",
		"fenced the previous process of this state_dir",
		"consumer group " + appID + ":",
		"restoring the state of",
	} {
		if !strings.Contains(msgs, want) {
			t.Errorf("job messages lack %q:\n%s", want, msgs)
		}
	}
}

// TestKafkaTransactionTimeoutAboveBrokerMax: a transaction_timeout_ms the
// broker's transaction.max.timeout.ms (15 minutes by default) does not
// allow fails the job as it starts, naming the option and its value.
func TestKafkaTransactionTimeoutAboveBrokerMax(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	kafkatest.CreateTopic(t, bootstrap, in, 1)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	id, err := submit(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), map[string]string{
		"application_id": kafkatest.UniqueName(t, "txtimeout"), "bootstrap_servers": bootstrap,
		"transaction_timeout_ms": "3600000", "state_dir": t.TempDir(), // a stable identity: fenced, so checked, at start
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	r, err := wait(ctx, ksrunner, id)
	if err != nil {
		t.Fatal(err)
	}
	const want = "option transaction_timeout_ms: 3600000: the broker refuses it"
	if r.State != jobpb.JobState_FAILED || !strings.Contains(strings.Join(r.Errors, "\n"), want) {
		t.Fatalf("job ended %v with errors %q, want FAILED with %q", r.State, r.Errors, want)
	}
}
