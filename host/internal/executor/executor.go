package executor

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/harness"
)

// Executor is the seam between the host and an executor of user code
// (the Fn API harness or wasmabi). The host hands a bundle batches of encoded
// windowed values of the stage's input and receives, through emit, chunks of
// encoded windowed values per output PCollection. Neither side knows about
// Kafka.
type Executor interface {
	// StartBundle opens a bundle. emit must not block on the executor: the
	// host only buffers or produces to Kafka in it.
	StartBundle(ctx context.Context, emit func(pcoll string, data []byte) error, io BundleIO) (Bundle, error)
}

// BundleIO is what a bundle reads and writes besides its data: state (side
// inputs, user state) and, for stateful stages, the timers it sets.
type BundleIO struct {
	State  harness.StateHandler // nil: none
	Timers func(transformID, familyID string, data []byte) error
	// CacheTokens let the SDK cache the side inputs they name across
	// bundles (harness.WithCacheTokens); nil: none.
	CacheTokens []*fnpb.ProcessBundleRequest_CacheToken
}

// perTaskExecutor is a Executor that keeps state per task (a WASM
// instance, which must not be shared across goroutines): each task runs
// the stage through its own taskExecutor.
type perTaskExecutor interface {
	Executor
	newTaskExecutor() taskExecutor
}

// taskExecutor is one task's executor of a stage; the task closes it when
// it ends.
type taskExecutor interface {
	Executor
	close()
}

// ForTask returns the executor a new task uses for a stage.
func ForTask(e Executor) Executor {
	if p, ok := e.(perTaskExecutor); ok {
		return p.newTaskExecutor()
	}
	return e
}

// Release releases what ForTask made, when the task ends.
func Release(e Executor) {
	if t, ok := e.(taskExecutor); ok {
		t.close()
	}
}

// Bundle is one open bundle of a stage.
type Bundle interface {
	// Process hands the bundle whole encoded elements. data is only read
	// during the call: the task reuses its buffer afterwards.
	Process(data []byte) error
	// ProcessTimers delivers fired timers (encoded in the family's timer
	// coder) to a stateful transform of the stage.
	ProcessTimers(transformID, familyID string, data []byte) error
	Finish() (Result, error)
}

// Checkpointer is a Bundle of a stage whose input goes to a splittable
// DoFn (translate.Stage.Checkpointable) that can stop it where it is.
type Checkpointer interface {
	// FinishCheckpointing is Finish, except that a bundle still running
	// at time at is checkpointed: its running restriction stops at the
	// current position and the rest comes back among the Residuals, and
	// the input elements from Result.Unprocessed on were not processed.
	// inputElements is how many elements the bundle was handed.
	FinishCheckpointing(at time.Time, inputElements int) (Result, error)
}

// Splitter is a Bundle of a stage whose input goes to a splittable DoFn
// that can give part of its running work to another bundle.
type Splitter interface {
	// Split cuts the bundle's work at fraction of its remainder, while
	// another goroutine may wait in FinishCheckpointing (whose Result then
	// holds none of it). ok false: the SDK declined, nothing moved.
	// Otherwise Split.Residuals are the rest of the running element and
	// the input elements from Split.Unprocessed on (-1: none) were not
	// processed: both are the caller's.
	Split(fraction float64, inputElements int) (Split, bool, error)
}

// Split is the work a Splitter gave up.
type Split struct {
	Residuals   []Residual
	Unprocessed int
}

// Result is what a finished bundle returns besides its output.
type Result struct {
	// Residuals are the parts of the input to process again (splittable
	// DoFn checkpoints).
	Residuals []Residual
	Metrics   []*pipepb.MonitoringInfo
	// Finalize, when set, is called once the bundle's output and state are
	// committed (Beam's bundle finalization).
	Finalize func(context.Context) error
	// Checkpointed says FinishCheckpointing stopped the bundle before it
	// ended; Unprocessed is then the index of the first input element it
	// did not process (-1: none; its rest is among the Residuals).
	Checkpointed bool
	Unprocessed  int
}

// Residual is one self-checkpoint of a splittable DoFn.
type Residual struct {
	// Element is an encoded windowed value of the stage's input.
	Element []byte
	// Delay is how long the DoFn asked to wait before it resumes.
	Delay time.Duration
	// OutputWatermark, if Estimated, is the SDK's estimate of the
	// residual's output watermark (milliseconds; the least over the
	// DoFn's outputs): nothing the residual outputs is behind it.
	OutputWatermark int64
	Estimated       bool
}

// Harness runs a stage registered with an SDK harness.
func Harness(stage *harness.Stage) Executor { return harnessExecutor{stage: stage} }

// harnessWorkers runs a stage registered with several workers of one
// environment (sdk_worker_parallelism): each task's bundles go to one
// worker, the tasks taking the workers in turn, so that the workers of an
// SDK that runs one bundle at a time per process (Python's share an
// interpreter) run the tasks in parallel.
func harnessWorkers(stages []*harness.Stage) Executor {
	if len(stages) == 1 {
		return Harness(stages[0])
	}
	return &workerSpread{stages: stages}
}

type workerSpread struct {
	stages []*harness.Stage
	next   atomic.Uint64 // the worker of the next task, modulo len(stages)
}

// StartBundle runs on the first worker: tasks get their own (ForTask).
func (w *workerSpread) StartBundle(ctx context.Context, emit func(string, []byte) error, io BundleIO) (Bundle, error) {
	return harnessExecutor{stage: w.stages[0]}.StartBundle(ctx, emit, io)
}

func (w *workerSpread) newTaskExecutor() taskExecutor {
	i := (w.next.Add(1) - 1) % uint64(len(w.stages))
	return workerTaskExecutor{harnessExecutor{stage: w.stages[i]}}
}

// workerTaskExecutor is a task's worker of a workerSpread; nothing to
// release when the task ends (the worker serves the other tasks).
type workerTaskExecutor struct{ harnessExecutor }

func (workerTaskExecutor) close() {}

type harnessExecutor struct {
	stage *harness.Stage
}

func (e harnessExecutor) StartBundle(ctx context.Context, emit func(string, []byte) error, io BundleIO) (Bundle, error) {
	var opts []harness.BundleOption
	if io.State != nil {
		opts = append(opts, harness.WithStateHandler(io.State))
	}
	if io.Timers != nil {
		opts = append(opts, harness.WithTimerOutput(io.Timers))
	}
	if io.CacheTokens != nil {
		opts = append(opts, harness.WithCacheTokens(io.CacheTokens))
	}
	b, err := e.stage.StartBundle(ctx, emit, opts...)
	if err != nil {
		return nil, err
	}
	return harnessBundle{b}, nil
}

type harnessBundle struct{ b *harness.Bundle }

func (b harnessBundle) Process(data []byte) error { return b.b.Process(data) }

func (b harnessBundle) ProcessTimers(transformID, familyID string, data []byte) error {
	return b.b.ProcessTimers(transformID, familyID, data)
}

func (b harnessBundle) Finish() (Result, error) {
	return b.FinishCheckpointing(time.Time{}, 0)
}

func (b harnessBundle) FinishCheckpointing(at time.Time, inputElements int) (Result, error) {
	res, err := b.b.FinishCheckpointing(at, inputElements)
	if err != nil {
		return Result{}, err
	}
	out := Result{Metrics: res.MonitoringInfos, Checkpointed: res.Checkpointed, Unprocessed: res.Unprocessed}
	if res.RequiresFinalization {
		out.Finalize = b.b.Finalize
	}
	for _, r := range res.Residuals {
		out.Residuals = append(out.Residuals, harnessResidual(r))
	}
	return out, nil
}

func (b harnessBundle) Split(fraction float64, inputElements int) (Split, bool, error) {
	rs, unprocessed, ok, err := b.b.Split(fraction, inputElements)
	if err != nil || !ok {
		return Split{}, false, err
	}
	out := Split{Unprocessed: unprocessed}
	for _, r := range rs {
		out.Residuals = append(out.Residuals, harnessResidual(r))
	}
	return out, true, nil
}

// harnessResidual is r with its output watermark estimate, the least over
// its outputs, clamped to Beam's range of timestamps.
func harnessResidual(r harness.Residual) Residual {
	out := Residual{Element: r.Element, Delay: r.Delay}
	for _, ts := range r.OutputWatermarks {
		var ms int64
		switch {
		case ts.After(mtime.MaxTimestamp.ToTime()):
			ms = int64(mtime.MaxTimestamp)
		case ts.Before(mtime.MinTimestamp.ToTime()):
			ms = int64(mtime.MinTimestamp)
		default:
			ms = ts.UnixMilli()
		}
		if !out.Estimated || ms < out.OutputWatermark {
			out.OutputWatermark, out.Estimated = ms, true
		}
	}
	return out
}
