package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/host/internal/application"
	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/runtime"
	"github.com/ksrunner/ksrunner/host/internal/status"
)

// WorkerConfig is how a Worker joins an application.
type WorkerConfig struct {
	// ApplicationID is the application to join (required).
	ApplicationID string
	// BootstrapServers is the application's Kafka cluster (required; a
	// broker list).
	BootstrapServers string
	// StateDir holds the worker's store and its identity (stable
	// transactional id and group membership across restarts); "": a
	// temporary directory and a new identity per run.
	StateDir string
	// SDKWorkerPools gives environments by id: the address of a Beam SDK
	// worker pool (a Python `worker_pool_main`, a Go SDK worker pool) that
	// runs the stages of that environment instead of the one the pipeline
	// names.
	SDKWorkerPools map[string]string
	// BrokerUnavailableTimeout is how long the worker goes on without
	// reading its application's pipeline topic (the brokers out of reach)
	// before Run fails, naming them (option broker_unavailable_timeout_ms);
	// zero: runtime.DefaultBrokerUnavailableTimeout. The jobs it runs keep
	// their own option, from the pipeline topic.
	BrokerUnavailableTimeout time.Duration
	Logger                   *slog.Logger
}

// Worker runs one more process of an application a job server started: it
// reads the job from the application's pipeline topic, runs its share of
// the tasks as a member of the application's consumer group, and follows
// the topic (stops the job when it is cancelled, runs a replacement).
//
// A harness stage runs in the environment SDKWorkerPools gives for it, or
// else the one the pipeline names (an EXTERNAL pool it can reach, such as a
// LOOPBACK pool on the same machine, or a PROCESS command that exists
// here); a stage it cannot start an environment for is left to the
// application's other processes: the worker takes no tasks of its
// sub-topology. A pipeline whose stages are all WASM needs nothing else.
type Worker struct {
	cfg    WorkerConfig
	server serverConfig
	logger *slog.Logger

	mu  sync.Mutex
	job *job // the latest job run; nil before the first

	status *status.Server // nil: no status page (WithStatus)
}

// StatusURL is the address of the worker's status page and /metrics (""
// without WithStatus).
func (w *Worker) StatusURL() string {
	if w.status == nil {
		return ""
	}
	return w.status.URL()
}

// Job is the id and state of the job the worker runs or ran last ("" and
// UNSPECIFIED before the first).
func (w *Worker) Job() (id string, state jobpb.JobState_Enum) {
	j := w.current()
	if j == nil {
		return "", jobpb.JobState_UNSPECIFIED
	}
	return j.ID(), j.State()
}

// current is the job the worker runs (nil: none).
func (w *Worker) current() *job {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.job
}

// NewWorker checks cfg. Run starts the work.
func NewWorker(cfg WorkerConfig, options ...ServerOption) (*Worker, error) {
	switch {
	case cfg.ApplicationID == "":
		return nil, errors.New("worker: option application_id is required (the application to join)")
	case cfg.BootstrapServers == "" || cfg.BootstrapServers == "embedded":
		return nil, fmt.Errorf("worker: option bootstrap_servers: %q: a worker joins an application on its Kafka cluster: give its brokers (an embedded broker of another process is reachable by its address)", cfg.BootstrapServers)
	}
	for env, addr := range cfg.SDKWorkerPools {
		if env == "" || addr == "" {
			return nil, fmt.Errorf("worker: option sdk_worker_pool: %q=%q: want ENVIRONMENT_ID=HOST:PORT", env, addr)
		}
	}
	if err := checkStateDir("option", cfg.StateDir); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if ms := cfg.BrokerUnavailableTimeout.Milliseconds(); cfg.BrokerUnavailableTimeout != 0 && ms < MinBrokerUnavailableTimeoutMs {
		return nil, fmt.Errorf("worker: option broker_unavailable_timeout_ms: %d, must be at least %d", ms, MinBrokerUnavailableTimeoutMs)
	}
	if cfg.BrokerUnavailableTimeout == 0 {
		cfg.BrokerUnavailableTimeout = runtime.DefaultBrokerUnavailableTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{cfg: cfg, logger: cfg.Logger.With("application_id", cfg.ApplicationID)}
	for _, o := range options {
		o(&w.server)
	}
	kafka, err := w.server.kafkaConfig.Load()
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.server.kafka = kafka
	if w.server.status != nil {
		if w.status, err = startStatus(workerStatus{w}, &w.server, w.logger); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	return w, nil
}

// Run runs the application's job whenever it runs, until ctx ends. The
// status server (WithStatus) stops when it returns: call Run once.
func (w *Worker) Run(ctx context.Context) (err error) {
	if w.status != nil {
		defer w.status.Close()
	}
	defer func() { err = kafkaconn.Explain(err, w.cfg.BootstrapServers, w.server.kafka) }()
	t, err := application.Open(ctx, w.cfg.BootstrapServers, w.server.kafka, w.cfg.ApplicationID, 0, false)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer t.Close()
	dir, err := os.MkdirTemp("", "ksrunner-worker-")
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer os.RemoveAll(dir)
	w.server.stageDir = dir
	w.logger.Info("worker: following the pipeline topic", "topic", t.Name(), "bootstrap_servers", w.cfg.BootstrapServers)
	err = application.Follow(ctx, t, application.FollowConfig{Run: w.runJob, Logger: w.logger, Unavailable: w.cfg.BrokerUnavailableTimeout})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

func (w *Worker) runJob(ctx context.Context, m *application.Manifest, s *application.Spec) error {
	dir, err := os.MkdirTemp(w.server.stageDir, "job-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	spec, err := specFromTopic(m, s, originWorker, dir)
	if err != nil {
		return err
	}
	spec.Options.BootstrapServers = w.cfg.BootstrapServers
	spec.Options.StateDir = w.cfg.StateDir
	spec.StageDir = dir
	if err := useWorkerPools(spec.Pipeline, w.cfg.SDKWorkerPools); err != nil {
		return err
	}
	// The job's log lines name the job and, in its start line, the
	// application: the worker's logger (which names the application on
	// every line) would repeat it.
	j, err := startJob(ctx, spec, w.cfg.Logger, &w.server)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.job = j
	w.mu.Unlock()
	select {
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), application.ErrEnded) {
			j.end() // cancelled or draining elsewhere: leave the group too
		} else {
			j.stopProcess()
		}
	case <-j.done:
	}
	j.Wait()
	if errors.Is(j.err, errCancelled) && errors.Is(context.Cause(ctx), application.ErrEnded) {
		return nil
	}
	if errors.Is(j.err, errStopped) {
		return nil
	}
	return j.err
}

// specFromTopic is the job of a pipeline topic as a process other than the
// submitting job server runs it; its artifacts are written under dir.
func specFromTopic(m *application.Manifest, s *application.Spec, origin jobOrigin, dir string) (jobSpec, error) {
	var opts Options
	if err := json.Unmarshal(s.Options, &opts); err != nil {
		return jobSpec{}, fmt.Errorf("job %s: its options on the pipeline topic: %w", m.JobID, err)
	}
	p, err := s.Materialize(dir)
	if err != nil {
		return jobSpec{}, fmt.Errorf("job %s: %w", m.JobID, err)
	}
	return jobSpec{ID: s.JobID, Name: s.JobName, Pipeline: p, RawOptions: s.RawOptions, Options: opts, Origin: origin, Modules: s.Modules, Layout: s.Layout, PublishedAs: m.JobID}, nil
}

// useWorkerPools makes each environment of pools an EXTERNAL one at the
// given worker pool address.
func useWorkerPools(p *pipepb.Pipeline, pools map[string]string) error {
	envs := p.GetComponents().GetEnvironments()
	for id, addr := range pools {
		env := envs[id]
		if env == nil {
			return fmt.Errorf("option sdk_worker_pool: environment %q is not one of the pipeline's (%s)", id, strings.Join(slices.Sorted(maps.Keys(envs)), ", "))
		}
		payload, err := proto.Marshal(&pipepb.ExternalPayload{Endpoint: &pipepb.ApiServiceDescriptor{Url: addr}})
		if err != nil {
			return err
		}
		env.Urn, env.Payload = harness.URNEnvExternal, payload
	}
	return nil
}

// Resume resumes the applications whose stores this job server keeps in
// its state_dir: each one whose pipeline topic (on the server's
// bootstrap_servers) says it runs is started again, without a
// resubmission, and listed by GetJobs. It returns the ids of the jobs it
// started. A server without a state_dir, or on the embedded broker (which
// keeps nothing across restarts), has nothing to resume.
func (s *JobServer) Resume(ctx context.Context) ([]string, error) {
	root, brokers := s.defaults.StateDir, s.defaults.BootstrapServers
	if root == "" || brokers == "embedded" {
		return nil, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("resume: state_dir %s: %w", root, err)
	}
	var started []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !runtime.HasIdentity(filepath.Join(root, e.Name())) {
			continue
		}
		id, err := s.resume(ctx, e.Name())
		if err != nil {
			s.logger.Error("resume: application "+e.Name(), "error", err)
			errs = append(errs, fmt.Errorf("application %s: %w", e.Name(), err))
			continue
		}
		if id != "" {
			started = append(started, id)
		}
	}
	return started, errors.Join(errs...)
}

// resume starts the job of application app if its pipeline topic says it
// runs or drains; "" when there is nothing to resume. A draining one was
// drained in a process that stopped before the drain was done: its job
// drains again here (its reads stop where the application's committed
// offsets are, every window fires) and ends DONE, as the drain would have.
func (s *JobServer) resume(ctx context.Context, app string) (string, error) {
	t, err := application.Open(ctx, s.defaults.BootstrapServers, s.cfg.kafka, app, 0, false)
	if err != nil {
		return "", err
	}
	defer t.Close()
	m, as, err := t.Load(ctx)
	if err != nil {
		return "", err
	}
	if m == nil || m.State != application.Running && m.State != application.Draining {
		state := "no pipeline topic"
		if m != nil {
			state = string(m.State)
		}
		s.logger.Info("resume: nothing to resume", "application_id", app, "state", state)
		return "", nil
	}
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprintf("%s-%d", sanitizeID(as.JobName), s.nextID)
	s.mu.Unlock()
	dir := filepath.Join(s.stageDir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	spec, err := specFromTopic(m, as, originResumed, dir)
	if err != nil {
		return "", err
	}
	spec.ID = id
	spec.Options.BootstrapServers = s.defaults.BootstrapServers
	spec.Options.StateDir = s.defaults.StateDir
	spec.StageDir = dir
	j, err := startJob(context.Background(), spec, s.logger, &s.cfg)
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("resumed application %s from its pipeline topic %s (job %s, %q, first submitted as %s by %s)", app, t.Name(), id, as.JobName, m.JobID, m.By)
	if m.State == application.Draining {
		msg = fmt.Sprintf("resumed application %s from its pipeline topic %s (job %s, %q, first submitted as %s), whose drain (recorded at %s by %s) had not finished: the drain goes on here", app, t.Name(), id, as.JobName, m.JobID, m.Written.Format(time.RFC3339), m.By)
	}
	s.logger.Info(msg)
	j.events.message(jobpb.JobMessage_JOB_MESSAGE_BASIC, msg)
	s.register(j)
	if m.State == application.Draining {
		j.Drain()
	}
	return id, nil
}
