package executor

import (
	"context"
	"fmt"
	"runtime"
	"slices"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/translate"
)

// Start starts the SDK harness environments of the plan and registers every
// harness stage with them; WASM stages get the executors of wasm (prepared
// by PrepareWASM; nil when the plan has none). The
// returned func stops them.
//
// An environment whose SDK runs one bundle at a time per process (it does
// not declare URNMultiCore: Python) gets workers of its own, 0 meaning one
// per CPU core (sdk_worker_parallelism); each task of a stage runs its
// bundles on one of them (harnessWorkers). Other environments get one
// worker, which uses every core.
func Start(ctx context.Context, plan *translate.Plan, wasm *WASM, hc harness.Config, workers int) (map[string]Executor, func(), error) {
	execs, _, stop, err := start(ctx, plan, wasm, hc, workers, false)
	return execs, stop, err
}

// URNMultiCore is the capability of an SDK that processes bundles on
// several cores in one worker process.
const URNMultiCore = "beam:protocol:multi_core_bundle_processing:v1"

// workersOf is how many workers env gets for workers (the option; 0: one
// per CPU core).
func workersOf(env *pipepb.Environment, workers int) int {
	if slices.Contains(env.GetCapabilities(), URNMultiCore) {
		return 1
	}
	if workers == 0 {
		return runtime.NumCPU()
	}
	return max(workers, 1)
}

// workerEnvID is the harness environment id of worker k of envID: the
// first is envID itself, so that one worker is what it always was.
func workerEnvID(envID string, k int) string {
	if k == 0 {
		return envID
	}
	return fmt.Sprintf("%s#worker-%d", envID, k)
}

// StartAvailable is Start for a process that may run only part of the job
// (a worker, or a restarted job server, with no SDK of its own beside it):
// a stage whose environment cannot be started is not an error but is
// returned in unrunnable, by stage id, with the reason; the caller takes
// no tasks of its sub-topology. Plan errors still fail.
func StartAvailable(ctx context.Context, plan *translate.Plan, wasm *WASM, hc harness.Config, workers int) (execs map[string]Executor, unrunnable map[string]error, stop func(), err error) {
	return start(ctx, plan, wasm, hc, workers, true)
}

func start(ctx context.Context, plan *translate.Plan, wasm *WASM, hc harness.Config, workers int, partial bool) (map[string]Executor, map[string]error, func(), error) {
	execs := map[string]Executor{}
	unrunnable := map[string]error{}
	needHarness := false
	for _, st := range plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			switch s.Executor {
			case translate.ExecutorHarness:
				needHarness = true
			case translate.ExecutorWASM:
				if wasm == nil || wasm.execs[s.ID] == nil {
					return nil, nil, nil, fmt.Errorf("stage %s: WASM module was not prepared", s.ID)
				}
				execs[s.ID] = wasm.execs[s.ID]
			default:
				return nil, nil, nil, fmt.Errorf("stage %s: unknown executor %d", s.ID, s.Executor)
			}
		}
	}
	if !needHarness {
		return execs, unrunnable, func() {}, nil
	}
	h, err := harness.Start(ctx, hc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("starting the Fn API services: %w", err)
	}
	envFailed := map[string]error{}
	envs := plan.Pipeline.GetComponents().GetEnvironments()
	for _, st := range plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			if s.Executor != translate.ExecutorHarness {
				continue
			}
			env, ok := envs[s.EnvironmentID]
			if !ok {
				h.Close()
				return nil, nil, nil, fmt.Errorf("stage %s: unknown environment %q", s.ID, s.EnvironmentID)
			}
			if err := envFailed[s.EnvironmentID]; err != nil {
				unrunnable[s.ID] = err
				continue
			}
			n := workersOf(env, workers)
			var startErr error
			for k := range n {
				if startErr = h.StartEnvironment(ctx, workerEnvID(s.EnvironmentID, k), env); startErr != nil {
					break
				}
			}
			if startErr != nil {
				if partial && ctx.Err() == nil {
					envFailed[s.EnvironmentID] = startErr
					unrunnable[s.ID] = startErr
					continue
				}
				h.Close()
				return nil, nil, nil, fmt.Errorf("stage %s: %w", s.ID, startErr)
			}
			var fams []harness.TimerFamily
			for _, f := range s.TimerFamilies {
				fams = append(fams, harness.TimerFamily{TransformID: f.TransformID, FamilyID: f.FamilyID})
			}
			stages := make([]*harness.Stage, n)
			for k := range n {
				hs, err := h.Stage(ctx, workerEnvID(s.EnvironmentID, k), s.Descriptor, s.InputTransform, s.OutputTransforms, harness.WithTimerFamilies(fams))
				if err != nil {
					h.Close()
					return nil, nil, nil, fmt.Errorf("stage %s: %w", s.ID, err)
				}
				stages[k] = hs
			}
			execs[s.ID] = harnessWorkers(stages)
		}
	}
	return execs, unrunnable, func() { h.Close() }, nil
}
