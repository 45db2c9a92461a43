package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/application"
	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/runtime"
	"github.com/ksrunner/ksrunner/host/internal/status"
	"github.com/ksrunner/ksrunner/host/internal/task"

	"github.com/ksrunner/ksrunner/host/internal/executor"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/wasmabi"
)

// jobSpec is a job as submitted, or as read from its application's
// pipeline topic.
type jobSpec struct {
	ID, Name   string
	Pipeline   *pipepb.Pipeline
	RawOptions *structpb.Struct
	// Options are resolved: BootstrapServers is a broker list, never "embedded".
	Options Options
	// Origin is how this process got the job.
	Origin jobOrigin
	// Modules are the WASM modules read from the pipeline topic (origins
	// other than submitted), by their stage_wasm reference.
	Modules map[string][]byte
	// StageDir is the job's own staging directory: the artifacts staged
	// for it (or written from its pipeline topic). Only files under it are
	// published with the job and served to its SDK workers.
	StageDir string
	// EmbeddedBroker: Options.BootstrapServers is this process's embedded
	// broker, which the runner's Kafka security does not apply to.
	EmbeddedBroker bool
	// Layout is, for a job read from the pipeline topic, the layout
	// version of the plan its application runs under (0: the first), and
	// PublishedAs the id of the job that published it there.
	Layout      int
	PublishedAs string
	// OneOff: Options.ApplicationID was made for this submission
	// (runtime.Config.OneOff).
	OneOff bool
}

// jobOrigin is how a process got a job, which decides what it publishes and
// what it must be able to run.
type jobOrigin int

const (
	// originSubmitted: through this job server's Job API, with the SDK at
	// hand. The job server publishes it to the pipeline topic and runs
	// every stage.
	originSubmitted jobOrigin = iota
	// originResumed: read from the pipeline topic by a restarted job
	// server. It runs the stages whose environments it can start.
	originResumed
	// originWorker: read from the pipeline topic by `ksrunner worker`,
	// with the environments it was given. It runs the stages whose
	// environments it can start.
	originWorker
)

// job is one submitted pipeline, from STOPPED to a terminal state.
type job struct {
	spec    jobSpec
	server  *serverConfig
	plan    *translate.Plan
	logger  *slog.Logger
	events  *eventLog
	metrics *metrics.Job
	stats   *runtime.Stats // progress in this process, for the log
	wasm    *executor.WASM // nil without WASM stages
	// observer holds this process's instance figures, for the status
	// page and /metrics (status.go); started is when the job started here.
	observer *metrics.Instance
	started  time.Time

	// cluster is the application as Kafka shows it (status.go), made on
	// first use and closed when the job ends.
	clusterMu     sync.Mutex
	cluster       *status.Cluster
	clusterClosed bool

	// security is how the job's Kafka clients connect (nil: PLAINTEXT):
	// the runner's, or its Kafka reads' and writes' (kafkaio.JobSecurity).
	security *kafkaconn.Security

	// fingerprint identifies the job's pipeline on its pipeline topic.
	fingerprint string

	// closing is set once the job's executors are being shut down.
	closing atomic.Bool
	// draining is set by Drain.
	draining atomic.Bool

	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error // why it ended; set before done closes
}

// Why a job's context ends before the job is done. The cause goes down to
// the runtime, which decides from it whether the instance leaves the
// consumer group.
var (
	// errCancelled: the job was cancelled on purpose (the Job API's
	// Cancel, or the application's cancel read from its pipeline topic):
	// the whole application stops and nothing resumes it; its instance
	// leaves the group (runtime.ErrEnded).
	errCancelled = fmt.Errorf("job cancelled: %w", runtime.ErrEnded)
	// errStopped: this process stops running the job (its job server
	// stops, a worker stops, a resubmission replaces a resumed job); the
	// application goes on in its other processes and resumes at restart.
	// The instance keeps a static membership (an explicit state_dir), so
	// its restart takes its tasks back without a rebalance; meanwhile the
	// other instances wait up to session_timeout_ms for them.
	errStopped = errors.New("job stopped in this process")
	// errStoppedLeaving is errStopped in a process stopped for good
	// (WithLeaveGroupOnStop): its instance leaves the group
	// (runtime.ErrEnded), so the other processes take its tasks at once.
	errStoppedLeaving = fmt.Errorf("%w, leaving its consumer group (leave_group_on_stop): %w", errStopped, runtime.ErrEnded)
	// errAppEnded: the job's application was cancelled or is draining
	// elsewhere, as its pipeline topic says (a worker following it): the
	// instance leaves the group, as for a Cancel, but records nothing
	// (the pipeline topic says it already).
	errAppEnded = fmt.Errorf("the application ended: %w", errCancelled)
)

// startJob validates and translates the pipeline (every unsupported construct
// fails here, before anything runs), compiles and checks the WASM modules of
// option stage_wasm, and starts running it.
func startJob(ctx context.Context, spec jobSpec, logger *slog.Logger, server *serverConfig) (_ *job, err error) {
	plan, stageWASM, err := planOf(spec)
	if err != nil {
		return nil, err
	}
	// A PROCESS environment this process may not start refuses a
	// submission; a resumed job, or a worker's, leaves those stages to the
	// application's other processes (the harness refuses them:
	// NoProcessEnvironments).
	if err := checkEnvironments(plan, spec.Origin != originSubmitted || server.processAllowed(true)); err != nil {
		return nil, err
	}
	if err := checkStreaming(plan, spec.RawOptions); err != nil {
		return nil, err
	}
	if err := checkLayout(spec, plan); err != nil {
		return nil, err
	}
	// Without an application_id a job gets one of its own, unique to this
	// submission. A bounded job needs no more. An unbounded one runs too
	// (Beam's pipelines carry no runner options, and its conformance suite
	// submits them so), but nothing can find it again: a restarted process,
	// a worker or a resubmission would need the id, so the job says so.
	var derivedUnbounded bool
	if spec.Options.ApplicationID == "" {
		spec.Options.ApplicationID = sanitizeID(spec.Name) + "-" + randomSuffix()
		spec.OneOff = true
		derivedUnbounded = !plan.Bounded
	}
	runnerKafka := server.kafka
	if spec.EmbeddedBroker {
		runnerKafka = nil
	}
	security, err := kafkaio.JobSecurity(plan, runnerKafka)
	if err != nil {
		return nil, err
	}
	j := &job{
		spec:     spec,
		security: security,
		server:   server,
		plan:     plan,
		logger:   logger.With("job", spec.ID),
		events:   newEventLog(),
		metrics:  metrics.NewJob(),
		stats:    &runtime.Stats{},
		done:     make(chan struct{}),

		observer: metrics.NewInstance(),
		started:  time.Now(),
	}
	if j.fingerprint, err = fingerprintOf(spec, plan); err != nil {
		return nil, err
	}
	if j.wasm, err = executor.PrepareWASM(ctx, plan, executor.WASMConfig{
		Modules:          spec.Modules,
		Patterns:         stageWASM,
		CacheDir:         spec.Options.wasmCacheDir(),
		Interruptible:    spec.Options.WASMInterruptible,
		MemoryLimitPages: spec.Options.wasmMemoryLimitPages(),
		BundleDeadline:   spec.Options.WASMBundleDeadline,
		OnStuck:          j.onWASMStuck,
		Logger:           j.logger,
	}); err != nil {
		return nil, err
	}
	msgs, annotated := executor.DescribeStages(spec.Pipeline, plan, j.wasm)
	j.spec.Pipeline = annotated
	for _, m := range msgs {
		j.note(slog.LevelInfo, jobpb.JobMessage_JOB_MESSAGE_BASIC, m)
	}
	for _, line := range describePlan(plan) {
		if !server.messagesOnly {
			j.logger.Debug("plan: " + line)
		}
		j.events.message(jobpb.JobMessage_JOB_MESSAGE_DETAILED, line)
	}
	for _, w := range optionTypos(spec.RawOptions) {
		j.note(slog.LevelWarn, jobpb.JobMessage_JOB_MESSAGE_WARNING, w)
	}
	if derivedUnbounded {
		j.note(slog.LevelWarn, jobpb.JobMessage_JOB_MESSAGE_WARNING, unnamedUnboundedWarning(spec.Options.ApplicationID))
	}
	if spec.Origin == originSubmitted {
		// The pipeline as submitted, not as annotated for GetPipeline: the
		// other processes annotate it themselves.
		if err := j.publish(ctx, spec.Pipeline, stageWASM); err != nil {
			j.wasm.Close()
			return nil, err
		}
	}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	j.cancel = cancel
	go j.run(runCtx)
	return j, nil
}

// planOf translates spec's pipeline, with the stage_wasm patterns it was
// translated under.
func planOf(spec jobSpec) (*translate.Plan, map[string]string, error) {
	stageWASM, err := spec.Options.stageWASM()
	if err != nil {
		return nil, nil, err
	}
	plan, err := translate.Translate(spec.Pipeline, translate.Options{StageWASM: stageWASM})
	return plan, stageWASM, err
}

// fingerprintOf is spec's application fingerprint, laid out as plan (whose
// layout version it covers).
func fingerprintOf(spec jobSpec, plan *translate.Plan) (string, error) {
	return (&application.Spec{Pipeline: spec.Pipeline, Topology: spec.Options.topology(), Layout: plan.Layout}).Fingerprint()
}

// checkLayout refuses a job read from its pipeline topic (a worker's, a
// resumed one) that this ksrunner lays out otherwise than the version that
// published it: the job would run on the state, changelogs and internal
// topics of the other layout's sub-topologies. Publish checks a
// submission (application.Topic.sameLayout).
func checkLayout(spec jobSpec, plan *translate.Plan) error {
	have := application.LayoutOf(spec.Layout)
	if spec.Origin == originSubmitted || have == plan.Layout {
		return nil
	}
	return &application.LayoutError{AppID: spec.Options.ApplicationID, JobID: spec.PublishedAs, JobName: spec.Name, State: application.Running, Have: have, Want: plan.Layout}
}

// publish writes the job to its application's pipeline topic, so that
// workers and a restarted job server can run it, or joins the application
// if it already runs this pipeline; another pipeline under a live
// application id is refused.
func (j *job) publish(ctx context.Context, submitted *pipepb.Pipeline, stageWASM map[string]string) (err error) {
	opts := j.spec.Options
	defer func() { err = kafkaconn.Explain(err, opts.BootstrapServers, j.security) }()
	modules, err := executor.ModuleFiles(stageWASM)
	if err != nil {
		return err
	}
	artifacts, err := application.ReadArtifacts(submitted, j.spec.StageDir)
	if err != nil {
		return err
	}
	encoded, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("encoding the job's options: %w", err)
	}
	// The pipeline topic's calls retry brokers out of reach (franz-go
	// retries produces without end): bounded like the job's own.
	limit := time.Duration(opts.BrokerUnavailableTimeoutMs) * time.Millisecond
	pctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("cannot publish the job on its pipeline topic: the Kafka brokers %s did not answer within %v (option broker_unavailable_timeout_ms)", opts.BootstrapServers, limit))
	defer cancel()
	withCause := func(err error) error {
		if pctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w (%v)", context.Cause(pctx), err)
		}
		return err
	}
	t, err := application.Open(pctx, opts.BootstrapServers, j.security, opts.ApplicationID, opts.TopicReplicationFactor, true)
	if err != nil {
		return withCause(err)
	}
	defer t.Close()
	out, replaced, err := t.Publish(pctx, &application.Spec{
		JobID: j.spec.ID, JobName: j.spec.Name, Pipeline: submitted, RawOptions: j.spec.RawOptions,
		Options: encoded, Modules: modules, Artifacts: artifacts, Topology: opts.topology(), Layout: j.plan.Layout,
	})
	if err != nil {
		return withCause(err)
	}
	var msg string
	switch {
	case out == application.Joined:
		msg = fmt.Sprintf("application %s already runs this pipeline: this job joins it as one more instance (pipeline topic %s)", opts.ApplicationID, t.Name())
	case replaced != nil:
		msg = fmt.Sprintf("application %s: this pipeline replaces job %s (%s, %s), which no process runs any more (pipeline topic %s)", opts.ApplicationID, replaced.JobID, replaced.JobName, replaced.State, t.Name())
	default:
		msg = fmt.Sprintf("application %s: job written to the pipeline topic %s, for `ksrunner worker --application_id %s` and restarts", opts.ApplicationID, t.Name(), opts.ApplicationID)
	}
	j.note(slog.LevelInfo, jobpb.JobMessage_JOB_MESSAGE_BASIC, msg)
	return nil
}

// recordEnd tells the application's other processes how the job ended on
// purpose: cancelled (they stop, and nothing resumes it) or done with its
// topics kept. A job that failed or stopped in this process only changes
// nothing: the application goes on elsewhere and resumes at a restart.
func (j *job) recordEnd(ctx context.Context, err error) {
	var state application.State
	switch {
	case errors.Is(err, errAppEnded):
		return
	case j.spec.OneOff && j.plan.Bounded && !j.spec.Options.KeepInternalTopics:
		// Nothing resumes the application; the runtime deleted its
		// topics (runtime.Config.OneOff).
		return
	case err == nil && j.draining.Load():
		state = application.Drained
	case errors.Is(err, errCancelled):
		state = application.Cancelled
	case err == nil && j.plan.Bounded && j.spec.Options.KeepInternalTopics:
		state = application.Done
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	t, terr := application.Open(ctx, j.spec.Options.BootstrapServers, j.security, j.spec.Options.ApplicationID, 0, false)
	if terr == nil {
		terr = t.SetState(ctx, j.fingerprint, state)
		t.Close()
	}
	if terr != nil {
		j.logger.Warn("recording the application's end on its pipeline topic", "state", state, "error", terr)
	}
}

// onWASMStuck is called by a WASM module's watchdog when a bundle of a
// non-interruptible guest is still running at wasm_bundle_deadline.
func (j *job) onWASMStuck(s wasmabi.StuckBundle) {
	msg := fmt.Sprintf("job %s: stage %s: WASM module %s: a bundle has been running for %v, past wasm_bundle_deadline (%v); "+
		"the guest cannot be stopped in-process (wasm_interruptible is off): the job fails and the task stays blocked until the process exits (ksrunner jobserver exits, so Kafka moves the partitions to another instance and their uncommitted input is processed again)",
		j.spec.ID, s.Stage, s.Module, time.Since(s.Started).Round(time.Millisecond), s.Deadline)
	j.note(slog.LevelError, jobpb.JobMessage_JOB_MESSAGE_ERROR, msg)
	if j.server.onStuckBundle != nil {
		j.server.onStuckBundle(msg)
		return
	}
	j.events.setState(jobpb.JobState_FAILED)
}

// unnamedUnboundedWarning is the warning of an unbounded job submitted
// without an application_id.
func unnamedUnboundedWarning(id string) string {
	return fmt.Sprintf("option application_id: not set, so this unbounded job runs as application %q, made for this submission: "+
		"a restarted process, a worker or a resubmission finds it only by that id (submit with --application_id=%s to resume it; "+
		"without one a resubmission is a new application that reads its Kafka topics from their offset reset policy)", id, id)
}

func randomSuffix() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ID is the job id.
func (j *job) ID() string { return j.spec.ID }

// Name is the job name.
func (j *job) Name() string { return j.spec.Name }

// State is the current state.
func (j *job) State() jobpb.JobState_Enum { return j.events.current() }

// Cancel cancels the job, in every process of its application; it ends
// CANCELLED unless it already ended.
func (j *job) Cancel() { j.cancel(errCancelled) }

// end stops the job because its application ended (see errAppEnded).
func (j *job) end() { j.cancel(errAppEnded) }

// Drain drains the job (task/drain.go): its sources stop where they are,
// its watermark goes to +inf, firing every window, and it ends DONE (see
// drainedState).
// The application's other processes stop (the pipeline topic says it
// drains), so that their tasks move here and drain too. It reports false
// if the job has already ended.
func (j *job) Drain() bool {
	if isTerminal(j.State()) || isClosed(j.done) {
		return false
	}
	if j.draining.Swap(true) {
		return true
	}
	msg := "draining: the job's sources stop at their current positions and its watermark goes to +inf, firing every window; it ends DONE once all it read is written"
	j.note(slog.LevelInfo, jobpb.JobMessage_JOB_MESSAGE_BASIC, msg)
	j.events.setState(jobpb.JobState_DRAINING)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t, err := application.Open(ctx, j.spec.Options.BootstrapServers, j.security, j.spec.Options.ApplicationID, 0, false)
		if err == nil {
			err = t.SetState(ctx, j.fingerprint, application.Draining)
			t.Close()
		}
		if err != nil {
			j.logger.Warn("recording the drain on the pipeline topic (the application's other processes go on with their tasks)", "error", err)
		}
	}()
	return true
}

// drainedState is the Job API state a drained job ends in: DONE, not
// Beam's DRAINED. Python's portable runner (apache-beam 2.77,
// PortableRunner's _observe_state) raises "Pipeline ... failed in state
// DRAINED" for every terminal state but DONE, so a drained Python job
// would fail its wait_until_finish; Go's runnerlib.WaitForCompletion
// returns nil on DONE (and on DRAINED only because the stream ends). The
// drain stays visible: the state history goes DRAINING, DONE (`ksrunner
// jobs` shows "DONE (drained)"), the message "job drained", the status
// page's Drained and the pipeline topic's `drained`.
const drainedState = jobpb.JobState_DONE

// drained reports whether the job ended drained.
func (j *job) drained() bool { return j.draining.Load() && j.State() == drainedState }

// Stop stops running the job in this process only; it ends CANCELLED here
// unless it already ended, and goes on in the application's other
// processes.
func (j *job) Stop() { j.cancel(errStopped) }

// stopProcess stops the job because its process stops: as Stop, but
// leaving the consumer group if the process was told to
// (WithLeaveGroupOnStop).
func (j *job) stopProcess() {
	if j.server.leaveOnStop {
		j.cancel(errStoppedLeaving)
		return
	}
	j.Stop()
}

// Wait blocks until the job has stopped and released everything it started.
func (j *job) Wait() { <-j.done }

func (j *job) run(ctx context.Context) {
	defer close(j.done)
	defer j.wasm.Close()
	defer j.closeCluster()
	start := time.Now()
	opts := j.spec.Options
	j.logger.Info("job started", "name", j.spec.Name, "application_id", opts.ApplicationID, "origin", j.spec.Origin.String(), "options", opts.describe())
	j.events.setState(jobpb.JobState_STARTING)
	stopProgress := j.logProgress(start)
	err := j.execute(ctx)
	stopProgress()
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	j.err = err
	j.recordEnd(ctx, err)
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case err == nil && j.draining.Load():
		j.logger.Info("job drained", "took", took)
		j.events.message(jobpb.JobMessage_JOB_MESSAGE_BASIC, "job drained: every window fired and all it read is written")
		j.events.setState(drainedState)
	case err == nil:
		j.logger.Info("job done", "took", took)
		j.events.setState(jobpb.JobState_DONE)
	case errors.Is(err, errCancelled):
		j.logger.Info("job cancelled", "took", took)
		j.events.setState(jobpb.JobState_CANCELLED)
	case errors.Is(err, errStopped):
		j.logger.Info("job stopped in this process; the application goes on in its other processes, and resumes when this one restarts", "took", took)
		j.events.setState(jobpb.JobState_CANCELLED)
	default:
		if j.server.messagesOnly {
			j.logger.Info("job failed", "took", took) // the error is the job's message
		} else {
			j.logger.Error("job failed", "took", took, "error", err)
		}
		j.events.message(jobpb.JobMessage_JOB_MESSAGE_ERROR, err.Error())
		j.events.setState(jobpb.JobState_FAILED)
	}
}

// progressEvery is how often a running job logs its progress line.
const progressEvery = 10 * time.Second

// logProgress logs, every progressEvery until the returned func is called,
// how far the job has come in this process (runtime.Stats): the elements
// read, the tasks' least watermark (a time) and the Kafka reads' lag. A
// line equal to the last one is not repeated.
func (j *job) logProgress(start time.Time) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		var last runtime.StatsSnapshot
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			s := j.stats.Snapshot()
			if s == last {
				continue
			}
			j.logger.Info("job progress", progressAttrs(s, time.Since(start))...)
			last = s
		}
	}()
	return func() { close(done); <-exited }
}

// progressAttrs are the fields of a progress line.
func progressAttrs(s runtime.StatsSnapshot, elapsed time.Duration) []any {
	attrs := []any{"elements", s.Elements, "elapsed", elapsed.Round(time.Second)}
	switch {
	case s.Reported == 0:
		attrs = append(attrs, "watermark", "none reported yet")
	case s.Reported < s.Tasks:
		attrs = append(attrs, "watermark", task.FormatWatermark(s.Watermark), "watermark_tasks", fmt.Sprintf("%d of %d", s.Reported, s.Tasks))
	default:
		attrs = append(attrs, "watermark", task.FormatWatermark(s.Watermark))
	}
	if s.SourcePartitions > 0 {
		attrs = append(attrs, "source_lag", s.SourceLag, "source_partitions", s.SourcePartitions)
	}
	return attrs
}

// note logs msg at level and sends it to the job's message stream with
// importance. A server whose client shows the message stream on the same
// terminal (WithMessagesOnly) only sends it.
func (j *job) note(level slog.Level, importance jobpb.JobMessage_MessageImportance, msg string, attrs ...any) {
	if !j.server.messagesOnly {
		j.logger.Log(context.Background(), level, msg, attrs...)
	}
	j.events.message(importance, msg)
}

// execute runs the job until it is done (bounded), cancelled or failed.
func (j *job) execute(ctx context.Context) error {
	opts := j.spec.Options
	hc := harness.Config{
		JobID:           j.spec.ID,
		JobName:         j.spec.Name,
		PipelineOptions: j.spec.RawOptions,
		Logger:          j.logger,
		OnLog:           j.onSDKLog,
		// Only what was staged for this job is served to its workers.
		ArtifactDir:           j.spec.StageDir,
		NoProcessEnvironments: !j.server.processAllowed(true),
	}
	var (
		execs      map[string]executor.Executor
		unrunnable map[string]error
		closeExecs func()
		err        error
	)
	if j.spec.Origin == originSubmitted {
		execs, closeExecs, err = executor.Start(ctx, j.plan, j.wasm, hc, opts.SDKWorkerParallelism)
	} else {
		execs, unrunnable, closeExecs, err = executor.StartAvailable(ctx, j.plan, j.wasm, hc, opts.SDKWorkerParallelism)
	}
	if err != nil {
		return err
	}
	defer func() {
		j.closing.Store(true) // see onSDKLog
		closeExecs()
	}()
	skip := j.skipSubTopologies(unrunnable)
	deadLetter, createDeadLetter := opts.deadLetterTopic()
	return runtime.Run(ctx, runtime.Config{
		Plan:                  j.plan,
		BootstrapServers:      opts.BootstrapServers,
		Security:              j.security,
		ApplicationID:         opts.ApplicationID,
		ReplicationFactor:     opts.TopicReplicationFactor,
		Parallelism:           opts.InternalParallelism,
		KeepInternalTopics:    opts.KeepInternalTopics,
		OneOff:                j.spec.OneOff,
		StateDir:              opts.StateDir,
		ExactlyOnce:           opts.exactlyOnce(),
		CommitInterval:        opts.commitInterval(),
		TransactionTimeout:    time.Duration(opts.TransactionTimeoutMs) * time.Millisecond,
		GroupProtocol:         opts.GroupProtocol,
		SessionTimeout:        time.Duration(opts.SessionTimeoutMs) * time.Millisecond,
		SourceIdleTimeout:     time.Duration(opts.SourceIdleTimeoutMs) * time.Millisecond,
		SourceMaxDelay:        time.Duration(opts.SourceMaxDelayMs) * time.Millisecond,
		MaxBundleSize:         opts.MaxBundleSize,
		MaxBundleTime:         opts.maxBundleTime(),
		RecordPackBytes:       opts.RecordPackBytes,
		BadRecords:            task.ErrorPolicy(opts.DeserializationErrorPolicy),
		DeadLetterTopic:       deadLetter,
		CreateDeadLetterTopic: createDeadLetter,
		MaxPollRecords:        opts.ReadMaxElementsPerPoll,
		MaxPollTime:           opts.readMaxPollTime(),
		NumStandbyReplicas:    opts.NumStandbyReplicas,
		Execs:                 execs,
		Skip:                  skip,
		Logger:                j.logger,
		Metrics:               j.metrics,
		Observer:              j.observer,
		Stats:                 j.stats,
		Draining:              &j.draining,
		Hooks:                 j.server.hooks,
		OnRunning:             func() { j.events.setState(jobpb.JobState_RUNNING) },
		Progress:              func(msg string) { j.events.message(jobpb.JobMessage_JOB_MESSAGE_BASIC, msg) },

		// The brokers out of reach: retried, told to the client as
		// warnings, and the job's error after this long.
		BrokerUnavailableTimeout: time.Duration(opts.BrokerUnavailableTimeoutMs) * time.Millisecond,
		Warning:                  func(msg string) { j.events.message(jobpb.JobMessage_JOB_MESSAGE_WARNING, msg) },

		InternalMaxMessageBytes: int32(opts.InternalMaxMessageBytes),
	})
}

// skipSubTopologies says, a line per stage, which stages this process
// cannot run, and returns their sub-topologies, whose tasks it leaves to
// the application's other processes.
func (j *job) skipSubTopologies(unrunnable map[string]error) map[int]bool {
	skip := map[int]bool{}
	for _, st := range j.plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			err := unrunnable[s.ID]
			if err == nil {
				continue
			}
			skip[st.ID] = true
			msg := fmt.Sprintf("this process cannot run stage %s (environment %s: %v): it takes no tasks of sub-topology %d, which the application's other processes run (give it the environment with --sdk_worker_pool=%s=HOST:PORT)", s.ID, s.EnvironmentID, err, st.ID, s.EnvironmentID)
			j.note(slog.LevelWarn, jobpb.JobMessage_JOB_MESSAGE_WARNING, msg)
		}
	}
	return skip
}

func (j *job) onSDKLog(e *fnpb.LogEntry) {
	msg := e.GetMessage()
	if t := e.GetTrace(); t != "" {
		msg += "\n" + t
	}
	inBundle := e.GetInstructionId() != "" || e.GetTransformId() != ""
	if !inBundle && isClientEcho(msg) {
		// The Go SDK's universal runner logs the job's messages and states
		// with the SDK's logger, which a LOOPBACK harness in the same
		// process sends here: the line is already in this log (and in the
		// stream), once.
		j.logger.Debug("sdk: the client's echo of a job message", "message", msg)
		return
	}
	attrs := []any{"transform", e.GetTransformId(), "location", e.GetLogLocation()}
	// Lines logged while processing a bundle, and warnings and errors,
	// go to the message stream. Other lines (the harness's own progress)
	// only to the log: a LOOPBACK client may log the stream with the SDK's
	// logger, which sends it back here (isClientEcho drops those).
	// What the harnesses say as the job shuts them down (their data
	// channels closing) only goes to the log.
	level, importance := slog.LevelInfo, jobpb.JobMessage_JOB_MESSAGE_BASIC
	toStream := inBundle
	switch sev := e.GetSeverity(); {
	case sev >= fnpb.LogEntry_Severity_ERROR:
		level, importance, toStream = slog.LevelError, jobpb.JobMessage_JOB_MESSAGE_ERROR, true
	case sev >= fnpb.LogEntry_Severity_WARN:
		level, importance, toStream = slog.LevelWarn, jobpb.JobMessage_JOB_MESSAGE_WARNING, true
	case sev >= fnpb.LogEntry_Severity_INFO:
	default:
		level, toStream = slog.LevelDebug, false
	}
	if j.closing.Load() {
		toStream, level = false, min(level, slog.LevelInfo)
	}
	if !toStream || !j.server.messagesOnly {
		j.logger.Log(context.Background(), level, "sdk: "+msg, attrs...)
	}
	if toStream {
		j.events.message(importance, msg)
	}
}

// clientEcho matches the lines the Go SDK's universal runner logs for the
// job's messages ("(time=T)(id=N)text") and states ("Job[ID] state: S").
var clientEcho = regexp.MustCompile(`^(\(time=[^)]*\))?\(id=[^)]*\)|^Job\[[^\]]*\] state: [A-Z]+$`)

// isClientEcho reports whether an SDK log line is the submitting client's
// echo of this job's message stream.
func isClientEcho(msg string) bool { return clientEcho.MatchString(msg) }

// describePlan says, a line per sub-topology and stage, how the job runs:
// topics, roots, stages with their executor and transforms, sinks.
func describePlan(plan *translate.Plan) []string {
	trs := plan.Pipeline.GetComponents().GetTransforms()
	names := func(ids []string) string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = trs[id].GetUniqueName()
		}
		return strings.Join(out, ", ")
	}
	var lines []string
	for _, st := range plan.SubTopologies {
		lines = append(lines, fmt.Sprintf("sub-topology %d reads topic %s; root %s (%s) emits %s", st.ID, st.Input, status.RootName(st.Root.Kind), trs[st.Root.TransformID].GetUniqueName(), st.Root.Output))
		for _, s := range st.ExecutorStages() {
			exec := "Fn API harness (environment " + s.EnvironmentID + ")"
			if s.Executor == translate.ExecutorWASM {
				exec = "WASM"
			}
			line := fmt.Sprintf("  stage %s on %s: %s; input %s, outputs %v", s.ID, exec, names(s.Transforms), s.Input, s.Outputs)
			if s == st.Root.MergeWindows {
				line = fmt.Sprintf("  stage %s on %s: merges the windows of %s (custom WindowFn %s)", s.ID, exec, trs[st.Root.TransformID].GetUniqueName(),
					plan.Pipeline.GetComponents().GetWindowingStrategies()[st.Root.WindowingStrategy].GetWindowFn().GetUrn())
			}
			for _, si := range s.SideInputs {
				line += fmt.Sprintf("; side input %s from topic %s", si.PCollection, si.Topic)
			}
			lines = append(lines, line)
		}
		for _, f := range st.Flattens {
			lines = append(lines, fmt.Sprintf("  flatten %s: %v -> %s", trs[f.TransformID].GetUniqueName(), f.Inputs, f.Output))
		}
		for _, sk := range st.Sinks {
			lines = append(lines, fmt.Sprintf("  sink %s -> topic %s", sk.PCollection, sk.Topic))
		}
	}
	return lines
}

// checkStreaming refuses a pipeline that reads Kafka but was built with
// the pipeline option streaming set to false: the Python SDK then
// optimizes the pipeline for batch and drops leaf transforms without
// outputs, among them WriteToKafka, so the job would write nothing.
func checkStreaming(plan *translate.Plan, opts *structpb.Struct) error {
	if v, ok := pipelineOption(opts, "streaming"); !ok || v != "false" {
		return nil
	}
	for _, st := range plan.SubTopologies {
		if st.Root.Kind == translate.RootKafkaSource {
			name := plan.Pipeline.GetComponents().GetTransforms()[st.Root.TransformID].GetUniqueName()
			return fmt.Errorf("pipeline option streaming is false, but transform %q reads Kafka: pass --streaming, also for a bounded read (without it the Python SDK optimizes the pipeline for batch and drops WriteToKafka)", name)
		}
	}
	return nil
}
