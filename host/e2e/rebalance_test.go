package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestTwoInstances is the proof that a job's output does not depend on how
// many instances run it or where its tasks move (DESIGN.md §10): one
// application, a keyed sum in one-second fixed windows over a Kafka topic of
// 4 partitions, runs as two instances (two job servers of this process, each
// with its own state_dir, so each a static group member, and its own
// LOOPBACK worker pool) against the same broker, exactly_once. The input is
// produced at a steady rate while the first instance runs alone, the second
// joins (the rebalance moves tasks to it), and one of them ends (its tasks
// move to the other); the survivor finishes. Tasks with GroupByKey state
// must move, at the join or the leave (the assignor chooses which tasks
// move), and restore that state from their changelogs. The output topic, read read_committed, must hold every
// window's sum exactly once: none missing, none twice, none extra.
//
// Each variant also checks how the leaving instance's tasks moved:
//   - cancel-joiner (classic): the joiner is cancelled, so it leaves the
//     group, and its tasks go back to the first instance, which kept their
//     state on disk when they were revoked: their restore starts at the
//     stored changelog position (replays only the tail).
//   - stop-first (classic, session_timeout_ms 6000): the first instance's
//     job server stops, as for a restart, so the static member stays in the
//     group and the survivor gets its tasks only once its session expires.
//   - cancel-first (consumer, KIP-848): the first instance is cancelled and
//     leaves, and the survivor gets its tasks at once.
//
// The join costs the first instance no processed cycle under classic: the
// cooperative revocation drops only the moving tasks, and no transaction
// with work in it aborts; under consumer, one (the cycle running when the
// group reassigns the member's partitions, or two).
func TestTwoInstances(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		session        int  // session_timeout_ms; 0: the default
		leaver         int  // 0: the first instance leaves, 1: the joiner
		stop           bool // the leaver's job server stops instead of a Cancel
	}{
		{name: "classic/cancel-joiner", protocol: "classic", leaver: 1},
		{name: "classic/stop-first", protocol: "classic", session: 6000, leaver: 0, stop: true},
		{name: "consumer/cancel-first", protocol: "consumer", leaver: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 5*time.Minute)
			bootstrap, in, out := windowTopics(t)
			in1 := windowInput(time.Now().Add(-2*time.Hour), 6000, windowPartitions)
			want := in1.sums()

			opts := map[string]string{
				"application_id": kafkatest.UniqueName(t, "two"), "bootstrap_servers": bootstrap,
				"internal_parallelism": "4", "source_idle_timeout_ms": "3600000",
				"group_protocol": tc.protocol,
			}
			if tc.session > 0 {
				opts["session_timeout_ms"] = strconv.Itoa(tc.session)
			}
			insts := []*appInstance{startAppInstance(t, "first"), startAppInstance(t, "joiner")}
			for _, a := range insts {
				a.pipe = kafkaSumPipeline(t, a.pool, in, out, time.Second, nil)
			}
			leaver, survivor := insts[tc.leaver], insts[1-tc.leaver]

			// The input flows at a steady rate from the start; it waits
			// at half for the joiner to hold tasks, so that the join
			// comes before its end and the leave with much still to
			// come.
			joined := make(chan struct{})
			produced := make(chan struct{})
			pctx, stopProducing := context.WithCancel(ctx)
			t.Cleanup(func() { stopProducing(); <-produced })
			go func() {
				defer close(produced)
				in1.produce(pctx, t, bootstrap, in, 0, len(in1.recs)/2)
				select {
				case <-joined:
				case <-pctx.Done():
					return
				}
				in1.produce(pctx, t, bootstrap, in, len(in1.recs)/2, len(in1.recs))
			}()
			insts[0].submit(ctx, t, opts)
			kafkatest.ReadCounts(ctx, t, bootstrap, out, 200) // the first instance is well under way: 10 windows
			joining := time.Now()
			insts[1].submit(ctx, t, opts)
			joinedAt := time.Now()
			joinedTasks := insts[1].awaitAssigned(ctx, t, time.Time{})
			close(joined)
			// Both instances share the work a while before the leave
			// (and the tasks that come back have a changelog tail to
			// replay).
			insts[1].awaitConsumed(ctx, t, len(in1.recs)/6)
			t.Logf("the joiner got its first task %v after its submission", joinedTasks.Sub(joinedAt).Round(time.Millisecond))

			left := time.Now()
			leaver.end(ctx, t, tc.stop)
			took := survivor.awaitAssigned(ctx, t, left).Sub(left)
			t.Logf("the survivor took the leaver's first task %v after the leave", took.Round(time.Millisecond))
			// A stopped static member's session runs from its last
			// heartbeat, which may have been a heartbeat interval (a third
			// of the session, at most 3 s, under classic) before the stop.
			heartbeat := min(tc.session/3, 3000)
			switch {
			case tc.stop && took < time.Duration(tc.session-heartbeat-200)*time.Millisecond:
				t.Errorf("the leaver's job server stopped, and the survivor took its tasks %v later: a static member that stops for a restart must keep its membership until its session (%d ms) expires", took, tc.session)
			case !tc.stop && took > 20*time.Second:
				t.Errorf("the leaver was cancelled, and the survivor took its tasks %v later: a cancelled instance must leave the group, not wait out its session", took)
			}

			select {
			case <-produced:
			case <-ctx.Done():
				t.Fatal("the input was not produced by the deadline")
			}
			t.Logf("the input ended %v after the leave", time.Since(left).Round(time.Millisecond))
			// Closing records only now: before the last data records,
			// they would close windows those records belong to.
			in1.produceClosing(ctx, t, bootstrap, in)
			kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want))
			survivor.cancel(ctx, t)
			kafkatest.CheckCounts(t, "two instances", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), want)

			// Tasks with state moved: at the join, or at the leave
			// (which tasks move is the assignor's choice).
			if n := insts[1].restoredWithState(joinedAt) + survivor.restoredWithState(left); n == 0 {
				t.Errorf("no task with state moved between the instances: the test proves nothing about moving state")
			} else {
				t.Logf("%d restores of moved tasks' state from their changelogs", n)
			}

			// Revocations cost no processed work: under classic no
			// transaction with records aborted on the first instance
			// from the joiner's submission to the leave; under consumer
			// only the cycles running while the group reassigned its
			// partitions, one or two (franz-go cannot commit them:
			// runtime's onBlocked). (Under consumer the first instance
			// may abort a cycle before, too, alone: the group assigns a
			// new member the partitions of its topics in steps.)
			allowed := 0
			if tc.protocol == "consumer" {
				allowed = 2
			}
			if n := insts[0].logCount(`msg="transaction aborted: tasks restart from the last committed cycle"`, joining, left); n > allowed {
				t.Errorf("the first instance aborted %d transactions between the join and the leave, want at most %d: a rebalance must not abort processed cycles", n, allowed)
			}
			if tc.leaver == 1 {
				// The tasks that came back to the first instance had
				// their state on its disk: each restore starts at the
				// stored changelog position, not at the start.
				froms := insts[0].restoreOffsets(left)
				if len(froms) == 0 {
					t.Errorf("the first instance restored no task after the joiner left")
				}
				for task, from := range froms {
					if from == 0 {
						t.Errorf("task %s came back to the first instance and was restored from the changelog's start: its revoked state should have stayed on disk", task)
					}
				}
			}
			for _, a := range insts {
				if t.Failed() {
					a.dumpLog(t)
				} else {
					a.logGroupSteps(t)
				}
			}
		})
	}
}

// windowPartitions is the partition count of windowTopics' input.
const windowPartitions = 4

// windowTopics creates the input (windowPartitions partitions) and output
// topics of a windowed sum on the test's broker.
func windowTopics(t *testing.T) (bootstrap, in, out string) {
	t.Helper()
	bootstrap = kafkatest.Broker(t)
	in, out = kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	kafkatest.CreateTopic(t, bootstrap, in, windowPartitions)
	kafkatest.CreateTopic(t, bootstrap, out, kafkatest.CountOutPartitions)
	return bootstrap, in, out
}

// windowCounts is the input of TestTwoInstances: records in timestamp
// order, 10 ms apart, over 20 keys, spread round-robin over the partitions
// (so every partition's watermark advances alike), and the sums they make
// in one-second windows.
type windowCounts struct {
	base       int64 // ms, a whole second
	partitions int
	recs       []countRec
}

func windowInput(from time.Time, n, partitions int) *windowCounts {
	w := &windowCounts{base: from.Truncate(time.Second).UnixMilli(), partitions: partitions}
	for i := range n {
		w.recs = append(w.recs, countRec{key: fmt.Sprintf("k%02d", i%20), ts: w.base + int64(i)*10, value: int64(1 + i%7), partition: int32(i % partitions)})
	}
	return w
}

// sums is the exact output once every window has fired.
func (w *windowCounts) sums() map[string]int64 {
	want := map[string]int64{}
	for _, r := range w.recs {
		want[fmt.Sprintf("%s@%d", r.key, r.ts-r.ts%1000)] += r.value
	}
	return want
}

// produce writes recs[lo:hi] at about 500 records a second, so the
// instances' joins and leaves happen while the input flows.
func (w *windowCounts) produce(ctx context.Context, t *testing.T, bootstrap, topic string, lo, hi int) {
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := lo; i < hi; i += 5 {
		for _, r := range w.recs[i:min(i+5, hi)] {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: r.partition, Key: []byte(r.key), Value: be8(r.value), Timestamp: time.UnixMilli(r.ts)}, func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					t.Errorf("producing: %v", err)
				}
			})
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
	if err := cl.Flush(ctx); err != nil && ctx.Err() == nil {
		t.Errorf("producing the input: %v", err)
	}
}

// produceClosing writes one record per partition late enough to move every
// partition's watermark (its largest timestamp less 1 s) past the last
// window of recs; the closing records' own windows never fire.
func (w *windowCounts) produceClosing(ctx context.Context, t *testing.T, bootstrap, topic string) {
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	last := w.recs[len(w.recs)-1].ts
	for p := range w.partitions {
		r := &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte("closing"), Value: be8(1), Timestamp: time.UnixMilli(last - last%1000 + 2500)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("producing the closing records: %v", err)
		}
	}
}

// appInstance is one process of an application as the test runs it: a job
// server of its own (its own hooks and log) with a LOOPBACK worker pool of
// its own (two servers sharing one pool would both name their first worker
// worker-go-1), and the state_dir that makes it a static group member.
type appInstance struct {
	name     string
	srv      *host.JobServer
	client   jobpb.JobServiceClient
	pool     func(context.Context) string
	pipe     *pipepb.Pipeline
	stateDir string
	logFile  string
	jobID    string
	ended    chan struct{} // closed when the job has ended, as endedAs says
	endedAs  jobEnd
	stopped  bool

	mu       sync.Mutex
	restores []restore
	assigned []time.Time // when each task was assigned
	consumed int         // records consumed by its commit cycles
	// fault, if set, runs once inside the first commit cycle (before it
	// commits) by which faultAfter records were consumed.
	fault      func() error
	faultAfter int
	changed    chan struct{} // signalled on each restore, assignment and cycle
}

// restore is one task's changelog restore, as the Restored hook saw it.
type restore struct {
	at           time.Time
	sub, records int
	partition    int32
}

func startAppInstance(t *testing.T, name string) *appInstance {
	t.Helper()
	a := &appInstance{name: name, stateDir: t.TempDir(), logFile: filepath.Join(t.TempDir(), name+".log"), changed: make(chan struct{}, 1)}
	lf, err := os.Create(a.logFile)
	if err != nil {
		t.Fatal(err)
	}
	var w io.Writer = lf
	if os.Getenv("KSRUNNER_DEBUG") != "" {
		w = io.MultiWriter(lf, os.Stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := extworker.StartLoopback(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.pool = pool.EnvironmentConfig
	a.srv, err = host.NewJobServer("127.0.0.1:0", host.DefaultOptions(), slog.New(slog.NewTextHandler(w, nil)),
		host.WithTestHooks(host.TestHooks{Restored: a.onRestored, Assigned: a.onAssigned, BeforeCommit: a.beforeCommit}))
	if err != nil {
		t.Fatal(err)
	}
	go a.srv.Serve()
	cc, err := grpc.NewClient(a.srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	a.client = jobpb.NewJobServiceClient(cc)
	t.Cleanup(func() {
		if !a.stopped {
			a.srv.Stop()
		}
		cc.Close()
		pool.Stop(context.Background())
		cancel()
		lf.Close()
		if t.Failed() {
			logFileTail(t, "instance "+name, a.logFile, 200)
		}
	})
	return a
}

// logFileTail logs the last n lines of the log file at path, what the test's
// output keeps of an instance that failed it (the file is a temporary
// one).
func logFileTail(t *testing.T, what, path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: no log: %v", what, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("%s: the last %d lines of its log:\n%s", what, len(lines), strings.Join(lines, "\n"))
}

func (a *appInstance) onRestored(sub int, partition int32, records int) {
	a.mu.Lock()
	a.restores = append(a.restores, restore{at: time.Now(), sub: sub, partition: partition, records: records})
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

func (a *appInstance) onAssigned(int, int32) {
	a.mu.Lock()
	a.assigned = append(a.assigned, time.Now())
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// awaitAssigned waits for a task's assignment after since and returns its
// time.
func (a *appInstance) awaitAssigned(ctx context.Context, t *testing.T, since time.Time) (at time.Time) {
	t.Helper()
	a.await(ctx, t, fmt.Sprintf("a task assigned after %v", since.Format(time.TimeOnly)), func() bool {
		for _, at = range a.assigned {
			if at.After(since) {
				return true
			}
		}
		return false
	})
	return at
}

// await waits, for at most 2 minutes, until ok (called with a.mu held)
// holds, failing the test if the job ends first.
func (a *appInstance) await(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		a.mu.Lock()
		done := ok()
		a.mu.Unlock()
		if done {
			return
		}
		select {
		case <-a.changed:
		case <-a.ended:
			r := a.endedAs
			a.dumpLog(t)
			t.Fatalf("%s: the job ended %v (errors %q, %v) while awaiting %s", a.name, r.state, r.errs, r.err, what)
		case <-ctx.Done():
			a.dumpLog(t)
			t.Fatalf("%s: no %s by the deadline", a.name, what)
		}
	}
}

func (a *appInstance) beforeCommit(records int) error {
	a.mu.Lock()
	a.consumed += records
	var fault func() error
	if a.fault != nil && a.consumed >= a.faultAfter {
		fault, a.fault = a.fault, nil
	}
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
	if fault != nil {
		return fault()
	}
	return nil
}

// awaitConsumed waits until the instance's commit cycles have consumed n
// records (input and shuffle records; the last cycle may not have
// committed yet).
func (a *appInstance) awaitConsumed(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	a.await(ctx, t, fmt.Sprintf("%d records consumed", n), func() bool { return a.consumed >= n })
}

// submit runs the application's pipeline on this instance, with its own
// state_dir.
func (a *appInstance) submit(ctx context.Context, t *testing.T, opts map[string]string) {
	t.Helper()
	o := map[string]string{"state_dir": a.stateDir}
	for k, v := range opts {
		o[k] = v
	}
	id, err := submit(ctx, t, a.client, a.pipe, o)
	if err != nil {
		t.Fatalf("%s: submit: %v", a.name, err)
	}
	a.jobID = id
	a.ended = make(chan struct{})
	go func() {
		defer close(a.ended)
		r, err := wait(ctx, a.client, id)
		a.endedAs = jobEnd{r.State, r.Errors, err}
	}()
}

// restoredWithState counts the restores after since that replayed
// changelog records.
func (a *appInstance) restoredWithState(since time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.restores {
		if r.records > 0 && r.at.After(since) {
			n++
		}
	}
	return n
}

// end ends the instance's part: stop stops its job server (as for a
// restart; Stop returns once the job has ended), otherwise its job is
// cancelled, and must end CANCELLED.
func (a *appInstance) end(ctx context.Context, t *testing.T, stop bool) {
	t.Helper()
	if !stop {
		a.cancel(ctx, t)
		return
	}
	a.stopped = true
	a.srv.Stop()
	<-a.ended // the server's end may cut the message stream before the state
}

func (a *appInstance) cancel(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := a.client.Cancel(ctx, &jobpb.CancelJobRequest{JobId: a.jobID}); err != nil {
		t.Fatalf("%s: Cancel: %v", a.name, err)
	}
	<-a.ended
	if r := a.endedAs; r.err != nil || r.state != jobpb.JobState_CANCELLED {
		t.Fatalf("%s: job ended %v (errors %q, %v), want CANCELLED", a.name, r.state, r.errs, r.err)
	}
}

// logCount counts the log lines containing s logged before until.
func (a *appInstance) logCount(s string, from, until time.Time) int {
	n := 0
	a.eachLogLine(func(at time.Time, line string) {
		if !at.Before(from) && at.Before(until) && strings.Contains(line, s) {
			n++
		}
	})
	return n
}

var restoredFrom = regexp.MustCompile(`msg="task state restored from the changelog" .*topic=(\S+) partition=(\d+) from=(\d+)`)

// restoreOffsets returns the changelog offset each task's restore after
// since started from, by "changelog/partition".
func (a *appInstance) restoreOffsets(since time.Time) map[string]int64 {
	out := map[string]int64{}
	a.eachLogLine(func(at time.Time, line string) {
		if m := restoredFrom.FindStringSubmatch(line); m != nil && at.After(since) {
			from, _ := strconv.ParseInt(m[3], 10, 64)
			out[m[1]+"/"+m[2]] = from
		}
	})
	return out
}

var logTime = regexp.MustCompile(`^time=(\S+) `)

func (a *appInstance) eachLogLine(fn func(at time.Time, line string)) {
	f, err := os.Open(a.logFile)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		fn(at, line)
	}
}

// logGroupSteps logs what the instance's log says of rebalances, restores
// and aborted cycles.
func (a *appInstance) logGroupSteps(t *testing.T) {
	var lines []string
	a.eachLogLine(func(_ time.Time, line string) {
		for _, s := range []string{"rebalance:", "transaction aborted", "restored from the changelog", "left consumer group", "lost its partitions"} {
			if strings.Contains(line, s) {
				lines = append(lines, line)
				break
			}
		}
	})
	t.Logf("%s: %d commit cycles' records consumed; group steps:\n%s", a.name, a.consumed, strings.Join(lines, "\n"))
}

// dumpLog logs the instance's warnings and errors, and its group and
// restore steps.
func (a *appInstance) dumpLog(t *testing.T) {
	var lines []string
	a.eachLogLine(func(_ time.Time, line string) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "consumer group") ||
			strings.Contains(line, "restored") || strings.Contains(line, "aborted") || strings.Contains(line, "left") {
			lines = append(lines, line)
		}
	})
	t.Logf("%s's log (%s), in part:\n%s", a.name, a.logFile, strings.Join(lines, "\n"))
}

// TestLostMembershipMidCycle: an instance that loses its group membership
// in the middle of a commit cycle (as when its session expires while a
// cycle runs long: here the test removes the static member from the group,
// KIP-345, just before the cycle commits) drops that cycle's work and
// carries on: it joins again and finishes the input, and the job does not
// fail. exactly_once: the cycle's transaction aborts (its offsets cannot
// commit), the output is exact. at_least_once: the cycle's offsets and
// state do not commit and its input is processed again, but what it
// produced stays (shuffle records among them), so the output holds every
// window, some perhaps twice, with sums that may count some input twice
// but never miss any.
func TestLostMembershipMidCycle(t *testing.T) {
	for _, guarantee := range []string{"exactly_once", "at_least_once"} {
		t.Run(guarantee, func(t *testing.T) {
			ctx := testContext(t, 3*time.Minute)
			bootstrap, in, out := windowTopics(t)
			input := windowInput(time.Now().Add(-2*time.Hour), 3000, windowPartitions)
			want := input.sums()
			appID := kafkatest.UniqueName(t, "lost")

			a := startAppInstance(t, "only")
			a.pipe = kafkaSumPipeline(t, a.pool, in, out, time.Second, nil)
			adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
			kicked := make(chan struct{})
			a.faultAfter = len(input.recs) / 2
			a.fault = func() error {
				defer close(kicked)
				id, err := os.ReadFile(filepath.Join(a.stateDir, appID, "instance-id"))
				if err != nil {
					return err
				}
				gid := appID + "-" + strings.TrimSpace(string(id))
				resps, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(appID).InstanceIDs(gid).Reason("test: the member's session expired"))
				if err == nil {
					err = resps.Error()
				}
				if err != nil {
					t.Errorf("removing member %s from the group: %v", gid, err)
				}
				return nil
			}

			produced := make(chan struct{})
			pctx, stopProducing := context.WithCancel(ctx)
			t.Cleanup(func() { stopProducing(); <-produced })
			go func() {
				defer close(produced)
				input.produce(pctx, t, bootstrap, in, 0, len(input.recs))
			}()
			a.submit(ctx, t, map[string]string{
				"application_id": appID, "bootstrap_servers": bootstrap, "processing_guarantee": guarantee,
				"internal_parallelism": "4", "source_idle_timeout_ms": "3600000",
			})
			select {
			case <-kicked:
			case <-a.ended:
				t.Fatalf("the job ended %v (errors %q, %v) before the fault", a.endedAs.state, a.endedAs.errs, a.endedAs.err)
			case <-ctx.Done():
				t.Fatal("no commit cycle consumed half the input by the deadline")
			}
			<-produced
			input.produceClosing(ctx, t, bootstrap, in)

			// Every window, unless the job fails first.
			rctx, stopReading := context.WithCancel(ctx)
			go func() {
				select {
				case <-a.ended:
				case <-rctx.Done():
				}
				stopReading()
			}()
			got := map[string][]int64{}
			kafkatest.ReadTopic(rctx, &failFast{T: t, job: a}, bootstrap, out, func() bool { return len(got) >= len(want) }, func(r *kgo.Record) {
				got[string(r.Key)] = append(got[string(r.Key)], int64(binary.BigEndian.Uint64(r.Value)))
			})
			stopReading()
			a.cancel(ctx, t) // not FAILED: CANCELLED
			all := readAll(ctx, t, bootstrap, out)
			twice, over := 0, 0
			for k, vs := range all {
				if len(vs) > 1 {
					twice++
				}
				for _, v := range vs {
					// at_least_once: the cycle's shuffle records stay
					// and are produced again, so a sum may count some
					// input twice, but never less than all of it.
					if v != want[k] && (guarantee == "exactly_once" || v < want[k]) {
						t.Errorf("window %s: sum %d, want %d", k, v, want[k])
					}
					if v > want[k] {
						over++
					}
				}
			}
			for k := range want {
				if len(all[k]) == 0 {
					t.Errorf("window %s: missing", k)
				}
			}
			if guarantee == "exactly_once" && twice > 0 {
				t.Errorf("%d windows written more than once under exactly_once", twice)
			}
			// exactly_once: the session aborts the cycle, the group loop
			// reports the loss. at_least_once: the offset commit fails,
			// and franz-go rejoins the static member with its partitions.
			lost := a.logCount("lost its partitions", time.Time{}, time.Now())
			aborted := a.logCount(`msg="transaction aborted`, time.Time{}, time.Now()) + a.logCount(`msg="offsets not committed`, time.Time{}, time.Now())
			t.Logf("%s: %d windows, %d written more than once, %d sums over; the instance reported %d losses of its partitions, %d aborted cycles", guarantee, len(all), twice, over, lost, aborted)
			if aborted == 0 || guarantee == "exactly_once" && lost == 0 {
				t.Errorf("the instance reported %d losses and %d aborted cycles: the fault did not hit a cycle", lost, aborted)
			}
			if t.Failed() {
				a.dumpLog(t)
			}
		})
	}
}

// readAll reads topic whole, read_committed: key → every Long value.
func readAll(ctx context.Context, t *testing.T, bootstrap, topic string) map[string][]int64 {
	t.Helper()
	all := map[string][]int64{}
	kafkatest.ReadTopic(ctx, t, bootstrap, topic, nil, func(r *kgo.Record) {
		all[string(r.Key)] = append(all[string(r.Key)], int64(binary.BigEndian.Uint64(r.Value)))
	})
	return all
}

// failFast is the test, for a wait that ends early because the job ended:
// its failure names how the job ended.
type failFast struct {
	*testing.T
	job *appInstance
}

func (f *failFast) Fatalf(format string, args ...any) {
	f.T.Helper()
	select {
	case <-f.job.ended:
		r := f.job.endedAs
		f.job.dumpLog(f.T)
		f.T.Fatalf("%s: the job ended %v (errors %q, %v) before its output was complete", f.job.name, r.state, r.errs, r.err)
	default:
	}
	f.T.Fatalf(format, args...)
}
