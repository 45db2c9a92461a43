package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/internal/application"
	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

// testLogger logs to stderr under KSRUNNER_DEBUG, else nowhere.
func testLogger() *slog.Logger {
	var out io.Writer = io.Discard
	if os.Getenv("KSRUNNER_DEBUG") != "" {
		out = os.Stderr
	}
	return slog.New(slog.NewTextHandler(out, nil))
}

// memberTasks returns, per member of the application's consumer group
// (by client id and member id), how many partitions of the application's
// internal and input topics it is assigned.
func memberTasks(ctx context.Context, t *testing.T, bootstrap, appID string) map[string]int {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	described, err := adm.DescribeGroups(ctx, appID)
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, m := range described[appID].Members {
		n := 0
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				n += len(tp.Partitions)
			}
		}
		out[m.MemberID] = n
	}
	return out
}

// waitBusyMembers waits up to 90 s until the application's group has n
// members, each with tasks, and returns their tasks by member; more, if
// not nil, says more in the failure.
func waitBusyMembers(ctx context.Context, t *testing.T, bootstrap, appID string, n int, more func() string) map[string]int {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		members := memberTasks(ctx, t, bootstrap, appID)
		busy := 0
		for _, tasks := range members {
			if tasks > 0 {
				busy++
			}
		}
		if len(members) == n && busy == n {
			return members
		}
		if time.Now().After(deadline) {
			extra := ""
			if more != nil {
				extra = " (" + more() + ")"
			}
			t.Fatalf("the group of %s has members %v 90s after the processes started, want %d with tasks each%s", appID, members, n, extra)
		}
	}
}

// startServer starts an in-process job server with defaults opts (and
// sopts); Stop it (t.Cleanup does too).
func startServer(t *testing.T, opts host.Options, sopts ...host.ServerOption) (*host.JobServer, jobpb.JobServiceClient) {
	t.Helper()
	srv, err := host.NewJobServer("127.0.0.1:0", opts, testLogger(), sopts...)
	if err != nil {
		t.Fatal(err)
	}
	return srv, jobtest.Serve(t, srv)
}

// startWorkerInProcess runs a worker (host.Worker, `ksrunner worker`) of the
// application on a state_dir of its own until the test ends; workerDone
// receives what its Run returned.
func startWorkerInProcess(ctx context.Context, t *testing.T, appID, bootstrap string, opts ...host.ServerOption) (w *host.Worker, workerDone <-chan error) {
	t.Helper()
	w, err := host.NewWorker(host.WorkerConfig{ApplicationID: appID, BootstrapServers: bootstrap, StateDir: t.TempDir(), Logger: testLogger()}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-done })
	return w, done
}

// ownPool starts a LOOPBACK SDK worker pool that outlives the job servers
// of a test (the pipeline's EXTERNAL environment for every process of the
// application).
func ownPool(ctx context.Context, t *testing.T) func(context.Context) string {
	t.Helper()
	p, err := extworker.StartLoopback(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	return p.EnvironmentConfig
}

// TestWorkerJoinsApplication: `ksrunner worker` (host.Worker) on a second
// state_dir joins an application a job server runs, with nothing but the
// application id and the brokers: it reads the job from the pipeline topic,
// reaches the pipeline's LOOPBACK pool (an EXTERNAL environment on this
// machine) and takes its share of the tasks through the consumer group.
// The output, read read_committed, holds every fired window's sum exactly
// once though tasks moved with their state. Cancelling the job on the job
// server stops it in the worker too.
func TestWorkerJoinsApplication(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	const partitions, n = 4, 400
	in, out := countTopics(t, bootstrap, "win", partitions)
	data := newCountData(n, partitions)
	want1, want2 := data.halves(t)
	appID := kafkatest.UniqueName(t, "worker")
	pipe := kafkaCountPipeline(t, in, out)

	data.produce(ctx, t, bootstrap, in, data.recs[:n/2])
	id, err := submit(ctx, t, ksrunner, pipe, map[string]string{
		"application_id": appID, "bootstrap_servers": bootstrap, "state_dir": t.TempDir(),
		"internal_parallelism": "2", "source_idle_timeout_ms": "3600000",
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	ended := make(chan jobEnd, 1)
	go func() { r, err := wait(ctx, ksrunner, id); ended <- jobEnd{r.State, r.Errors, err} }()
	kafkatest.CheckCounts(t, "before the worker", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want1)), want1)

	w, _ := startWorkerInProcess(ctx, t, appID, bootstrap)

	// Both processes hold tasks.
	members := waitBusyMembers(ctx, t, bootstrap, appID, 2, func() string {
		wid, wstate := w.Job()
		return fmt.Sprintf("worker job %q %v", wid, wstate)
	})
	if wid, wstate := w.Job(); wstate != jobpb.JobState_RUNNING {
		t.Fatalf("the worker's job %q is %v, want RUNNING", wid, wstate)
	}
	t.Logf("members and their partitions: %v", members)

	data.produce(ctx, t, bootstrap, in, data.recs[n/2:])
	kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want2))

	if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r := <-ended; r.err != nil || r.state != jobpb.JobState_CANCELLED {
		t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", r.state, r.errs, r.err)
	}
	// The worker reads the cancel from the pipeline topic and ends its job.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, state := w.Job(); state == jobpb.JobState_CANCELLED {
			break
		}
		if time.Now().After(deadline) {
			_, state := w.Job()
			t.Fatalf("the worker's job is %v 30s after the cancel, want CANCELLED", state)
		}
	}
	kafkatest.CheckCounts(t, "after the worker joined", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), want2)
}

// TestJobServerResumes: a job server with a state_dir that stops (as for a
// restart) leaves its unbounded application running on Kafka; a new job
// server on the same state_dir resumes it from its pipeline topic without a
// resubmission, lists it in GetJobs, and processes what arrives meanwhile:
// the output holds every fired window's sum exactly once. Once cancelled,
// the application is not resumed again.
func TestJobServerResumes(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	const partitions, n = 4, 400
	in, out := countTopics(t, bootstrap, "rin", partitions)
	data := newCountData(n, partitions)
	want1, want2 := data.halves(t)
	appID := kafkatest.UniqueName(t, "resumed")
	pool := ownPool(ctx, t)

	opts := host.DefaultOptions()
	opts.BootstrapServers, opts.StateDir, opts.InternalParallelism, opts.SourceIdleTimeoutMs = bootstrap, t.TempDir(), 2, 3600000
	srv1, client1 := startServer(t, opts)
	data.produce(ctx, t, bootstrap, in, data.recs[:n/2])
	if _, err := submit(ctx, t, client1, kafkaSumPipeline(t, pool, in, out, time.Minute, nil), map[string]string{"application_id": appID}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	kafkatest.CheckCounts(t, "before the restart", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want1)), want1)
	srv1.Stop()

	data.produce(ctx, t, bootstrap, in, data.recs[n/2:])
	srv2, client2 := startServer(t, opts)
	ids, err := srv2.Resume(ctx)
	if err != nil || len(ids) != 1 {
		t.Fatalf("Resume: %v, %v; want one job", ids, err)
	}
	jobs, err := client2.GetJobs(ctx, &jobpb.GetJobsRequest{})
	if err != nil || len(jobs.GetJobInfo()) != 1 || jobs.GetJobInfo()[0].GetJobId() != ids[0] {
		t.Fatalf("GetJobs after the resume: %v, %v; want job %s", jobs, err, ids[0])
	}
	kafkatest.CheckCounts(t, "after the resume", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want2)), want2)
	if _, err := client2.Cancel(ctx, &jobpb.CancelJobRequest{JobId: ids[0]}); err != nil {
		t.Fatal(err)
	}
	r, err := wait(ctx, client2, ids[0])
	if err != nil || r.State != jobpb.JobState_CANCELLED {
		t.Fatalf("the resumed job ended %v (%v, %q), want CANCELLED", r.State, err, r.Errors)
	}
	if !strings.Contains(strings.Join(r.Messages, "\n"), "resumed application "+appID) {
		t.Errorf("the resumed job's messages do not say it was resumed:\n%s", strings.Join(r.Messages, "\n"))
	}
	srv2.Stop()
	kafkatest.CheckCounts(t, "after the cancel", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), want2)

	srv3, _ := startServer(t, opts)
	if ids, err := srv3.Resume(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("Resume after the cancel: %v, %v; want nothing", ids, err)
	}
}

// TestJobServerResumesADrain: an application whose drain was recorded on
// its pipeline topic by a job server that stopped before the drain was
// done is drained by the job server that resumes it from the same
// state_dir: its reads stop at the committed offsets (records produced
// since are not read), every window of what was read fires once, and the
// job ends DONE, recording the drain as done, so a later restart resumes
// nothing.
func TestJobServerResumesADrain(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	const partitions, n = 4, 400
	in, out := countTopics(t, bootstrap, "rdrain", partitions)
	data := newCountData(n, partitions)
	read, later := data.recs[:n/2], data.recs[n/2:]
	appID := kafkatest.UniqueName(t, "resumed-drain")
	pool := ownPool(ctx, t)

	opts := host.DefaultOptions()
	opts.BootstrapServers, opts.StateDir, opts.InternalParallelism, opts.SourceIdleTimeoutMs = bootstrap, t.TempDir(), 2, 3600000
	srv1, client1 := startServer(t, opts)
	data.produce(ctx, t, bootstrap, in, read)
	if _, err := submit(ctx, t, client1, kafkaSumPipeline(t, pool, in, out, time.Minute, nil), map[string]string{"application_id": appID}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	fired := data.fired(read)
	kafkatest.CheckCounts(t, "before the restart", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(fired)), fired)
	srv1.Stop()
	// What a drained process that stopped before the drain was done
	// leaves: the pipeline topic says the application drains.
	setAppState(ctx, t, bootstrap, appID, application.Draining)
	data.produce(ctx, t, bootstrap, in, later)

	srv2, client2 := startServer(t, opts)
	ids, err := srv2.Resume(ctx)
	if err != nil || len(ids) != 1 {
		t.Fatalf("Resume: %v, %v; want one job", ids, err)
	}
	r, err := wait(ctx, client2, ids[0])
	if err != nil || r.State != jobpb.JobState_DONE {
		t.Fatalf("the resumed job ended %v (%v, %q), want DONE", r.State, err, r.Errors)
	}
	msgs := strings.Join(r.Messages, "\n")
	for _, want := range []string{"the drain goes on here", "job drained"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("the resumed job's messages do not say %q:\n%s", want, msgs)
		}
	}
	srv2.Stop()
	kafkatest.CheckCounts(t, "after the drain", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), data.windows(read))
	offsets, err := kadm.NewClient(kafkatest.Client(t, bootstrap)).FetchOffsets(ctx, appID)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	for _, r := range read {
		ends[r.partition]++
	}
	for p, end := range ends {
		if o, ok := offsets.Lookup(in, p); !ok || o.At != end {
			t.Errorf("partition %d: committed offset %v (found %v), want %d: where the read was when it drained", p, o.At, ok, end)
		}
	}

	srv3, _ := startServer(t, opts)
	if ids, err := srv3.Resume(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("Resume after the drain: %v, %v; want nothing", ids, err)
	}
}

// setAppState records state on application appID's pipeline topic, as a
// process of the application would.
func setAppState(ctx context.Context, t *testing.T, bootstrap, appID string, state application.State) {
	t.Helper()
	topic, err := application.Open(ctx, bootstrap, nil, appID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	m, err := topic.Manifest(ctx)
	if err != nil || m == nil {
		t.Fatalf("the pipeline topic's manifest: %v, %v", m, err)
	}
	if err := topic.SetState(ctx, m.Fingerprint, state); err != nil {
		t.Fatalf("recording %s: %v", state, err)
	}
}

// runningCountApp is an application running a pipeline of build
// (reading in, writing out) on the package's job server, a member of its
// group: the job id, its options and topics.
type runningCountApp struct {
	bootstrap, appID, in, out, id string
	opts                          map[string]string
}

// runningApp submits build's pipeline under a new application and waits
// until its job has joined the group; the job is cancelled at the test's
// end.
func runningApp(ctx context.Context, t *testing.T, name string, build func(t *testing.T, in, out string) *pipepb.Pipeline) runningCountApp {
	t.Helper()
	a := runningCountApp{bootstrap: kafkatest.Broker(t)}
	a.in, a.out = kafkatest.UniqueName(t, name+"-in"), kafkatest.UniqueName(t, name+"-out")
	kafkatest.CreateTopic(t, a.bootstrap, a.in, 2)
	kafkatest.CreateTopic(t, a.bootstrap, a.out, kafkatest.CountOutPartitions)
	a.appID = kafkatest.UniqueName(t, name)
	a.opts = map[string]string{"application_id": a.appID, "bootstrap_servers": a.bootstrap, "internal_parallelism": "2"}
	var err error
	if a.id, err = submit(ctx, t, ksrunner, build(t, a.in, a.out), a.opts); err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: a.id}) })
	// RUNNING: a member of the group.
	for deadline := time.Now().Add(60 * time.Second); len(memberTasks(ctx, t, a.bootstrap, a.appID)) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the job has not joined its group after 60s")
		}
	}
	return a
}

// TestAnotherPipelineRefused: while an application runs, a different
// pipeline under its application id is refused at submission, naming the
// id, by the job server that runs it and by another one; the same
// pipeline submitted to another job server joins it.
func TestAnotherPipelineRefused(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	app := runningApp(ctx, t, "refuse", kafkaCountPipeline)
	bootstrap, appID, in, out, opts, id := app.bootstrap, app.appID, app.in, app.out, app.opts, app.id
	other := kafkaCountPipeline(t, in, out+"-other")
	opts2 := host.DefaultOptions()
	opts2.BootstrapServers = bootstrap
	_, client2 := startServer(t, opts2)
	for name, client := range map[string]jobpb.JobServiceClient{"the same job server": ksrunner, "another job server": client2} {
		_, err := submit(ctx, t, client, other, opts)
		if err == nil || !strings.Contains(err.Error(), `application_id "`+appID+`" is running another pipeline`) {
			t.Errorf("%s: another pipeline under a running application: %v, want a refusal naming %s", name, err, appID)
		}
	}
	same, err := submit(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), opts)
	if err != nil || same != id {
		t.Errorf("the same pipeline resubmitted to its job server: job %q, %v; want it to follow job %s", same, err, id)
	}
}

func init() {
	register.Function3x2(sumGroupWithSide)
	register.Iter1[int64]()
}

// sumGroupWithSide sums a group, reading a side input.
func sumGroupWithSide(k string, vs func(*int64) bool, side []string) (string, int64) {
	var sum int64
	for v := int64(0); vs(&v); {
		sum += v
	}
	return k, sum + int64(len(side)) - 1
}

// kafkaGroupSidePipeline is kafkaCountPipeline with its sums made by a
// ParDo with a side input, the only reader of a GroupByKey's groups: a plan
// of the later layout (translate.LayoutGroupReaders), whose fingerprint
// covers it.
func kafkaGroupSidePipeline(t *testing.T, in, out string) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	recs := beam.ParDo(s, kafkaReadPlaceholder, beam.Impulse(s))
	groups := beam.GroupByKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), recs))
	sums := beam.ParDo(s, sumGroupWithSide, groups, beam.SideInput{Input: beam.Create(s, "x")})
	beam.ParDo0(s, kafkaWritePlaceholder, beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, keyByWindow, sums)))
	pipe := jobtest.MarshalLoopback(t, p, loopback.EnvironmentConfig, workerBin)
	withCountKafkaIO(t, pipe, in, out)
	return pipe
}

// TestSameLayoutJoins: a pipeline of a later layout, resubmitted under its
// running application id, is the same pipeline: its job server's client
// follows the running job, and another job server and a worker join the
// application (the fingerprints all compute cover the layout alike).
func TestSameLayoutJoins(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	if plan, err := translate.Translate(kafkaGroupSidePipeline(t, "in", "out"), translate.Options{}); err != nil || plan.Layout != translate.LayoutGroupReaders {
		t.Fatalf("the pipeline's plan: layout %v, %v; want %d", plan.Layout, err, translate.LayoutGroupReaders)
	}
	app := runningApp(ctx, t, "layout", kafkaGroupSidePipeline)
	bootstrap, appID, in, out, opts, id := app.bootstrap, app.appID, app.in, app.out, app.opts, app.id
	same, err := submit(ctx, t, ksrunner, kafkaGroupSidePipeline(t, in, out), opts)
	if err != nil || same != id {
		t.Errorf("the same pipeline resubmitted to its job server: job %q, %v; want it to follow job %s", same, err, id)
	}
	opts2 := host.DefaultOptions()
	opts2.BootstrapServers = bootstrap
	_, client2 := startServer(t, opts2)
	joined, err := submit(ctx, t, client2, kafkaGroupSidePipeline(t, in, out), opts)
	if err != nil {
		t.Fatalf("the same pipeline submitted to another job server: %v; want it to join the application", err)
	}
	t.Cleanup(func() { client2.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: joined}) })
	// A worker reads the job from the pipeline topic, with its layout,
	// and lays the pipeline out alike (host.checkLayout).
	startWorkerInProcess(ctx, t, appID, bootstrap)
	for deadline := time.Now().Add(60 * time.Second); len(memberTasks(ctx, t, bootstrap, appID)) < 3; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group has %d members 60s after the second job server and a worker joined, want 3", len(memberTasks(ctx, t, bootstrap, appID)))
		}
	}
}

// TestWorkerLeavesOnStop: a worker on a state_dir (a static member of the
// application's group) started with leave_group_on_stop leaves the group
// when it stops, so the job server takes its tasks at once, not after
// session_timeout_ms (45 s here), as for a process stopped for good; the
// output stays exact across the handover.
func TestWorkerLeavesOnStop(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	const partitions, n = 4, 400
	in, out := countTopics(t, bootstrap, "lin", partitions)
	data := newCountData(n, partitions)
	want1, want2 := data.halves(t)
	appID := kafkatest.UniqueName(t, "leave")
	data.produce(ctx, t, bootstrap, in, data.recs[:n/2])
	id, err := submit(ctx, t, ksrunner, kafkaCountPipeline(t, in, out), map[string]string{
		"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2",
		"source_idle_timeout_ms": "3600000", "session_timeout_ms": "45000",
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	kafkatest.CheckCounts(t, "before the worker", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want1)), want1)

	w, err := host.NewWorker(host.WorkerConfig{ApplicationID: appID, BootstrapServers: bootstrap, StateDir: t.TempDir(), Logger: testLogger()}, host.WithLeaveGroupOnStop(true))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan struct{})
	var runErr error
	go func() { runErr = w.Run(wctx); close(workerDone) }()
	t.Cleanup(func() { stopWorker(); <-workerDone })
	total := 0
	for _, n := range waitBusyMembers(ctx, t, bootstrap, appID, 2, nil) {
		total += n
	}

	stopped := time.Now()
	stopWorker()
	<-workerDone
	if runErr != nil {
		t.Fatalf("the worker's Run: %v", runErr)
	}
	for deadline := stopped.Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		members := memberTasks(ctx, t, bootstrap, appID)
		if len(members) == 1 && slices.Collect(maps.Values(members))[0] == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group has members %v 20s after the worker stopped, want the job server alone with all %d partitions (the session lasts 45s)", members, total)
		}
	}
	t.Logf("the job server held all %d partitions %v after the worker stopped", total, time.Since(stopped).Round(time.Millisecond))
	data.produce(ctx, t, bootstrap, in, data.recs[n/2:])
	kafkatest.CheckCounts(t, "after the worker left", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want2)), want2)
}
