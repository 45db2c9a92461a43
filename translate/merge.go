package translate

import (
	"fmt"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate/windowing"
)

// This file builds the merge stage of a GroupByKey over a custom merging
// WindowFn (one whose URN the host does not know, e.g. a Python WindowFn
// with a merge method). The host cannot merge such windows itself, so it
// asks the SDK that defined the WindowFn, through the Fn API's
// beam:transform:merge_windows:v1 transform:
//
//	input:  KV<nonce, Iterable<window>>
//	output: KV<nonce, KV<Iterable<unmerged window>, Iterable<KV<merge result, Iterable<merged window>>>>>
//
// both in the global window. The host sends one element per key with the
// key's active windows and the windows of the new elements, the encoded key
// as the nonce.

var urnMergeWindows = beamURN(pipepb.StandardPTransforms_MERGE_WINDOWS)

// isCustomMerging reports whether ws merges windows with a WindowFn the
// host does not implement.
func isCustomMerging(ws *pipepb.WindowingStrategy) bool {
	if ws.GetMergeStatus() == pipepb.MergeStatus_NON_MERGING {
		return false
	}
	_, err := windowing.WindowFnFromSpec(ws.GetWindowFn())
	return err != nil
}

// mergeStage builds the harness stage that merges the windows of the
// GroupByKey rootID (whose input is in) in the SDK environment of its
// windowing strategy.
func (t *translator) mergeStage(rootID, in, stageID string) (*Stage, error) {
	name := t.name(rootID)
	ws := t.comps.GetWindowingStrategies()[t.inWS(in)]
	env := ws.GetEnvironmentId()
	if env == "" {
		return nil, fmt.Errorf("transform %q: GroupByKey over the custom merging WindowFn %s: its windowing strategy names no SDK environment to merge windows in", name, ws.GetWindowFn().GetUrn())
	}
	if t.comps.GetEnvironments()[env] == nil {
		return nil, fmt.Errorf("transform %q: GroupByKey over the custom merging WindowFn %s: environment %q is not defined", name, ws.GetWindowFn().GetUrn(), env)
	}
	payload, err := proto.Marshal(ws.GetWindowFn())
	if err != nil {
		return nil, fmt.Errorf("transform %q: %w", name, err)
	}
	coder := func(base, urn string, components ...string) string {
		return t.addCoder(base, &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: components})
	}
	win := ws.GetWindowCoderId()
	nonce := coder("merge_nonce", urnCoderBytes)
	windows := coder("merge_windows", urnCoderIterable, win)
	inElem := coder("merge_in", urnCoderKV, nonce, windows)
	merged := coder("merge_result", urnCoderKV, win, windows)
	result := coder("merge_results", urnCoderKV, windows, coder("merge_result_list", urnCoderIterable, merged))
	outElem := coder("merge_out", urnCoderKV, nonce, result)
	global := coder("merge_global_window", urnCoderGlobalWindow)
	inWire := coder("merge_in_wv", urnCoderWindowedValue, inElem, global)
	outWire := coder("merge_out_wv", urnCoderWindowedValue, outElem, global)

	globalWS := &pipepb.WindowingStrategy{
		WindowFn:         &pipepb.FunctionSpec{Urn: windowing.URNGlobalWindows},
		MergeStatus:      pipepb.MergeStatus_NON_MERGING,
		WindowCoderId:    global,
		Trigger:          &pipepb.Trigger{Trigger: &pipepb.Trigger_Default_{Default: &pipepb.Trigger_Default{}}},
		AccumulationMode: pipepb.AccumulationMode_DISCARDING,
		OutputTime:       pipepb.OutputTime_END_OF_WINDOW,
		ClosingBehavior:  pipepb.ClosingBehavior_EMIT_IF_NONEMPTY,
		OnTimeBehavior:   pipepb.OnTimeBehavior_FIRE_ALWAYS,
		EnvironmentId:    env,
	}
	wsID := uniqueID(stageID+"_ws", func(s string) bool { return t.comps.GetWindowingStrategies()[s] != nil })
	t.comps.WindowingStrategies[wsID] = globalWS

	taken := func(s string) bool {
		return t.comps.GetTransforms()[s] != nil || t.comps.GetPcollections()[s] != nil
	}
	inPC := uniqueID(stageID+"_windows", taken)
	outPC := uniqueID(stageID+"_merged", taken)
	mergeID := uniqueID(stageID+"_merge_windows", taken)
	srcID := uniqueID(stageID+"_source", taken)
	sinkID := uniqueID(stageID+"_sink_0", taken)
	port := func(c string) ([]byte, error) {
		return proto.Marshal(&fnpb.RemoteGrpcPort{CoderId: c, ApiServiceDescriptor: &pipepb.ApiServiceDescriptor{}})
	}
	srcPort, err := port(inWire)
	if err != nil {
		return nil, err
	}
	sinkPort, err := port(outWire)
	if err != nil {
		return nil, err
	}
	d := &fnpb.ProcessBundleDescriptor{
		Id: stageID,
		Transforms: map[string]*pipepb.PTransform{
			srcID: {UniqueName: srcID, Spec: &pipepb.FunctionSpec{Urn: urnDataSource, Payload: srcPort}, Outputs: map[string]string{"i0": inPC}},
			mergeID: {
				UniqueName:    name + "/MergeWindows",
				Spec:          &pipepb.FunctionSpec{Urn: urnMergeWindows, Payload: payload},
				Inputs:        map[string]string{"in": inPC},
				Outputs:       map[string]string{"out": outPC},
				EnvironmentId: env,
			},
			sinkID: {UniqueName: sinkID, Spec: &pipepb.FunctionSpec{Urn: urnDataSink, Payload: sinkPort}, Inputs: map[string]string{"i0": outPC}},
		},
		Pcollections: map[string]*pipepb.PCollection{
			inPC:  {UniqueName: inPC, CoderId: inElem, IsBounded: pipepb.IsBounded_BOUNDED, WindowingStrategyId: wsID},
			outPC: {UniqueName: outPC, CoderId: outElem, IsBounded: pipepb.IsBounded_BOUNDED, WindowingStrategyId: wsID},
		},
		WindowingStrategies: map[string]*pipepb.WindowingStrategy{wsID: globalWS},
		Coders:              map[string]*pipepb.Coder{},
		Environments:        map[string]*pipepb.Environment{env: t.comps.GetEnvironments()[env]},
	}
	var add func(id string)
	add = func(id string) {
		if d.Coders[id] != nil {
			return
		}
		c := t.comps.GetCoders()[id]
		d.Coders[id] = c
		for _, cc := range c.GetComponentCoderIds() {
			add(cc)
		}
	}
	add(inWire)
	add(outWire)
	t.wireCoders[inPC] = inWire
	t.wireCoders[outPC] = outWire
	return &Stage{
		ID:               stageID,
		Executor:         ExecutorHarness,
		Transforms:       []string{mergeID},
		Input:            inPC,
		Outputs:          []string{outPC},
		EnvironmentID:    env,
		Descriptor:       d,
		InputTransform:   srcID,
		OutputTransforms: map[string]string{sinkID: outPC},
	}, nil
}
