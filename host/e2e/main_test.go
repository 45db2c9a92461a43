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

	"github.com/apache/beam/sdks/v2/go/container/tools"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/runnerlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
)

var (
	loopback  *extworker.Loopback    // the SDK worker pool every job's workers start in
	workerBin string                 // an empty file staged as the (unused) worker binary
	ksrunner  jobpb.JobServiceClient // ksrunner job server, default options (embedded broker)
	reference jobpb.JobServiceClient // Prism job server
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

	var out io.Writer = io.Discard
	if os.Getenv("KSRUNNER_DEBUG") != "" {
		out = os.Stderr
	}
	srv, err := host.NewJobServer("127.0.0.1:0", host.DefaultOptions(), slog.New(slog.NewTextHandler(out, nil)))
	if err != nil {
		return fail(err)
	}
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
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	env, err := graphx.CreateEnvironment(context.Background(), "beam:env:external:v1", loopback.EnvironmentConfig)
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	if err := runnerlib.UpdateGoEnvironmentWorker(workerBin, pipe); err != nil {
		t.Fatal(err)
	}
	return pipe
}

// submit prepares, stages and runs pipe on the job server behind client with
// the given Go SDK pipeline options (sent as the SDK sends its flags). It
// returns the job id, or the error of Prepare, staging or Run.
func submit(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, opts map[string]string) (string, error) {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	st, err := tools.OptionsToProto(runtime.RawOptionsWrapper{
		Options:     runtime.RawOptions{Options: opts},
		AppName:     name,
		Experiments: []string{"beam_fn_api"},
	})
	if err != nil {
		t.Fatal(err)
	}
	prep, err := client.Prepare(ctx, &jobpb.PrepareJobRequest{Pipeline: pipe, PipelineOptions: st, JobName: name})
	if err != nil {
		return "", fmt.Errorf("prepare: %w", err)
	}
	token, err := runnerlib.Stage(ctx, prep.GetPreparationId(), prep.GetArtifactStagingEndpoint().GetUrl(), workerBin, prep.GetStagingSessionToken())
	if err != nil {
		return "", fmt.Errorf("stage: %w", err)
	}
	resp, err := client.Run(ctx, &jobpb.RunJobRequest{PreparationId: prep.GetPreparationId(), RetrievalToken: token})
	if err != nil {
		return "", err
	}
	return resp.GetJobId(), nil
}

// result is how a job ended, as its message stream told it.
type result struct {
	state  jobpb.JobState_Enum
	errors []string // messages of importance ERROR
}

func terminal(s jobpb.JobState_Enum) bool {
	switch s {
	case jobpb.JobState_DONE, jobpb.JobState_FAILED, jobpb.JobState_CANCELLED, jobpb.JobState_DRAINED, jobpb.JobState_UPDATED:
		return true
	}
	return false
}

// wait follows the job's message stream until a terminal state, then keeps
// reading briefly for the error message that may follow a FAILED state. It
// does not touch t, so it may run on any goroutine.
func wait(ctx context.Context, client jobpb.JobServiceClient, jobID string) (result, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.GetMessageStream(sctx, &jobpb.JobMessagesRequest{JobId: jobID})
	if err != nil {
		return result{}, fmt.Errorf("job %s: message stream: %w", jobID, err)
	}
	var r result
	var grace <-chan time.Time
	msgs := make(chan *jobpb.JobMessagesResponse)
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case msgs <- m:
			case <-sctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case m := <-msgs:
			if s := m.GetStateResponse(); s != nil {
				r.state = s.GetState()
				if terminal(r.state) && (r.state != jobpb.JobState_FAILED || len(r.errors) > 0) {
					return r, nil
				}
				if r.state == jobpb.JobState_FAILED && grace == nil {
					grace = time.After(5 * time.Second)
				}
			}
			if mr := m.GetMessageResponse(); mr != nil && mr.GetImportance() >= jobpb.JobMessage_JOB_MESSAGE_ERROR {
				r.errors = append(r.errors, mr.GetMessageText())
				if r.state == jobpb.JobState_FAILED {
					return r, nil
				}
			}
		case err := <-errc:
			if !terminal(r.state) {
				return r, fmt.Errorf("job %s: message stream ended in state %v: %v", jobID, r.state, err)
			}
			return r, nil
		case <-grace:
			return r, nil
		case <-ctx.Done():
			st, _ := client.GetState(context.Background(), &jobpb.GetJobStateRequest{JobId: jobID})
			return r, fmt.Errorf("job %s: %v waiting for a terminal state; GetState says %v", jobID, ctx.Err(), st.GetState())
		}
	}
}

// runDone submits pipe and fails the test unless the job ends DONE.
func runDone(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, opts map[string]string) string {
	t.Helper()
	id, err := submit(ctx, t, client, pipe, opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	r, err := wait(ctx, client, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.state != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.state, r.errors)
	}
	return id
}
