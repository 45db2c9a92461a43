// Package jobtest runs Beam Go SDK pipelines on an in-process ksrunner job
// server for tests: LOOPBACK workers in the test process, an embedded
// broker, and a Job API client that submits with explicit pipeline options
// (as the Go SDK sends its flags) without touching the SDK's global flags.
package jobtest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/container/tools"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/runnerlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/internal/status"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// Env is a job server with LOOPBACK workers in this process.
type Env struct {
	Client    jobpb.JobServiceClient
	loopback  *extworker.Loopback
	workerBin string
	// statusURL is the job server's status page, which a job that does
	// not end in time has its tasks described from.
	statusURL string
	stop      []func()
}

// Start starts a job server with the given defaults. Call it from TestMain
// after flag.Parse and beam.Init; Close it before exiting. With the embedded
// broker in opts and KSRUNNER_TEST_BOOTSTRAP set, jobs run on that real
// broker instead.
func Start(opts host.Options, serverOpts ...host.ServerOption) (*Env, error) {
	if b := os.Getenv(kafkatest.EnvBootstrap); b != "" && opts.BootstrapServers == "embedded" {
		opts.BootstrapServers = b
	}
	e := &Env{}
	var err error
	if e.loopback, err = extworker.StartLoopback(context.Background(), 0); err != nil {
		return nil, err
	}
	e.stop = append(e.stop, func() { e.loopback.Stop(context.Background()) })
	f, err := os.CreateTemp("", "jobtest-worker-")
	if err != nil {
		e.Close()
		return nil, err
	}
	f.Close()
	e.workerBin = f.Name()
	e.stop = append(e.stop, func() { os.Remove(e.workerBin) })
	var out io.Writer = io.Discard
	if os.Getenv("KSRUNNER_DEBUG") != "" {
		out = os.Stderr
	}
	// A status page (the caller's options may replace it), for describing a
	// job that does not end in time.
	serverOpts = append([]host.ServerOption{host.WithStatus(host.StatusConfig{Addr: "127.0.0.1:0"})}, serverOpts...)
	srv, err := host.NewJobServer("127.0.0.1:0", opts, slog.New(slog.NewTextHandler(out, nil)), serverOpts...)
	if err != nil {
		e.Close()
		return nil, err
	}
	e.statusURL = srv.StatusURL()
	go srv.Serve()
	e.stop = append(e.stop, srv.Stop)
	cc, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.Close()
		return nil, err
	}
	e.stop = append(e.stop, func() { cc.Close() })
	e.Client = jobpb.NewJobServiceClient(cc)
	return e, nil
}

// Serve serves srv until the test ends (then stops it) and returns a
// client of its Job API.
func Serve(t testing.TB, srv *host.JobServer) jobpb.JobServiceClient {
	t.Helper()
	go srv.Serve()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return jobpb.NewJobServiceClient(cc)
}

// Close stops everything Start started.
func (e *Env) Close() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
}

// Marshal turns p into the pipeline proto the SDK would submit with
// --environment_type=LOOPBACK.
func (e *Env) Marshal(t testing.TB, p *beam.Pipeline) *pipepb.Pipeline {
	t.Helper()
	return MarshalLoopback(t, p, e.loopback.EnvironmentConfig, e.workerBin)
}

// MarshalLoopback turns p into the pipeline proto the SDK would submit with
// --environment_type=LOOPBACK to the worker pool whose environment config
// pool gives (extworker's EnvironmentConfig), with workerBin as the Go
// worker binary artifact.
func MarshalLoopback(t testing.TB, p *beam.Pipeline, pool func(context.Context) string, workerBin string) *pipepb.Pipeline {
	t.Helper()
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	env, err := graphx.CreateEnvironment(context.Background(), "beam:env:external:v1", pool)
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

// Submit prepares, stages and runs pipe with the given Go SDK pipeline
// options. It returns the job id, or the error of Prepare, staging or Run.
func (e *Env) Submit(ctx context.Context, t testing.TB, pipe *pipepb.Pipeline, opts map[string]string) (string, error) {
	t.Helper()
	return Submit(ctx, t, e.Client, e.workerBin, pipe, opts)
}

// Submit prepares, stages (workerBin as the worker artifact) and runs pipe
// on the job server behind client, with the given Go SDK pipeline options
// sent as the SDK sends its flags. It returns the job id, or the error of
// Prepare, staging or Run.
func Submit(ctx context.Context, t testing.TB, client jobpb.JobServiceClient, workerBin string, pipe *pipepb.Pipeline, opts map[string]string) (string, error) {
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

// Result is how a job ended, as its message stream told it.
type Result struct {
	State    jobpb.JobState_Enum
	Messages []string // every message
	Errors   []string // messages of importance ERROR
}

func terminal(s jobpb.JobState_Enum) bool {
	switch s {
	case jobpb.JobState_DONE, jobpb.JobState_FAILED, jobpb.JobState_CANCELLED, jobpb.JobState_DRAINED, jobpb.JobState_UPDATED:
		return true
	}
	return false
}

// Wait follows the job's message stream until a terminal state (and, after
// FAILED, the error message that follows it).
func (e *Env) Wait(ctx context.Context, t testing.TB, jobID string) Result {
	t.Helper()
	r, err := Wait(ctx, e.Client, jobID)
	if err != nil {
		t.Fatalf("%v; its tasks: %s", err, e.describeTasks(jobID))
	}
	return r
}

// describeTasks is what the status page says of job's tasks: each one's
// output watermark and input lag, to tell which holds a job up.
func (e *Env) describeTasks(jobID string) string {
	if e.statusURL == "" {
		return "(no status page)"
	}
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(e.statusURL + "api/jobs/" + jobID)
	if err != nil {
		return fmt.Sprintf("(status page: %v)", err)
	}
	defer resp.Body.Close()
	var j status.Job
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return fmt.Sprintf("(status page: %s: %v)", resp.Status, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "commits %d, aborts %d;", j.Commits, j.Aborts)
	for _, tk := range j.Tasks {
		wm := "none"
		if tk.HasWatermark {
			switch {
			case tk.Watermark >= 9223372036854775:
				wm = "+inf"
			case tk.Watermark <= -9223372036854775:
				wm = "-inf"
			default:
				wm = time.UnixMilli(tk.Watermark).UTC().Format(time.RFC3339Nano)
			}
		}
		fmt.Fprintf(&b, " [%d/%d %s: watermark %s, committed %d of %d]", tk.SubTopology, tk.Partition, tk.Topic, wm, tk.Committed, tk.End)
	}
	return b.String()
}

// Wait follows the job's message stream on client until a terminal state,
// then reads briefly on for the error message that may follow FAILED. It
// does not touch a testing.T, so it may run on any goroutine.
func Wait(ctx context.Context, client jobpb.JobServiceClient, jobID string) (Result, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.GetMessageStream(sctx, &jobpb.JobMessagesRequest{JobId: jobID})
	if err != nil {
		return Result{}, fmt.Errorf("job %s: message stream: %w", jobID, err)
	}
	var r Result
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
				r.State = s.GetState()
				if terminal(r.State) && (r.State != jobpb.JobState_FAILED || len(r.Errors) > 0) {
					return r, nil
				}
				if r.State == jobpb.JobState_FAILED && grace == nil {
					grace = time.After(5 * time.Second)
				}
			}
			if mr := m.GetMessageResponse(); mr != nil {
				r.Messages = append(r.Messages, mr.GetMessageText())
				if mr.GetImportance() >= jobpb.JobMessage_JOB_MESSAGE_ERROR {
					r.Errors = append(r.Errors, mr.GetMessageText())
					if r.State == jobpb.JobState_FAILED {
						return r, nil
					}
				}
			}
		case err := <-errc:
			if !terminal(r.State) {
				return r, fmt.Errorf("job %s: message stream ended in state %v: %v", jobID, r.State, err)
			}
			return r, nil
		case <-grace:
			return r, nil
		case <-ctx.Done():
			st, _ := client.GetState(context.Background(), &jobpb.GetJobStateRequest{JobId: jobID})
			return r, fmt.Errorf("job %s: %v waiting for a terminal state; GetState says %v; its last messages: %q", jobID, ctx.Err(), st.GetState(), r.Messages[max(0, len(r.Messages)-10):])
		}
	}
}

// Run submits pipe and waits for the job to end.
func (e *Env) Run(ctx context.Context, t testing.TB, pipe *pipepb.Pipeline, opts map[string]string) (string, Result) {
	t.Helper()
	id, err := e.Submit(ctx, t, pipe, opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return id, e.Wait(ctx, t, id)
}

// BuildWASM builds the Go guest package pkg (an import path or a path
// relative to the test's directory) as a WASI reactor into dir.
func BuildWASM(t testing.TB, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, path.Base(pkg)+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=", "GOWASM=satconv,signext")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// Main is the body of a test package's TestMain: it parses the flags,
// initializes Beam, starts an Env with opts into *env, runs the tests,
// closes the Env and exits with the tests' code.
func Main(m *testing.M, opts host.Options, env **Env, serverOpts ...host.ServerOption) {
	flag.Parse()
	beam.Init()
	e, err := Start(opts, serverOpts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	e.Close()
	os.Exit(code)
}

// Hooks lets each test of a package install its own host.TestHooks on the
// package's one job server: pass ServerOption to Start or Main, then Set in
// a test. Only one test at a time may Set.
type Hooks struct {
	cur atomic.Pointer[host.TestHooks]
}

// Set installs h until the returned func is called.
func (k *Hooks) Set(h host.TestHooks) (restore func()) {
	old := k.cur.Swap(&h)
	return func() { k.cur.Store(old) }
}

// ServerOption installs hooks on a server that call the ones Set.
func (k *Hooks) ServerOption() host.ServerOption {
	return host.WithTestHooks(host.TestHooks{
		BeforeCommit: func(records int) error {
			if h := k.cur.Load(); h != nil && h.BeforeCommit != nil {
				return h.BeforeCommit(records)
			}
			return nil
		},
		EveryCycle: func() bool {
			h := k.cur.Load()
			return h != nil && h.EveryCycle != nil && h.EveryCycle()
		},
		Restored: func(sub int, partition int32, records int) {
			if h := k.cur.Load(); h != nil && h.Restored != nil {
				h.Restored(sub, partition, records)
			}
		},
		Assigned: func(sub int, partition int32) {
			if h := k.cur.Load(); h != nil && h.Assigned != nil {
				h.Assigned(sub, partition)
			}
		},
		MaxPollRecords: func() int {
			if h := k.cur.Load(); h != nil && h.MaxPollRecords != nil {
				return h.MaxPollRecords()
			}
			return 0
		},
		Now: func() time.Time {
			if h := k.cur.Load(); h != nil && h.Now != nil {
				return h.Now()
			}
			return time.Now()
		},
	})
}
