package executor

import (
	"context"
	"fmt"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/translate"
)

// Start starts the SDK harness environments of the plan and registers every
// harness stage with them; WASM stages get the executors of wasm (prepared
// by PrepareWASM; nil when the plan has none). The
// returned func stops them.
func Start(ctx context.Context, plan *translate.Plan, wasm *WASM, hc harness.Config) (map[string]Executor, func(), error) {
	execs, _, stop, err := start(ctx, plan, wasm, hc, false)
	return execs, stop, err
}

// StartAvailable is Start for a process that may run only part of the job
// (a worker, or a restarted job server, with no SDK of its own beside it):
// a stage whose environment cannot be started is not an error but is
// returned in unrunnable, by stage id, with the reason; the caller takes
// no tasks of its sub-topology. Plan errors still fail.
func StartAvailable(ctx context.Context, plan *translate.Plan, wasm *WASM, hc harness.Config) (execs map[string]Executor, unrunnable map[string]error, stop func(), err error) {
	return start(ctx, plan, wasm, hc, true)
}

func start(ctx context.Context, plan *translate.Plan, wasm *WASM, hc harness.Config, partial bool) (map[string]Executor, map[string]error, func(), error) {
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
			if err := h.StartEnvironment(ctx, s.EnvironmentID, env); err != nil {
				if partial && ctx.Err() == nil {
					envFailed[s.EnvironmentID] = err
					unrunnable[s.ID] = err
					continue
				}
				h.Close()
				return nil, nil, nil, fmt.Errorf("stage %s: %w", s.ID, err)
			}
			var fams []harness.TimerFamily
			for _, f := range s.TimerFamilies {
				fams = append(fams, harness.TimerFamily{TransformID: f.TransformID, FamilyID: f.FamilyID})
			}
			hs, err := h.Stage(ctx, s.EnvironmentID, s.Descriptor, s.InputTransform, s.OutputTransforms, harness.WithTimerFamilies(fams))
			if err != nil {
				h.Close()
				return nil, nil, nil, fmt.Errorf("stage %s: %w", s.ID, err)
			}
			execs[s.ID] = Harness(hs)
		}
	}
	return execs, unrunnable, func() { h.Close() }, nil
}
