package kafkastreams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/harness/init" // the binary can run as a worker
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/metricsx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/xlangx"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/runnerlib"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/vet"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/grpcx"

	"github.com/ksrunner/ksrunner/host"
	_ "github.com/ksrunner/ksrunner/host/kafkaio" // the in-process KafkaIO expansion
)

// Name is the runner's name, and PythonName the name the Python SDK gives
// it; both are registered.
const (
	Name       = "kafkastreams"
	PythonName = "KafkaStreamsRunner"
)

func init() {
	beam.RegisterRunner(Name, Execute)
	beam.RegisterRunner(PythonName, Execute)
	defineFlags()
}

// console is where the job's states and messages are shown (slog's
// default logger: the terminal, as the SDK logs there), and serverLog where
// an in-process job server logs; tests replace them.
var (
	console             = func() *slog.Logger { return slog.Default() }
	serverLog io.Writer = os.Stderr
)

// Execute runs p on ksrunner: on the job server at --endpoint, or on one it
// starts in this process (see the package documentation). It returns once
// the job ended (DONE, CANCELLED, or DRAINED from a job server that ends
// drained jobs so; a FAILED job is an error with
// its last error message), or once it is submitted with --async.
func Execute(ctx context.Context, p *beam.Pipeline) (beam.PipelineResult, error) {
	if !beam.Initialized() {
		panic("Beam has not been initialized. Call beam.Init() before pipeline construction.")
	}
	if *jobopts.EnvironmentType == "" {
		// The SDK's default is DOCKER, which ksrunner does not run; the
		// SDK workers run in this program.
		*jobopts.EnvironmentType = "LOOPBACK"
	}
	endpoint := *jobopts.Endpoint
	if endpoint == "" {
		if *jobopts.Async {
			return nil, fmt.Errorf("ksrunner: --async needs --endpoint: the in-process job server stops when the pipeline's Run returns")
		}
		srv, err := startInProcess()
		if err != nil {
			return nil, err
		}
		defer func() {
			srv.Stop()
			console().Debug("ksrunner: in-process job server stopped")
		}()
		endpoint = srv.Endpoint()
	}
	return submit(ctx, p, endpoint)
}

// startInProcess starts a job server in this process, on a free port, with
// its status page (statusPort), and says where both are, once.
func startInProcess() (*host.JobServer, error) {
	defaults, err := serverDefaults(os.Environ())
	if err != nil {
		return nil, fmt.Errorf("ksrunner: %w", err)
	}
	level, err := serverLogLevel(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("ksrunner: %w", err)
	}
	port, explicit, err := statusPort(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("ksrunner: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(serverLog, &slog.HandlerOptions{Level: level}))
	start := func(statusAddr string) (*host.JobServer, error) {
		opts := []host.ServerOption{host.WithMessagesOnly()}
		if statusAddr != "" {
			opts = append(opts, host.WithStatus(host.StatusConfig{Addr: statusAddr}))
		}
		return host.NewJobServer("localhost:0", defaults, logger, opts...)
	}
	statusAddr := ""
	if port != 0 {
		statusAddr = net.JoinHostPort("localhost", strconv.Itoa(port))
	}
	srv, err := start(statusAddr)
	statusNote := ""
	if err != nil && !explicit && port != 0 && errors.Is(err, syscall.EADDRINUSE) {
		// The default port is another program's (a `ksrunner jobserver`,
		// another pipeline's run): the page goes elsewhere rather than the
		// run failing.
		statusNote = fmt.Sprintf(" (port %d is in use; %sSTATUS_PORT sets one, 0 none)", port, envPrefix)
		srv, err = start("localhost:0")
	}
	if err != nil {
		if explicit && errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("ksrunner: in-process job server: environment variable %sSTATUS_PORT=%d: the port is in use (0: no status page): %w", envPrefix, port, err)
		}
		return nil, fmt.Errorf("ksrunner: in-process job server: %w", err)
	}
	go srv.Serve()
	broker := defaults.BootstrapServers
	if broker == "embedded" {
		broker = "embedded (in memory only; --bootstrap_servers names a Kafka cluster)"
	}
	attrs := []any{"endpoint", srv.Endpoint(), "bootstrap_servers", broker}
	if u := srv.StatusURL(); u != "" {
		attrs = append(attrs, "status_page", u+statusNote)
	}
	console().Info("ksrunner: in-process job server", attrs...)
	return srv, nil
}

// submit does what the SDK's universal runner does (build the pipeline,
// start the LOOPBACK worker pool, prepare, stage, run), then shows the
// job's message stream on the console until the job ends.
func submit(ctx context.Context, p *beam.Pipeline, endpoint string) (beam.PipelineResult, error) {
	if *jobopts.Strict {
		if _, err := vet.Execute(ctx, p); err != nil {
			return nil, fmt.Errorf("strictness check failed: %w", err)
		}
	}
	edges, _, err := p.Build()
	if err != nil {
		return nil, err
	}
	envURN := jobopts.GetEnvironmentUrn(ctx)
	envConfig := jobopts.GetEnvironmentConfig
	loopback := jobopts.IsLoopback()
	if loopback {
		srv, err := extworker.StartLoopback(ctx, 0)
		if err != nil {
			return nil, err
		}
		defer srv.Stop(ctx)
		envConfig = srv.EnvironmentConfig
	}
	xlangx.ResolveArtifacts(ctx, edges, nil)
	env, err := graphx.CreateEnvironment(ctx, envURN, envConfig)
	if err != nil {
		return nil, fmt.Errorf("generating model pipeline: %w", err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: env, PipelineResourceHints: jobopts.GetPipelineResourceHints()})
	if err != nil {
		return nil, fmt.Errorf("generating model pipeline: %w", err)
	}
	opt := &runnerlib.JobOptions{
		Name:         jobopts.GetJobName(),
		Experiments:  jobopts.GetExperiments(),
		Worker:       *jobopts.WorkerBinary,
		RetainDocker: *jobopts.RetainDockerContainers,
		Parallelism:  *jobopts.Parallelism,
		Loopback:     loopback,
	}
	bin, cleanup, err := workerBinary(ctx, opt)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := runnerlib.UpdateGoEnvironmentWorker(bin, pipe); err != nil {
		return nil, err
	}
	cc, err := grpcx.Dial(ctx, endpoint, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("ksrunner: connecting to the job server at %s: %w", endpoint, err)
	}
	defer cc.Close()
	client := jobpb.NewJobServiceClient(cc)
	prepID, artifacts, token, err := runnerlib.Prepare(ctx, client, pipe, opt)
	if err != nil {
		return nil, fmt.Errorf("ksrunner: job server %s: %w", endpoint, err)
	}
	if token, err = runnerlib.Stage(ctx, prepID, artifacts, bin, token); err != nil {
		return nil, fmt.Errorf("ksrunner: staging the job's artifacts: %w", err)
	}
	jobID, err := runnerlib.Submit(ctx, client, prepID, token)
	if err != nil {
		return nil, fmt.Errorf("ksrunner: job server %s: %w", endpoint, err)
	}
	console().Info("ksrunner: job submitted", "job", jobID, "endpoint", endpoint)
	res := &result{jobID: jobID}
	if *jobopts.Async {
		return res, nil
	}
	err = follow(ctx, client, jobID, console())
	resp, merr := client.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: jobID})
	if merr == nil {
		res.metrics = metricsx.FromMonitoringInfos(pipe, resp.GetMetrics().GetAttempted(), resp.GetMetrics().GetCommitted())
	} else if err == nil {
		err = fmt.Errorf("ksrunner: job %s: reading its metrics: %w", jobID, merr)
	}
	return res, err
}

// workerBinary is the Go worker binary staged with the job, as the
// universal runner picks it: none needed for LOOPBACK (an empty file),
// the --worker_binary, this binary if it can be one, else one compiled now.
func workerBinary(ctx context.Context, opt *runnerlib.JobOptions) (path string, cleanup func(), err error) {
	switch {
	case opt.Worker != "":
		return opt.Worker, func() {}, nil
	case opt.Loopback:
		f, err := os.CreateTemp("", "beamloopbackworker-*")
		if err != nil {
			return "", nil, err
		}
		f.Close()
		return f.Name(), func() { os.Remove(f.Name()) }, nil
	}
	if self, ok := runnerlib.IsWorkerCompatibleBinary(); ok {
		return self, func() {}, nil
	}
	worker, err := runnerlib.BuildTempWorkerBinary(ctx, runnerlib.CompileOpts{})
	if err != nil {
		return "", nil, err
	}
	return worker, func() { os.Remove(worker) }, nil
}

// result is a job's beam.PipelineResult.
type result struct {
	jobID   string
	metrics *metrics.Results
}

func (r *result) JobID() string { return r.jobID }

func (r *result) Metrics() metrics.Results {
	if r.metrics == nil {
		return metrics.Results{}
	}
	return *r.metrics
}
