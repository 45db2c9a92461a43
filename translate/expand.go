package translate

import (
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate/windowing"
)

// checkParDo rejects the ParDo features the runner does not support yet.
func checkParDo(name string, pd *pipepb.ParDoPayload) error {
	for _, local := range sortedKeys(pd.GetSideInputs()) {
		switch urn := pd.GetSideInputs()[local].GetAccessPattern().GetUrn(); urn {
		case urnSideInputIterable, urnSideInputMultimap:
		default:
			return fmt.Errorf("transform %q: side input %q: unsupported access pattern %q", name, local, urn)
		}
	}
	for _, id := range sortedKeys(pd.GetTimerFamilySpecs()) {
		switch d := pd.GetTimerFamilySpecs()[id].GetTimeDomain(); d {
		case pipepb.TimeDomain_EVENT_TIME, pipepb.TimeDomain_PROCESSING_TIME:
		default:
			return fmt.Errorf("transform %q: timer family %q: time domain %v is not supported", name, id, d)
		}
	}
	if pd.GetOnWindowExpirationTimerFamilySpec() != "" {
		return fmt.Errorf("transform %q: on-window-expiration is not supported yet", name)
	}
	if pd.GetRequiresTimeSortedInput() && (len(pd.GetStateSpecs())+len(pd.GetTimerFamilySpecs()) == 0 || pd.GetRestrictionCoderId() != "" || len(pd.GetSideInputs()) > 0) {
		return fmt.Errorf("transform %q: time-sorted input is supported for stateful DoFns (user state or timers) without side inputs that are not splittable", name)
	}
	if pd.GetRequiresStableInput() && pd.GetRestrictionCoderId() != "" {
		return fmt.Errorf("transform %q: a splittable DoFn that requires stable input is not supported yet", name)
	}
	return nil
}

// checkSDKPayload validates the payload of an SDF or combine component.
func (t *translator) checkSDKPayload(tr *pipepb.PTransform) error {
	if len(tr.GetOutputs()) == 0 && tr.GetSpec().GetUrn() != urnSDFProcessSizedElements {
		return fmt.Errorf("transform %q: %s needs an output", tr.GetUniqueName(), tr.GetSpec().GetUrn())
	}
	switch tr.GetSpec().GetUrn() {
	case urnSDFPairWithRestriction, urnSDFSplitAndSize, urnSDFProcessSizedElements:
		pd := &pipepb.ParDoPayload{}
		if err := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); err != nil {
			return fmt.Errorf("transform %q: decoding ParDoPayload: %w", tr.GetUniqueName(), err)
		}
		return checkParDo(tr.GetUniqueName(), pd)
	default:
		cp := &pipepb.CombinePayload{}
		if err := proto.Unmarshal(tr.GetSpec().GetPayload(), cp); err != nil {
			return fmt.Errorf("transform %q: decoding CombinePayload: %w", tr.GetUniqueName(), err)
		}
	}
	return nil
}

// addParDo validates a ParDo leaf and expands it when it is splittable.
func (t *translator) addParDo(id string, tr *pipepb.PTransform) error {
	name := tr.GetUniqueName()
	pd := &pipepb.ParDoPayload{}
	if err := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); err != nil {
		return fmt.Errorf("transform %q: decoding ParDoPayload: %w", name, err)
	}
	if err := checkParDo(name, pd); err != nil {
		return err
	}
	if n := len(tr.GetInputs()) - len(pd.GetSideInputs()); n != 1 {
		return fmt.Errorf("transform %q: a ParDo needs exactly one main input, has %d", name, n)
	}
	for local := range pd.GetSideInputs() {
		if _, ok := tr.GetInputs()[local]; !ok {
			return fmt.Errorf("transform %q: side input %q is not among its inputs", name, local)
		}
	}
	if len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0 {
		if pd.GetRestrictionCoderId() != "" {
			return fmt.Errorf("transform %q: a splittable DoFn with user state or timers is not supported", name)
		}
		_, in := mainInput(tr)
		if c := t.comps.GetCoders()[t.comps.GetPcollections()[in].GetCoderId()]; c.GetSpec().GetUrn() != urnCoderKV {
			return fmt.Errorf("transform %q: a DoFn with user state or timers needs a KV input, has coder %s", name, c.GetSpec().GetUrn())
		}
		t.statefulOf[id] = true
		ws := t.comps.GetWindowingStrategies()[t.comps.GetPcollections()[in].GetWindowingStrategyId()]
		if pd.GetRequiresTimeSortedInput() {
			t.timeSortedOf[id] = max(ws.GetAllowedLateness(), 0)
		}
		if ws.GetWindowFn().GetUrn() != windowing.URNGlobalWindows {
			t.stateExpiryOf[id] = max(ws.GetAllowedLateness(), 0)
		}
		for _, fam := range sortedKeys(pd.GetTimerFamilySpecs()) {
			spec := pd.GetTimerFamilySpecs()[fam]
			// The host stores and fires timers, so it must parse them:
			// buildDescriptor gives the SDK this coder.
			coder, err := t.safeCoder(spec.GetTimerFamilyCoderId())
			if err != nil {
				return fmt.Errorf("transform %q: timer family %q: %w", name, fam, err)
			}
			t.timersOf[id] = append(t.timersOf[id], TimerFamily{
				TransformID: id, FamilyID: fam,
				EventTime: spec.GetTimeDomain() == pipepb.TimeDomain_EVENT_TIME,
				CoderID:   coder,
			})
		}
	}
	if pd.GetRequiresStableInput() && !t.statefulOf[id] && len(pd.GetSideInputs()) == 0 {
		t.stableInput(id, tr)
	}
	if pd.GetRestrictionCoderId() == "" {
		t.addLeaf(id, kindSDK)
		return nil
	}
	return t.expandSDF(id, tr, pd)
}

// stableInput gives ParDo id, which requires stable input, a Redistribute of
// its main input run by the host: the ParDo then starts a sub-topology that
// reads the redistribute topic, whose records are committed before the
// ParDo sees them. A retried bundle (after an aborted transaction, a crash
// or a rebalance) so gets exactly the elements the first attempt got, even
// if the transforms before it are not deterministic; without the topic they
// would be fused with the ParDo and recompute its input. A stateful ParDo,
// or one with side inputs, reads its main input from a topic of its own
// already (layout's "-main" topic).
func (t *translator) stableInput(id string, tr *pipepb.PTransform) {
	local, in := mainInput(tr)
	pc := t.comps.GetPcollections()[in]
	stable := t.addPCollection(in+"_stable", pc, pc.GetCoderId())
	rid := uniqueID(id+"_stable_input", func(s string) bool { return t.comps.GetTransforms()[s] != nil })
	t.comps.Transforms[rid] = &pipepb.PTransform{
		UniqueName: t.uniqueName(t.name(id) + "/StableInput"),
		Spec:       &pipepb.FunctionSpec{Urn: urnRedistributeArbitrarily},
		Inputs:     map[string]string{"input": in},
		Outputs:    map[string]string{"output": stable},
	}
	t.parent[rid] = t.parent[id]
	t.addLeaf(rid, kindRedistribute)
	tr.Inputs[local] = stable
}

// expandSDF replaces a splittable ParDo by its three SDK-executed parts
// (as Prism does): pair with restriction, split and size, and process sized
// elements and restrictions. The process transform is forced to head its own
// stage so that the host can feed residuals back as the stage's input.
//
//	INPUT E → PairWithRestriction → KV<E, R> → SplitAndSize → KV<KV<E, R>, double>
//	  → SpreadRestrictions (a host Redistribute) → Process → outputs
//
// The original transform becomes a composite of the three.
func (t *translator) expandSDF(id string, tr *pipepb.PTransform, pd *pipepb.ParDoPayload) error {
	name := tr.GetUniqueName()
	inLocal, inID := mainInput(tr)
	in := t.comps.GetPcollections()[inID]
	if in == nil {
		return fmt.Errorf("transform %q: input PCollection %q is not defined", name, inID)
	}
	cR := pd.GetRestrictionCoderId()
	if t.comps.GetCoders()[cR] == nil {
		return fmt.Errorf("transform %q: restriction coder %q is not defined", name, cR)
	}
	cS := t.addCoder(id+"_size", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderDouble}})
	cER := t.addCoder(id+"_elem_restriction", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{in.GetCoderId(), cR}})
	cERS := t.addCoder(id+"_elem_restriction_size", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{cER, cS}})

	pwr := t.addPCollection(id+"_pwr", in, cER)
	sns := t.addPCollection(id+"_splitnsized", in, cERS)

	// Each part gets the ParDo's side inputs, as Prism's expansion does:
	// the SDKs build every part from the ParDo payload, which names them
	// (Python's resolves them for each element; Java's restriction methods
	// may take them). Only the first part waits for them on a topic of its
	// own (layout); the others read what it made.
	mk := func(suffix, nameSuffix, urn, from string, outputs map[string]string) string {
		tid := uniqueID(id+suffix, func(s string) bool { return t.comps.GetTransforms()[s] != nil })
		inputs := map[string]string{inLocal: from}
		for local := range pd.GetSideInputs() {
			inputs[local] = tr.GetInputs()[local]
		}
		t.comps.Transforms[tid] = &pipepb.PTransform{
			UniqueName:    t.uniqueName(name + nameSuffix),
			Spec:          &pipepb.FunctionSpec{Urn: urn, Payload: tr.GetSpec().GetPayload()},
			Inputs:        inputs,
			Outputs:       outputs,
			EnvironmentId: tr.GetEnvironmentId(),
			Annotations:   tr.GetAnnotations(),
		}
		t.parent[tid] = id
		return tid
	}
	ePWR := mk("_pwr", "/PairWithRestriction", urnSDFPairWithRestriction, inID, map[string]string{"i0": pwr})
	eSNS := mk("_splitnsize", "/SplitAndSizeRestrictions", urnSDFSplitAndSize, pwr, map[string]string{"i0": sns})
	// The sized restrictions are spread over the tasks of a sub-topology
	// of their own (a Redistribute run by the host, internal_parallelism
	// partitions): a source's splits (textio's files and their ranges) are
	// read in parallel rather than by the one task of its producer.
	spread := t.addPCollection(id+"_spread", in, cERS)
	eSpread := uniqueID(id+"_spread", func(s string) bool { return t.comps.GetTransforms()[s] != nil })
	t.comps.Transforms[eSpread] = &pipepb.PTransform{
		UniqueName: t.uniqueName(name + "/SpreadRestrictions"),
		Spec:       &pipepb.FunctionSpec{Urn: urnRedistributeArbitrarily},
		Inputs:     map[string]string{"input": sns},
		Outputs:    map[string]string{"output": spread},
	}
	t.parent[eSpread] = id
	eProc := mk("_process", "/ProcessSizedElementsAndRestrictions", urnSDFProcessSizedElements, spread, tr.GetOutputs())
	tr.Subtransforms = []string{ePWR, eSNS, eSpread, eProc}
	t.addLeaf(ePWR, kindSDK)
	t.addLeaf(eSNS, kindSDK)
	t.addLeaf(eSpread, kindRedistribute)
	t.spreads[eSpread] = true
	t.addLeaf(eProc, kindSDK)
	t.forcedRoot[eProc] = true
	if len(pd.GetSideInputs()) > 0 {
		t.sidesUpstream[eSNS] = true
		t.sidesUpstream[eProc] = true
	}
	return nil
}

// liftCombine replaces a CombinePerKey over non-merging windows (and a
// strategy liftableStrategy accepts) by
// precombine → GroupByKey on KV<K, Accum> → merge accumulators → extract
// outputs (as Prism does). It reports false when the combine must run as its
// own expansion instead.
func (t *translator) liftCombine(id string, tr *pipepb.PTransform) (bool, error) {
	name := tr.GetUniqueName()
	if len(tr.GetInputs()) != 1 || len(tr.GetOutputs()) != 1 {
		return false, nil
	}
	cp := &pipepb.CombinePayload{}
	if err := proto.Unmarshal(tr.GetSpec().GetPayload(), cp); err != nil {
		return false, fmt.Errorf("transform %q: decoding CombinePayload: %w", name, err)
	}
	inID := onlyValue(tr.GetInputs())
	outID := onlyValue(tr.GetOutputs())
	in := t.comps.GetPcollections()[inID]
	if in == nil {
		return false, fmt.Errorf("transform %q: input PCollection %q is not defined", name, inID)
	}
	if t.comps.GetPcollections()[outID] == nil {
		return false, fmt.Errorf("transform %q: output PCollection %q is not defined", name, outID)
	}
	ws := t.comps.GetWindowingStrategies()[in.GetWindowingStrategyId()]
	if !liftableStrategy(ws) {
		return false, nil
	}
	kv := t.comps.GetCoders()[in.GetCoderId()]
	if kv.GetSpec().GetUrn() != urnCoderKV || len(kv.GetComponentCoderIds()) != 2 {
		return false, nil
	}
	cA := cp.GetAccumulatorCoderId()
	if t.comps.GetCoders()[cA] == nil {
		return false, fmt.Errorf("transform %q: accumulator coder %q is not defined", name, cA)
	}
	env := tr.GetEnvironmentId()
	if env == "" {
		env = t.firstLeafEnv(tr)
	}
	cK := kv.GetComponentCoderIds()[0]

	cIterA := t.addCoder(id+"_iter_accum", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderIterable}, ComponentCoderIds: []string{cA}})
	cKA := t.addCoder(id+"_kv_accum", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{cK, cA}})
	cKIterA := t.addCoder(id+"_kv_iter_accum", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{cK, cIterA}})

	// Drop the expansion: it is replaced.
	t.removeSubtree(tr.GetSubtransforms())

	lifted := t.addPCollection(id+"_lifted", in, cKA)
	grouped := t.addPCollection(id+"_grouped", in, cKIterA)
	merged := t.addPCollection(id+"_merged", in, cKA)

	mk := func(suffix, nameSuffix, urn, from, to, env string, payload []byte) string {
		tid := uniqueID(id+suffix, func(s string) bool { return t.comps.GetTransforms()[s] != nil })
		t.comps.Transforms[tid] = &pipepb.PTransform{
			UniqueName:    t.uniqueName(name + nameSuffix),
			Spec:          &pipepb.FunctionSpec{Urn: urn, Payload: payload},
			Inputs:        map[string]string{"i0": from},
			Outputs:       map[string]string{"i0": to},
			EnvironmentId: env,
		}
		t.parent[tid] = id
		return tid
	}
	pl := tr.GetSpec().GetPayload()
	ePre := mk("_precombine", "/Precombine", urnCombinePrecombine, inID, lifted, env, pl)
	eGBK := mk("_gbk", "/GroupByKey", urnGBK, lifted, grouped, "", nil)
	eMerge := mk("_merge", "/MergeAccumulators", urnCombineMergeAccumulators, grouped, merged, env, pl)
	eExtract := mk("_extract", "/ExtractOutputs", urnCombineExtractOutputs, merged, outID, env, pl)
	tr.Subtransforms = []string{ePre, eGBK, eMerge, eExtract}
	t.addLeaf(ePre, kindSDK)
	t.addLeaf(eGBK, kindGBK)
	t.rootTransform[eGBK] = id
	t.addLeaf(eMerge, kindSDK)
	t.addLeaf(eExtract, kindSDK)
	return true, nil
}

// firstLeafEnv returns the first environment found among a composite's
// descendants.
func (t *translator) firstLeafEnv(tr *pipepb.PTransform) string {
	for _, sub := range tr.GetSubtransforms() {
		st := t.comps.GetTransforms()[sub]
		if st == nil {
			continue
		}
		if e := st.GetEnvironmentId(); e != "" {
			return e
		}
		if e := t.firstLeafEnv(st); e != "" {
			return e
		}
	}
	return ""
}

// removeSubtree deletes transforms and their descendants from the components.
func (t *translator) removeSubtree(ids []string) {
	for _, id := range ids {
		tr := t.comps.GetTransforms()[id]
		if tr == nil {
			continue
		}
		t.removeSubtree(tr.GetSubtransforms())
		if t.names != nil {
			delete(t.names, tr.GetUniqueName())
		}
		delete(t.comps.Transforms, id)
	}
}

// addCoder adds a coder under a fresh id derived from base.
func (t *translator) addCoder(base string, c *pipepb.Coder) string {
	id := uniqueID(base, func(s string) bool { return t.comps.GetCoders()[s] != nil })
	t.comps.Coders[id] = c
	return id
}

// addPCollection adds a PCollection like `like` (boundedness, windowing) with
// the given coder under a fresh id derived from base.
func (t *translator) addPCollection(base string, like *pipepb.PCollection, coder string) string {
	id := uniqueID(base, func(s string) bool { return t.comps.GetPcollections()[s] != nil })
	t.comps.Pcollections[id] = &pipepb.PCollection{
		UniqueName:          id,
		CoderId:             coder,
		IsBounded:           like.GetIsBounded(),
		WindowingStrategyId: like.GetWindowingStrategyId(),
	}
	return id
}

// uniqueName returns a transform unique name not used in the pipeline.
func (t *translator) uniqueName(base string) string {
	if t.names == nil {
		t.names = map[string]bool{}
		for _, tr := range t.comps.GetTransforms() {
			t.names[tr.GetUniqueName()] = true
		}
	}
	n := uniqueID(base, func(s string) bool { return t.names[s] })
	t.names[n] = true
	return n
}
