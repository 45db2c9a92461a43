package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/host/endpoint"
	"github.com/ksrunner/ksrunner/host/internal/application"
	statuspage "github.com/ksrunner/ksrunner/host/internal/status"
)

// JobServer serves the Beam Job API and artifact staging on one port.
type JobServer struct {
	jobpb.UnimplementedJobServiceServer
	jobpb.UnimplementedArtifactStagingServiceServer

	defaults Options
	cfg      serverConfig
	logger   *slog.Logger
	lis      net.Listener
	srv      *grpc.Server
	stageDir string

	embeddedMu sync.Mutex
	embedded   *EmbeddedBroker

	status *statuspage.Server // nil: no status page

	mu       sync.Mutex
	closed   bool                    // Stop was called: Run refuses new jobs
	starting sync.WaitGroup          // Runs past the closed check, not yet registered
	prepared map[string]*preparedJob // by preparation id == staging token
	jobs     map[string]*job
	order    []string // the jobs' ids, in the order they started
	ended    []string // the ids of the ended jobs kept, in the order they ended
	nextID   int
	// watchers are the goroutines that wait for a registered job to end
	// (forgetEnded); Stop waits for them.
	watchers sync.WaitGroup
}

type preparedJob struct {
	id       string
	name     string
	pipeline *pipepb.Pipeline
	options  *structpb.Struct
	at       time.Time // when it was prepared
}

// preparedTTL is how long a preparation waits for its Run. Beam's clients
// stage and run at once; one that never runs (its client went away) is
// dropped with its staged artifacts when a later Prepare finds it this
// old.
const preparedTTL = time.Hour

// NewJobServer listens on addr ("host:port"; port 0 picks a free one).
// defaults are the job-scoped options a job's pipeline options override.
//
// Security: the endpoint listens on loopback unless WithEndpointSecurity
// gives TLS and a bearer token (or insecure_bind); PROCESS environments
// are refused unless WithProcessEnvironments allows them (default: only on
// loopback); a job's bootstrap_servers must be allowed
// (WithAllowedBootstrapServers); the runner's Kafka clients connect per
// WithKafkaSecurity.
func NewJobServer(addr string, defaults Options, logger *slog.Logger, options ...ServerOption) (*JobServer, error) {
	if logger == nil {
		logger = slog.Default()
	}
	var cfg serverConfig
	for _, o := range options {
		o(&cfg)
	}
	if err := checkAllowedBootstrap(cfg.allowedBootstrap); err != nil {
		return nil, fmt.Errorf("job server: %w", err)
	}
	switch {
	case cfg.jobHistory < 0:
		return nil, fmt.Errorf("job server: option job_history: %d: want at least 1 (how many ended jobs it keeps)", cfg.jobHistory)
	case cfg.jobHistory == 0:
		cfg.jobHistory = DefaultJobHistory
	}
	kafka, err := cfg.kafkaConfig.Load()
	if err != nil {
		return nil, fmt.Errorf("job server: %w", err)
	}
	cfg.kafka = kafka
	lis, guard, err := endpoint.Listen("job", addr, cfg.endpoint, logger)
	if err != nil {
		return nil, fmt.Errorf("job server: %w", err)
	}
	cfg.loopback = guard.Loopback()
	allow := cfg.processAllowed(cfg.loopback)
	cfg.allowProcess = &allow
	if allow && !cfg.loopback {
		logger.Warn("PROCESS ENVIRONMENTS: allow_process_environments is on and the job endpoint is reachable beyond loopback: a client of the Job API can make this process run any command", "endpoint", lis.Addr().String())
	}
	logger.Info("job endpoint security", "endpoint", lis.Addr().String(), "loopback", cfg.loopback, "tls", guard.TLS(), "bearer_token", guard.Token(),
		"process_environments", allow, "allowed_bootstrap_servers", cfg.allowedBootstrap, "kafka", cfg.kafka.Describe())
	dir, err := os.MkdirTemp("", "ksrunner-artifacts-")
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("job server: artifact staging dir: %w", err)
	}
	srvOpts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(512 << 20), grpc.MaxSendMsgSize(512 << 20),
		// SDK clients (Python) ping every 20s while they follow a job.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})},
		guard.GRPCServerOptions()...)
	s := &JobServer{
		defaults: defaults,
		cfg:      cfg,
		logger:   logger,
		lis:      lis,
		srv:      grpc.NewServer(srvOpts...),
		stageDir: dir,
		prepared: map[string]*preparedJob{},
		jobs:     map[string]*job{},
	}
	s.cfg.stageDir = dir
	if s.cfg.status != nil {
		if s.status, err = startStatus(serverStatus{s}, &s.cfg, logger); err != nil {
			lis.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("job server: %w", err)
		}
	}
	jobpb.RegisterJobServiceServer(s.srv, s)
	jobpb.RegisterArtifactStagingServiceServer(s.srv, s)
	return s, nil
}

// Endpoint is the address clients dial.
func (s *JobServer) Endpoint() string { return s.lis.Addr().String() }

// StatusURL is the address of the status page ("" without WithStatus).
func (s *JobServer) StatusURL() string {
	if s.status == nil {
		return ""
	}
	return s.status.URL()
}

// Serve serves until Stop. It returns nil after Stop.
func (s *JobServer) Serve() error {
	if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Stop refuses later Runs, cancels every running job, waits for them and
// stops the server. Unlike a Cancel, it does not end the jobs' part in
// their applications: an instance with an explicit state_dir stays in its
// consumer group, for a restart to take its tasks back at once.
func (s *JobServer) Stop() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.starting.Wait() // a Run that passed the check registers its job first
	s.mu.Lock()
	jobs := make([]*job, 0, len(s.jobs))
	for _, j := range s.jobs {
		jobs = append(jobs, j)
	}
	s.mu.Unlock()
	// Stopped, not cancelled: the applications go on in their other
	// processes, and this one resumes them when it restarts.
	for _, j := range jobs {
		j.stopProcess()
	}
	for _, j := range jobs {
		j.Wait()
	}
	s.watchers.Wait()
	s.srv.Stop()
	if s.status != nil {
		s.status.Close()
	}
	os.RemoveAll(s.stageDir)
	s.embeddedMu.Lock()
	if s.embedded != nil {
		s.embedded.Close()
		s.embedded = nil
	}
	s.embeddedMu.Unlock()
}

// Prepare implements the Job API. The artifact staging endpoint it answers
// is this one, by the address the client dialed (the listener's may be a
// wildcard, or differ behind a proxy).
func (s *JobServer) Prepare(ctx context.Context, req *jobpb.PrepareJobRequest) (*jobpb.PrepareJobResponse, error) {
	if req.GetPipeline() == nil {
		return nil, status.Error(codes.InvalidArgument, "prepare: no pipeline")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	name := req.GetJobName()
	if name == "" {
		name = "job"
	}
	id := fmt.Sprintf("%s-%d", sanitizeID(name), s.nextID)
	now := time.Now()
	for old, p := range s.prepared {
		if now.Sub(p.at) > preparedTTL {
			delete(s.prepared, old)
			os.RemoveAll(filepath.Join(s.stageDir, old))
			s.logger.Info("dropped a job preparation never run", "preparation", old, "prepared", p.at)
		}
	}
	s.prepared[id] = &preparedJob{id: id, name: name, pipeline: req.GetPipeline(), options: req.GetPipelineOptions(), at: now}
	return &jobpb.PrepareJobResponse{
		PreparationId:           id,
		ArtifactStagingEndpoint: &pipepb.ApiServiceDescriptor{Url: s.dialedEndpoint(ctx)},
		StagingSessionToken:     id,
	}, nil
}

// ReverseArtifactRetrievalService asks the client for every dependency of
// every environment, stores them under the staging dir and rewrites the
// dependencies to local files that the harness serves to workers.
func (s *JobServer) ReverseArtifactRetrievalService(stream jobpb.ArtifactStagingService_ReverseArtifactRetrievalServiceServer) error {
	in, err := stream.Recv()
	if err != nil {
		if err == io.EOF {
			return nil
		}
		return err
	}
	token := in.GetStagingToken()
	s.mu.Lock()
	prep := s.prepared[token]
	s.mu.Unlock()
	if prep == nil {
		return status.Errorf(codes.NotFound, "artifact staging: unknown staging token %q", token)
	}
	dir := filepath.Join(s.stageDir, token)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for envID, env := range prep.pipeline.GetComponents().GetEnvironments() {
		for i, dep := range env.GetDependencies() {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d", sanitizeID(envID), i))
			if err := s.fetchArtifact(stream, dep, path); err != nil {
				return fmt.Errorf("artifact staging: environment %s dependency %d (%s): %w", envID, i, dep.GetTypeUrn(), err)
			}
			sum, err := fileSHA256(path)
			if err != nil {
				return err
			}
			env.Dependencies[i] = &pipepb.ArtifactInformation{
				TypeUrn:     "beam:artifact:type:file:v1",
				TypePayload: mustMarshal(&pipepb.ArtifactFilePayload{Path: path, Sha256: sum}),
				RoleUrn:     dep.GetRoleUrn(),
				RolePayload: dep.GetRolePayload(),
			}
		}
	}
	return nil
}

func (s *JobServer) fetchArtifact(stream jobpb.ArtifactStagingService_ReverseArtifactRetrievalServiceServer, dep *pipepb.ArtifactInformation, path string) error {
	if err := stream.Send(&jobpb.ArtifactRequestWrapper{
		Request: &jobpb.ArtifactRequestWrapper_GetArtifact{GetArtifact: &jobpb.GetArtifactRequest{Artifact: dep}},
	}); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		in, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if r := in.GetGetArtifactResponse(); r != nil {
			if _, err := f.Write(r.GetData()); err != nil {
				return err
			}
		}
		if in.GetIsLast() {
			return f.Close()
		}
	}
}

// Run implements the Job API: it translates the pipeline (an unsupported
// construct fails here, at submission) and starts the job.
func (s *JobServer) Run(ctx context.Context, req *jobpb.RunJobRequest) (*jobpb.RunJobResponse, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Errorf(codes.Unavailable, "run %s: the job server is stopping", req.GetPreparationId())
	}
	s.starting.Add(1)
	defer s.starting.Done()
	prep := s.prepared[req.GetPreparationId()]
	delete(s.prepared, req.GetPreparationId())
	s.mu.Unlock()
	if prep == nil {
		return nil, status.Errorf(codes.NotFound, "run: unknown preparation id %q", req.GetPreparationId())
	}
	stageDir := filepath.Join(s.stageDir, prep.id)
	started := false
	defer func() {
		if !started { // refused, failed, or joined a running job
			os.RemoveAll(stageDir)
		}
	}()
	opts, err := s.defaults.WithPipelineOptions(prep.options)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "job %s: %v", prep.id, err)
	}
	if err := s.checkBootstrap(opts.BootstrapServers); err != nil {
		s.logger.Error("job refused at submission", "job", prep.id, "error", err)
		return nil, status.Errorf(codes.PermissionDenied, "job %s: %v", prep.id, err)
	}
	embedded := opts.BootstrapServers == "embedded"
	if embedded {
		if opts.BootstrapServers, err = s.embeddedBootstrap(); err != nil {
			return nil, status.Errorf(codes.Unavailable, "job %s: %v", prep.id, err)
		}
	}
	canonicalOrder(prep.pipeline)
	spec := jobSpec{ID: prep.id, Name: prep.name, Pipeline: prep.pipeline, RawOptions: prep.options, Options: opts,
		StageDir: stageDir, EmbeddedBroker: embedded}
	s.keepStoredOrder(ctx, spec)
	if running, err := s.runningHere(spec); err != nil || running != nil {
		if err != nil {
			s.logger.Error("job rejected at submission", "job", prep.id, "error", err)
			return nil, status.Errorf(codes.InvalidArgument, "job %s: %v", prep.id, err)
		}
		running.events.message(jobpb.JobMessage_JOB_MESSAGE_BASIC, fmt.Sprintf("resubmitted as %s: the same pipeline under application_id %s, which this job runs; the client follows this job", prep.id, opts.ApplicationID))
		return &jobpb.RunJobResponse{JobId: running.ID()}, nil
	}
	job, err := startJob(context.Background(), spec, s.logger, &s.cfg)
	if err != nil {
		s.logger.Error("job rejected at submission", "job", prep.id, "error", err)
		return nil, status.Errorf(codes.InvalidArgument, "job %s: %v", prep.id, err)
	}
	s.register(job)
	started = true
	return &jobpb.RunJobResponse{JobId: job.ID()}, nil
}

// register lists j, which runs, until it has ended and as many jobs as
// the history keeps (WithJobHistory) have ended after it.
func (s *JobServer) register(j *job) {
	s.mu.Lock()
	s.jobs[j.ID()] = j
	s.order = append(s.order, j.ID())
	s.watchers.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.watchers.Done()
		j.Wait()
		s.forgetEnded(j)
	}()
}

// forgetEnded deletes the staged artifacts of j, which has ended and
// released everything it started, and forgets the jobs that ended first
// beyond the history (WithJobHistory).
func (s *JobServer) forgetEnded(j *job) {
	if err := os.RemoveAll(j.spec.StageDir); err != nil {
		s.logger.Warn("deleting an ended job's staged artifacts", "job", j.ID(), "error", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = append(s.ended, j.ID())
	for len(s.ended) > s.cfg.jobHistory {
		old := s.ended[0]
		s.ended = slices.Delete(s.ended, 0, 1)
		delete(s.jobs, old)
		s.order = slices.DeleteFunc(s.order, func(id string) bool { return id == old })
		s.logger.Debug("forgot an ended job (job_history)", "job", old)
	}
}

// canonicalOrder lists p's root transforms, and each composite's parts, in
// one order. The Go SDK lists them in map order, so one program marshalled
// twice lists them differently; the order decides the fingerprint (an
// encoded list) and the numbering of the plan's sub-topologies (the order
// translate visits transforms in), which a resubmission that joins the
// application must share with it. A job read from the pipeline topic keeps
// the order stored there, as the application laid it out.
func canonicalOrder(p *pipepb.Pipeline) {
	slices.Sort(p.RootTransformIds)
	for _, tr := range p.GetComponents().GetTransforms() {
		slices.Sort(tr.Subtransforms)
	}
}

// keepStoredOrder gives spec's pipeline the order of its roots and parts
// that its application's pipeline topic stored, when the topic holds the
// same pipeline in another order: one submitted to a ksrunner before
// canonicalOrder, whose plan numbers its sub-topologies by that order. A
// topic that cannot be read leaves the order as it is: publishing the job
// then meets the same trouble and says what it is.
func (s *JobServer) keepStoredOrder(ctx context.Context, spec jobSpec) {
	app := spec.Options.ApplicationID
	if app == "" {
		return
	}
	sec := s.cfg.kafka
	if spec.EmbeddedBroker {
		sec = nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := application.Open(ctx, spec.Options.BootstrapServers, sec, app, 0, false)
	if err != nil {
		s.logger.Debug("reading the application's pipeline topic for its order", "application_id", app, "error", err)
		return
	}
	defer t.Close()
	_, stored, err := t.Load(ctx)
	if err != nil || stored == nil {
		return
	}
	if application.StoredOrder(spec.Pipeline, stored.Pipeline) {
		s.logger.Info("the pipeline takes the order of its transforms its application stored (submitted to an earlier ksrunner)", "job", spec.ID, "application_id", app)
	}
}

// runningHere looks for a job of spec's application that this server runs
// already. The same pipeline submitted by its SDK joins it (the client
// follows the running job); one resumed from the pipeline topic is stopped
// here and replaced by the submission, which brings the SDK's environments
// (a resumed job may have none it can reach). Another pipeline is refused.
func (s *JobServer) runningHere(spec jobSpec) (*job, error) {
	app := spec.Options.ApplicationID
	if app == "" {
		return nil, nil
	}
	s.mu.Lock()
	var running *job
	for _, j := range s.jobs {
		if j.spec.Options.ApplicationID == app && !isClosed(j.done) {
			running = j
		}
	}
	s.mu.Unlock()
	if running == nil {
		return nil, nil
	}
	// The fingerprint covers the plan's layout: the same pipeline, laid
	// out by this ksrunner, matches the running job's.
	plan, _, err := planOf(spec)
	if err != nil {
		return nil, err
	}
	fp, err := fingerprintOf(spec, plan)
	if err != nil {
		return nil, err
	}
	if fp != running.fingerprint {
		return nil, fmt.Errorf("application_id %q is running another pipeline in this job server (job %s, %q; fingerprint %s, this one %s): cancel that job first, or submit this pipeline under another application_id",
			app, running.ID(), running.Name(), running.fingerprint, fp)
	}
	if running.spec.Origin == originSubmitted {
		return running, nil
	}
	running.events.message(jobpb.JobMessage_JOB_MESSAGE_BASIC, fmt.Sprintf("stopped here: %s resubmitted the pipeline with its SDK and runs it in this job server instead", spec.ID))
	running.Stop()
	running.Wait()
	return nil, nil
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// embeddedBootstrap starts the process's embedded broker on first use.
func (s *JobServer) embeddedBootstrap() (string, error) {
	s.embeddedMu.Lock()
	defer s.embeddedMu.Unlock()
	if s.embedded == nil {
		b, err := StartEmbeddedBroker(0)
		if err != nil {
			return "", err
		}
		s.embedded = b
		warnEmbedded(s.logger, b.Bootstrap())
	}
	return s.embedded.Bootstrap(), nil
}

func (s *JobServer) job(id string) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return nil, status.Errorf(codes.NotFound, "unknown job id %q", id)
	}
	return j, nil
}

// GetJobs implements the Job API.
func (s *JobServer) GetJobs(context.Context, *jobpb.GetJobsRequest) (*jobpb.GetJobsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &jobpb.GetJobsResponse{}
	for _, id := range s.order {
		j := s.jobs[id]
		resp.JobInfo = append(resp.JobInfo, &jobpb.JobInfo{
			JobId: id, JobName: j.Name(), PipelineOptions: j.spec.RawOptions, State: j.State(),
		})
	}
	return resp, nil
}

// GetState implements the Job API.
func (s *JobServer) GetState(_ context.Context, req *jobpb.GetJobStateRequest) (*jobpb.JobStateEvent, error) {
	j, err := s.job(req.GetJobId())
	if err != nil {
		return nil, err
	}
	return &jobpb.JobStateEvent{State: j.State()}, nil
}

// GetPipeline implements the Job API.
func (s *JobServer) GetPipeline(_ context.Context, req *jobpb.GetJobPipelineRequest) (*jobpb.GetJobPipelineResponse, error) {
	j, err := s.job(req.GetJobId())
	if err != nil {
		return nil, err
	}
	return &jobpb.GetJobPipelineResponse{Pipeline: j.spec.Pipeline}, nil
}

// Cancel implements the Job API.
func (s *JobServer) Cancel(_ context.Context, req *jobpb.CancelJobRequest) (*jobpb.CancelJobResponse, error) {
	j, err := s.job(req.GetJobId())
	if err != nil {
		return nil, err
	}
	j.Cancel()
	return &jobpb.CancelJobResponse{State: j.State()}, nil
}

// Drain implements the Job API: see job.Drain.
func (s *JobServer) Drain(_ context.Context, req *jobpb.DrainJobRequest) (*jobpb.DrainJobResponse, error) {
	j, err := s.job(req.GetJobId())
	if err != nil {
		return nil, err
	}
	if !j.Drain() {
		return nil, status.Errorf(codes.FailedPrecondition, "drain %s: the job has ended (%s)", req.GetJobId(), j.State())
	}
	return &jobpb.DrainJobResponse{State: j.State()}, nil
}

// GetStateStream implements the Job API: every state change, ending with the
// terminal one.
func (s *JobServer) GetStateStream(req *jobpb.GetJobStateRequest, stream jobpb.JobService_GetStateStreamServer) error {
	j, err := s.job(req.GetJobId())
	if err != nil {
		return err
	}
	return j.events.follow(stream.Context(), func(e event) error {
		if e.state == jobpb.JobState_UNSPECIFIED {
			return nil
		}
		return stream.Send(&jobpb.JobStateEvent{State: e.state})
	})
}

// GetMessageStream implements the Job API: state changes and job messages
// (SDK logs at warning and above, errors).
func (s *JobServer) GetMessageStream(req *jobpb.JobMessagesRequest, stream jobpb.JobService_GetMessageStreamServer) error {
	j, err := s.job(req.GetJobId())
	if err != nil {
		return err
	}
	return j.events.follow(stream.Context(), func(e event) error {
		if e.state != jobpb.JobState_UNSPECIFIED {
			return stream.Send(&jobpb.JobMessagesResponse{Response: &jobpb.JobMessagesResponse_StateResponse{
				StateResponse: &jobpb.JobStateEvent{State: e.state},
			}})
		}
		return stream.Send(&jobpb.JobMessagesResponse{Response: &jobpb.JobMessagesResponse_MessageResponse{
			MessageResponse: &jobpb.JobMessage{MessageId: strconv.Itoa(e.seq), Time: e.at.Format(time.RFC3339Nano), MessageText: e.text, Importance: e.importance},
		}})
	})
}

// GetJobMetrics implements the Job API: attempted metrics count every
// finished bundle, committed ones the bundles of committed cycles (see
// jobMetrics).
func (s *JobServer) GetJobMetrics(_ context.Context, req *jobpb.GetJobMetricsRequest) (*jobpb.GetJobMetricsResponse, error) {
	j, err := s.job(req.GetJobId())
	if err != nil {
		return nil, err
	}
	return &jobpb.GetJobMetricsResponse{Metrics: &jobpb.MetricResults{Committed: j.metrics.Committed.Results(), Attempted: j.metrics.Attempted.Results()}}, nil
}

// DescribePipelineOptions lists the options ksrunner reads.
func (s *JobServer) DescribePipelineOptions(context.Context, *jobpb.DescribePipelineOptionsRequest) (*jobpb.DescribePipelineOptionsResponse, error) {
	resp := &jobpb.DescribePipelineOptionsResponse{Options: optionDescriptors()}
	sort.Slice(resp.Options, func(i, j int) bool { return resp.Options[i].GetName() < resp.Options[j].GetName() })
	return resp, nil
}

func sanitizeID(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err) // only for messages built here, which always marshal
	}
	return b
}
