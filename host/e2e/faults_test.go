package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// The fault-injection suite: an application of two processes (the tests'
// job server and a `ksrunner worker` process) counts windowed sums over a
// Kafka topic while the worker is killed, paused past its session, or
// restarted on a wiped state_dir. Each test reads the output topic
// read_committed and checks it against the exact expected sums: no window
// missing, none twice (readCommitted fails on a key written twice). On the
// real broker when KSRUNNER_TEST_BOOTSTRAP is set (.ci/run), else on an
// in-process broker the worker reaches by its address.

// faultSessionTimeout is the tests' session_timeout_ms: how long the group
// waits for a member that stopped heartbeating (killed, paused).
const faultSessionTimeout = 6 * time.Second

// workerProcess is a `ksrunner worker` process.
type workerProcess struct {
	cmd *exec.Cmd
	log string
}

// startWorker starts `ksrunner worker` for appID on stateDir; its log goes
// to a file printed if the test fails; t.Cleanup kills it.
func startWorker(t *testing.T, bootstrap, appID, stateDir string, args ...string) *workerProcess {
	t.Helper()
	log := filepath.Join(t.TempDir(), "worker.log")
	lf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ksrunnerBinary(t), append([]string{"worker", "--application_id", appID, "--bootstrap_servers", bootstrap, "--state_dir", stateDir}, args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &workerProcess{cmd: cmd, log: log}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("worker log (%s):\n%s", log, b)
		}
	})
	return w
}

// signal sends sig to the worker process.
func (w *workerProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// stop ends the process with sig and waits for it.
func (w *workerProcess) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	w.signal(t, sig)
	w.cmd.Wait()
}

// logged reports the lines of the worker's log that match re.
func (w *workerProcess) logged(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	f, err := os.Open(w.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			lines = append(lines, sc.Text())
		}
	}
	return lines
}

// waitMembers waits until the application's group has want members that
// each hold tasks, for at most within.
func waitMembers(ctx context.Context, t *testing.T, bootstrap, appID string, want int, within time.Duration) map[string]int {
	t.Helper()
	var members map[string]int
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		members = memberTasks(ctx, t, bootstrap, appID)
		busy := 0
		for _, n := range members {
			if n > 0 {
				busy++
			}
		}
		if busy == want && len(members) == want {
			return members
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the group of %s has members %v after %v, want %d holding tasks", appID, members, within, want)
		}
	}
}

// faultApp is one fault test's application: input in, output out, the
// data in thirds, and the job on the tests' job server.
type faultApp struct {
	ctx                context.Context
	bootstrap, in, out string
	appID              string
	data               countData
	jobID              string
}

// faultPartitions is the partition count of a fault test's input topic.
const faultPartitions = 4

func startFaultApp(t *testing.T, name string, extra map[string]string) *faultApp {
	t.Helper()
	bootstrap := kafkatest.Broker(t)
	in, out := countTopics(t, bootstrap, name, faultPartitions)
	return startFaultAppOn(t, bootstrap, in, out, name, extra)
}

// startFaultAppOn starts a fault test's application on bootstrap, reading
// in (faultPartitions partitions) and writing out.
func startFaultAppOn(t *testing.T, bootstrap, in, out, name string, extra map[string]string) *faultApp {
	t.Helper()
	a := &faultApp{ctx: testContext(t, 4*time.Minute), bootstrap: bootstrap, in: in, out: out}
	a.data = newCountData(600, faultPartitions)
	a.appID = kafkatest.UniqueName(t, name)
	opts := map[string]string{
		"application_id": a.appID, "bootstrap_servers": a.bootstrap, "state_dir": t.TempDir(),
		"internal_parallelism": "2", "source_idle_timeout_ms": "3600000",
		"session_timeout_ms":     strconv.Itoa(int(faultSessionTimeout.Milliseconds())),
		"transaction_timeout_ms": "10000",
	}
	for k, v := range extra {
		opts[k] = v
	}
	// The worker process starts its SDK workers in this pool, which
	// outlives the job server's (an EXTERNAL environment on this machine).
	pipe := kafkaSumPipeline(t, ownPool(a.ctx, t), a.in, a.out, time.Minute, nil)
	a.produceThird(t, 0)
	id, err := submit(a.ctx, t, ksrunner, pipe, opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	a.jobID = id
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	t.Cleanup(func() { // before the Cancel: what the job said, if the test failed
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			r, err := wait(ctx, ksrunner, id)
			t.Logf("job %s: %v (%v); its messages:\n%s", id, r.State, err, strings.Join(r.Messages, "\n"))
			t.Logf("job %s: the job server's log (info; its last 300 lines for the job):\n%s", id, strings.Join(serverLog.jobLines(id, 300), "\n"))
			t.Logf("job %s: its Kafka client's own log (debug, without most per-cycle lines; its last 1500 lines):\n%s", id, strings.Join(serverLog.kafkaClientLines(id, 1500), "\n"))
			t.Logf("job %s: the status API's view (api/jobs/%s):\n%s", id, id, jobStatus(id))
			t.Logf("open transactions on %s (__consumer_offsets, and the application's transactional ids):\n%s", a.bootstrap, openTransactions(a.bootstrap, a.appID))
			t.Logf("the runtime's goroutines now (every job's), to show where a stalled instance waits:\n%s", runtimeGoroutines())
		}
	})
	a.awaitThird(t, 0)
	return a
}

// third returns the records of third k (0, 1, 2).
func (a *faultApp) third(k int) []countRec {
	n := len(a.data.recs)
	return a.data.recs[k*n/3 : (k+1)*n/3]
}

func (a *faultApp) produceThird(t *testing.T, k int) {
	a.data.produce(a.ctx, t, a.bootstrap, a.in, a.third(k))
}

// awaitThird waits until the output holds the windows fired by the data up
// to third k, and returns them.
func (a *faultApp) awaitThird(t *testing.T, k int) map[string]int64 {
	t.Helper()
	want := a.data.fired(a.data.recs[:(k+1)*len(a.data.recs)/3])
	kafkatest.ReadCounts(a.ctx, t, a.bootstrap, a.out, len(want))
	return want
}

// finish cancels the job and checks the output whole: every window fired
// by all the data, each once, with its exact sum.
func (a *faultApp) finish(t *testing.T) {
	t.Helper()
	want := a.data.fired(a.data.recs)
	if _, err := ksrunner.Cancel(a.ctx, &jobpb.CancelJobRequest{JobId: a.jobID}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	kafkatest.CheckCounts(t, "output", kafkatest.ReadCounts(a.ctx, t, a.bootstrap, a.out, -1), want)
}

// workerJoins starts a worker on stateDir, waits until both processes hold
// tasks, and runs the second third of the data through the two.
func (a *faultApp) workerJoins(t *testing.T, stateDir string) *workerProcess {
	t.Helper()
	w := startWorker(t, a.bootstrap, a.appID, stateDir)
	waitMembers(a.ctx, t, a.bootstrap, a.appID, 2, 90*time.Second)
	a.produceThird(t, 1)
	a.awaitThird(t, 1)
	return w
}

// TestFaultKillWorker: kill -9 one of the application's two processes
// mid-stream: the survivor takes its tasks once its session expires,
// restores their state and finishes; nothing is lost or counted twice.
func TestFaultKillWorker(t *testing.T) {
	a := startFaultApp(t, "fkill", nil)
	w := a.workerJoins(t, t.TempDir())

	w.stop(t, syscall.SIGKILL)
	killed := time.Now()
	a.produceThird(t, 2)
	a.awaitThird(t, 2)
	took := time.Since(killed)
	t.Logf("after the kill -9 of the worker: the survivor wrote the last windows in %v (session_timeout_ms %v)", took.Round(time.Millisecond), faultSessionTimeout)
	if took > faultSessionTimeout+10*time.Second {
		t.Errorf("the survivor took %v to emit the windows after the kill, want within session_timeout_ms + 10s (%v)", took, faultSessionTimeout+10*time.Second)
	}
	a.finish(t)
}

// TestFaultWipedStateDir: a worker stopped and restarted on a wiped
// state_dir (a new machine, a lost disk) has a new identity and an empty
// store: the tasks it is given restore their state from the changelogs
// from the start.
func TestFaultWipedStateDir(t *testing.T) {
	a := startFaultApp(t, "fwipe", nil)
	dir := t.TempDir()
	w := a.workerJoins(t, dir)

	w.stop(t, syscall.SIGTERM)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stopped worker stays a static member until its session expires;
	// then the new one, a member of its own, gets tasks.
	w2 := startWorker(t, a.bootstrap, a.appID, dir)
	waitMembers(a.ctx, t, a.bootstrap, a.appID, 2, 90*time.Second)
	a.produceThird(t, 2)
	a.awaitThird(t, 2)
	a.finish(t)
	if !strings.Contains(strings.Join(w2.logged(t, regexp.MustCompile(`instance identity \S+ created`)), "\n"), "created") {
		t.Errorf("the worker on the wiped state_dir did not create a new identity")
	}
	// Its store is empty: every task it was given restored from offset 0.
	restores := w2.logged(t, regexp.MustCompile(`task state (restored from|up to date with) the changelog`))
	fromStart := w2.logged(t, regexp.MustCompile(`task state (restored from|up to date with) the changelog.* from=0 `))
	if len(restores) == 0 || len(fromStart) != len(restores) {
		t.Errorf("the worker on the wiped state_dir restored %d tasks, %d of them from the start of their changelogs; want all, and some:\n%s", len(restores), len(fromStart), strings.Join(restores, "\n"))
	}
	t.Logf("restores in the new worker:\n%s", strings.Join(restores, "\n"))
}

// TestFaultPausedWorker: a worker paused (SIGSTOP) past its session
// timeout loses its tasks to the other process, which redoes the work the
// paused one had not committed; resumed (SIGCONT), the paused process is
// fenced (its transaction cannot commit: the group moved on) and rejoins.
// Each window is in the output once.
func TestFaultPausedWorker(t *testing.T) {
	a := startFaultApp(t, "fpause", nil)
	w := a.workerJoins(t, t.TempDir())

	w.signal(t, syscall.SIGSTOP)
	paused := time.Now()
	a.produceThird(t, 2)
	a.awaitThird(t, 2) // by the job server alone: the paused worker's session expires
	t.Logf("with the worker paused: the other process wrote the last windows in %v", time.Since(paused).Round(time.Millisecond))
	w.signal(t, syscall.SIGCONT)
	waitMembers(a.ctx, t, a.bootstrap, a.appID, 2, 90*time.Second) // it rejoins
	a.finish(t)
}
