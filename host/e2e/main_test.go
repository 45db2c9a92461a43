// Package e2e holds ksrunner's end-to-end tests: real Beam Go SDK pipelines
// submitted through the Beam Job API to a ksrunner job server (LOOPBACK
// workers in this process), with outputs compared to Prism's on the same
// pipeline.
//
// The tests do not touch the Go SDK's global flags (jobopts): they marshal
// the pipeline, prepare, stage, run and follow the job with their own Job
// API client, so every run names its job server and options explicitly.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/jobtest"
)

var (
	loopback  *extworker.Loopback    // the SDK worker pool every job's workers start in
	workerBin string                 // an empty file staged as the (unused) worker binary
	ksrunner  jobpb.JobServiceClient // ksrunner job server, default options (embedded broker)
	reference jobpb.JobServiceClient // Prism job server

	serverStatusURL string // the shared job server's status page, ending in /
)

func TestMain(m *testing.M) {
	flag.Parse()
	beam.Init()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "e2e setup:", err); return 1 }
	defer removeReadFilesInput()

	var err error
	if loopback, err = extworker.StartLoopback(ctx, 0); err != nil {
		return fail(err)
	}
	defer loopback.Stop(context.Background())
	f, err := os.CreateTemp("", "e2e-worker-")
	if err != nil {
		return fail(err)
	}
	f.Close()
	workerBin = f.Name()
	defer os.Remove(workerBin)

	var out io.Writer = serverLog
	if os.Getenv("KSRUNNER_DEBUG") != "" {
		out = io.MultiWriter(os.Stderr, serverLog)
	}
	// The status API, for a failed fault test's report (jobStatus).
	srv, err := host.NewJobServer("127.0.0.1:0", host.DefaultOptions(), slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})),
		host.WithStatus(host.StatusConfig{Addr: "127.0.0.1:0"}))
	if err != nil {
		return fail(err)
	}
	serverStatusURL = srv.StatusURL()
	go srv.Serve()
	defer srv.Stop()
	cc, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fail(err)
	}
	defer cc.Close()
	ksrunner = jobpb.NewJobServiceClient(cc)

	if reference, err = prism.CreateJobServer(ctx, prism.Options{}); err != nil {
		return fail(err)
	}
	return m.Run()
}

// testContext is the test's deadline.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// marshal turns p into the pipeline proto the SDK would submit with
// --environment_type=LOOPBACK.
func marshal(t *testing.T, p *beam.Pipeline) *pipepb.Pipeline {
	t.Helper()
	return jobtest.MarshalLoopback(t, p, loopback.EnvironmentConfig, workerBin)
}

// submit prepares, stages and runs pipe on the job server behind client.
func submit(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, opts map[string]string) (string, error) {
	t.Helper()
	return jobtest.Submit(ctx, t, client, workerBin, pipe, opts)
}

// wait follows the job's message stream until it ends (jobtest.Wait).
func wait(ctx context.Context, client jobpb.JobServiceClient, jobID string) (jobtest.Result, error) {
	return jobtest.Wait(ctx, client, jobID)
}

// runDone submits pipe and fails the test unless the job ends DONE.
func runDone(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, opts map[string]string) string {
	t.Helper()
	id, _ := runEnded(ctx, t, client, pipe, opts, jobpb.JobState_DONE)
	return id
}

// runFailed runs pipe and returns its errors, failing the test unless it
// ends FAILED.
func runFailed(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, opts map[string]string) []string {
	t.Helper()
	_, r := runEnded(ctx, t, client, pipe, opts, jobpb.JobState_FAILED)
	return r.Errors
}

// runEnded submits pipe and waits for its end, failing the test unless
// the job ends in state want.
func runEnded(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, opts map[string]string, want jobpb.JobState_Enum) (string, jobtest.Result) {
	t.Helper()
	id, err := submit(ctx, t, client, pipe, opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	r, err := wait(ctx, client, id)
	if err != nil {
		if client == ksrunner {
			// A job that did not end: what held it up (ci25 and one run
			// of 42 since had a job stay RUNNING after its output).
			t.Logf("job %s: the job server's log (info; its last 300 lines for the job):\n%s", id, strings.Join(serverLog.jobLines(id, 300), "\n"))
			t.Logf("job %s: the status API's view (api/jobs/%s):\n%s", id, id, jobStatus(id))
			t.Logf("job %s: the task statuses its done check read (debug; the last 100):\n%s", id, strings.Join(serverLog.filter(func(l string) bool {
				return strings.Contains(l, "job="+id) && strings.Contains(l, `msg="task status"`)
			}, 100), "\n"))
			if bs := opts["bootstrap_servers"]; bs != "" && opts["application_id"] != "" {
				t.Logf("the application's status topic on %s:\n%s", bs, statusTopicOffsets(bs, opts["application_id"]))
				t.Logf("open transactions on %s:\n%s", bs, openTransactions(bs, opts["application_id"]))
			}
			t.Logf("the runtime's goroutines now (every job's), to show where a stalled instance waits:\n%s", runtimeGoroutines())
		}
		t.Fatal(err)
	}
	if r.State != want {
		t.Fatalf("job %s ended %v, want %v; errors: %q", id, r.State, want, r.Errors)
	}
	return id, r
}
