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
	execs := map[string]Executor{}
	needHarness := false
	for _, st := range plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			switch s.Executor {
			case translate.ExecutorHarness:
				needHarness = true
			case translate.ExecutorWASM:
				if wasm == nil || wasm.execs[s.ID] == nil {
					return nil, nil, fmt.Errorf("stage %s: WASM module was not prepared", s.ID)
				}
				execs[s.ID] = wasm.execs[s.ID]
			default:
				return nil, nil, fmt.Errorf("stage %s: unknown executor %d", s.ID, s.Executor)
			}
		}
	}
	if !needHarness {
		return execs, func() {}, nil
	}
	h, err := harness.Start(ctx, hc)
	if err != nil {
		return nil, nil, fmt.Errorf("starting the Fn API services: %w", err)
	}
	envs := plan.Pipeline.GetComponents().GetEnvironments()
	for _, st := range plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			if s.Executor != translate.ExecutorHarness {
				continue
			}
			env, ok := envs[s.EnvironmentID]
			if !ok {
				h.Close()
				return nil, nil, fmt.Errorf("stage %s: unknown environment %q", s.ID, s.EnvironmentID)
			}
			if err := h.StartEnvironment(ctx, s.EnvironmentID, env); err != nil {
				h.Close()
				return nil, nil, fmt.Errorf("stage %s: %w", s.ID, err)
			}
			var fams []harness.TimerFamily
			for _, f := range s.TimerFamilies {
				fams = append(fams, harness.TimerFamily{TransformID: f.TransformID, FamilyID: f.FamilyID})
			}
			hs, err := h.Stage(ctx, s.EnvironmentID, s.Descriptor, s.InputTransform, s.OutputTransforms, harness.WithTimerFamilies(fams))
			if err != nil {
				h.Close()
				return nil, nil, fmt.Errorf("stage %s: %w", s.ID, err)
			}
			execs[s.ID] = Harness(hs)
		}
	}
	return execs, func() { h.Close() }, nil
}
