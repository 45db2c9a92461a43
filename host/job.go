package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/runtime"
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

// jobSpec is a job as submitted.
type jobSpec struct {
	ID, Name   string
	Pipeline   *pipepb.Pipeline
	RawOptions *structpb.Struct
	// Options are resolved: BootstrapServers is a broker list, never "embedded".
	Options Options
}

// job is one submitted pipeline, from STOPPED to a terminal state.
type job struct {
	spec    jobSpec
	server  *serverConfig
	plan    *translate.Plan
	logger  *slog.Logger
	events  *eventLog
	metrics *metrics.Job
	wasm    *executor.WASM // nil without WASM stages

	cancelOnce sync.Once
	cancel     context.CancelCauseFunc
	done       chan struct{}
}

// Why a job's context ends before the job is done. The cause goes down to
// the runtime, which decides from it whether the instance leaves the
// consumer group.
var (
	// errCancelled: a Cancel ends the job on purpose, so its instance
	// leaves the group (runtime.ErrEnded) and the application's other
	// instances take its tasks at once.
	errCancelled = fmt.Errorf("job cancelled: %w", runtime.ErrEnded)
	// errServerStopped: the job server stops (to be restarted, or moved),
	// which does not end the application: the instance keeps a static
	// membership (an explicit state_dir), so its restart takes its tasks
	// back without a rebalance; meanwhile the other instances wait up to
	// session_timeout_ms for them.
	errServerStopped = errors.New("job server stopped")
)

// startJob validates and translates the pipeline (every unsupported construct
// fails here, before anything runs), compiles and checks the WASM modules of
// option stage_wasm, and starts running it.
func startJob(ctx context.Context, spec jobSpec, logger *slog.Logger, server *serverConfig) (_ *job, err error) {
	stageWASM, err := spec.Options.stageWASM()
	if err != nil {
		return nil, err
	}
	plan, err := translate.Translate(spec.Pipeline, translate.Options{StageWASM: stageWASM})
	if err != nil {
		return nil, err
	}
	if err := checkEnvironments(plan); err != nil {
		return nil, err
	}
	if err := checkStreaming(plan, spec.RawOptions); err != nil {
		return nil, err
	}
	if spec.Options.ApplicationID == "" {
		if !plan.Bounded {
			return nil, fmt.Errorf("option application_id: required for an unbounded pipeline (it names the consumer group and internal topics, and must stay the same across restarts)")
		}
		spec.Options.ApplicationID = sanitizeID(spec.Name) + "-" + randomSuffix()
	}
	j := &job{
		spec:    spec,
		server:  server,
		plan:    plan,
		logger:  logger.With("job", spec.ID),
		events:  newEventLog(),
		metrics: metrics.NewJob(),
		done:    make(chan struct{}),
	}
	if j.wasm, err = executor.PrepareWASM(ctx, plan, executor.WASMConfig{
		Patterns:       stageWASM,
		CacheDir:       spec.Options.wasmCacheDir(),
		Interruptible:  spec.Options.WASMInterruptible,
		BundleDeadline: spec.Options.WASMBundleDeadline,
		OnStuck:        j.onWASMStuck,
		Logger:         j.logger,
	}); err != nil {
		return nil, err
	}
	msgs, annotated := executor.DescribeStages(spec.Pipeline, plan, j.wasm)
	j.spec.Pipeline = annotated
	for _, m := range msgs {
		j.logger.Info(m)
		j.events.message(jobpb.JobMessage_JOB_MESSAGE_BASIC, m)
	}
	for _, line := range describePlan(plan) {
		j.logger.Debug("plan: " + line)
		j.events.message(jobpb.JobMessage_JOB_MESSAGE_DETAILED, line)
	}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	j.cancel = cancel
	go j.run(runCtx)
	return j, nil
}

// onWASMStuck is called by a WASM module's watchdog when a bundle of a
// non-interruptible guest is still running at wasm_bundle_deadline.
func (j *job) onWASMStuck(s wasmabi.StuckBundle) {
	msg := fmt.Sprintf("job %s: stage %s: WASM module %s: a bundle has been running for %v, past wasm_bundle_deadline (%v); "+
		"the guest cannot be stopped in-process (wasm_interruptible is off): the job fails and the task stays blocked until the process exits (ksrunner jobserver exits, so Kafka moves the partitions to another instance and their uncommitted input is processed again)",
		j.spec.ID, s.Stage, s.Module, time.Since(s.Started).Round(time.Millisecond), s.Deadline)
	j.logger.Error(msg)
	j.events.message(jobpb.JobMessage_JOB_MESSAGE_ERROR, msg)
	if j.server.onStuckBundle != nil {
		j.server.onStuckBundle(msg)
		return
	}
	j.events.setState(jobpb.JobState_FAILED)
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

// Cancel stops the job; it ends CANCELLED unless it already ended.
func (j *job) Cancel() { j.cancel(errCancelled) }

// stop stops the job because its server stops; it ends CANCELLED too, but
// its instance stays in the consumer group (errServerStopped).
func (j *job) stop() { j.cancel(errServerStopped) }

// Wait blocks until the job has stopped and released everything it started.
func (j *job) Wait() { <-j.done }

func (j *job) run(ctx context.Context) {
	defer close(j.done)
	defer j.wasm.Close()
	j.events.setState(jobpb.JobState_STARTING)
	err := j.execute(ctx)
	switch {
	case err == nil:
		j.logger.Info("job done")
		j.events.setState(jobpb.JobState_DONE)
	case errors.Is(context.Cause(ctx), errCancelled) || errors.Is(context.Cause(ctx), errServerStopped):
		j.logger.Info("job cancelled")
		j.events.setState(jobpb.JobState_CANCELLED)
	default:
		j.logger.Error("job failed", "error", err)
		j.events.message(jobpb.JobMessage_JOB_MESSAGE_ERROR, err.Error())
		j.events.setState(jobpb.JobState_FAILED)
	}
}

// execute runs the job until it is done (bounded), cancelled or failed.
func (j *job) execute(ctx context.Context) error {
	opts := j.spec.Options
	execs, closeExecs, err := executor.Start(ctx, j.plan, j.wasm, harness.Config{
		JobID:           j.spec.ID,
		JobName:         j.spec.Name,
		PipelineOptions: j.spec.RawOptions,
		Logger:          j.logger,
		OnLog:           j.onSDKLog,
	})
	if err != nil {
		return err
	}
	defer closeExecs()
	deadLetter, createDeadLetter := opts.deadLetterTopic()
	return runtime.Run(ctx, runtime.Config{
		Plan:                  j.plan,
		BootstrapServers:      opts.BootstrapServers,
		ApplicationID:         opts.ApplicationID,
		ReplicationFactor:     opts.TopicReplicationFactor,
		Parallelism:           opts.InternalParallelism,
		KeepInternalTopics:    opts.KeepInternalTopics,
		StateDir:              opts.StateDir,
		ExactlyOnce:           opts.exactlyOnce(),
		CommitInterval:        opts.commitInterval(),
		TransactionTimeout:    time.Duration(opts.TransactionTimeoutMs) * time.Millisecond,
		GroupProtocol:         opts.GroupProtocol,
		SessionTimeout:        time.Duration(opts.SessionTimeoutMs) * time.Millisecond,
		SourceIdleTimeout:     time.Duration(opts.SourceIdleTimeoutMs) * time.Millisecond,
		MaxBundleSize:         opts.MaxBundleSize,
		BadRecords:            task.ErrorPolicy(opts.DeserializationErrorPolicy),
		DeadLetterTopic:       deadLetter,
		CreateDeadLetterTopic: createDeadLetter,
		MaxPollRecords:        opts.ReadMaxElementsPerPoll,
		MaxPollTime:           opts.readMaxPollTime(),
		Execs:                 execs,
		Logger:                j.logger,
		Metrics:               j.metrics,
		Hooks:                 j.server.hooks,
		OnRunning:             func() { j.events.setState(jobpb.JobState_RUNNING) },
		Progress:              func(msg string) { j.events.message(jobpb.JobMessage_JOB_MESSAGE_BASIC, msg) },
	})
}

func (j *job) onSDKLog(e *fnpb.LogEntry) {
	msg := e.GetMessage()
	if t := e.GetTrace(); t != "" {
		msg += "\n" + t
	}
	attrs := []any{"transform", e.GetTransformId(), "location", e.GetLogLocation()}
	// Only lines logged while processing a bundle go to the message stream:
	// a LOOPBACK worker shares its process with the submitting client, which
	// logs the message stream, and forwarding those lines back would loop.
	toStream := e.GetInstructionId() != "" || e.GetTransformId() != ""
	importance := jobpb.JobMessage_JOB_MESSAGE_BASIC
	switch sev := e.GetSeverity(); {
	case sev >= fnpb.LogEntry_Severity_ERROR:
		j.logger.Error("sdk: "+msg, attrs...)
		importance = jobpb.JobMessage_JOB_MESSAGE_ERROR
	case sev >= fnpb.LogEntry_Severity_WARN:
		j.logger.Warn("sdk: "+msg, attrs...)
		importance = jobpb.JobMessage_JOB_MESSAGE_WARNING
	case sev >= fnpb.LogEntry_Severity_INFO:
		j.logger.Info("sdk: "+msg, attrs...)
	default:
		j.logger.Debug("sdk: "+msg, attrs...)
		toStream = false
	}
	if toStream {
		j.events.message(importance, msg)
	}
}

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
		lines = append(lines, fmt.Sprintf("sub-topology %d reads topic %s; root %s (%s) emits %s", st.ID, st.Input, rootKindName(st.Root.Kind), trs[st.Root.TransformID].GetUniqueName(), st.Root.Output))
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

func rootKindName(k translate.RootKind) string {
	switch k {
	case translate.RootImpulse:
		return "impulse"
	case translate.RootGroupByKey:
		return "group-by-key"
	case translate.RootPassthrough:
		return "passthrough"
	}
	return fmt.Sprintf("kind %d", k)
}

// checkEnvironments refuses, at submission, stages whose SDK environment
// this runner cannot start.
func checkEnvironments(plan *translate.Plan) error {
	envs := plan.Pipeline.GetComponents().GetEnvironments()
	for _, st := range plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			if s.Executor != translate.ExecutorHarness {
				continue
			}
			switch urn := envs[s.EnvironmentID].GetUrn(); urn {
			case harness.URNEnvExternal, harness.URNEnvProcess, harness.URNEnvAnyOf:
			case harness.URNEnvDocker:
				return fmt.Errorf("stage %s: environment %q is DOCKER, which this runner cannot start (no Docker here); submit with --environment_type=LOOPBACK, EXTERNAL or PROCESS", s.ID, s.EnvironmentID)
			default:
				return fmt.Errorf("stage %s: environment %q has unsupported type %q", s.ID, s.EnvironmentID, urn)
			}
		}
	}
	return nil
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
