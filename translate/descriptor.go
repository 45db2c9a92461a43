package translate

import (
	"fmt"
	"maps"
	"slices"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// buildDescriptor builds the ProcessBundleDescriptor of a stage: its fused
// transforms, a data source for its input and a data sink per output (both
// with the wire coder and an empty ApiServiceDescriptor), and every
// PCollection, coder, windowing strategy and environment they refer to.
func (t *translator) buildDescriptor(s *Stage) error {
	d := &fnpb.ProcessBundleDescriptor{
		Id:                  s.ID,
		Transforms:          map[string]*pipepb.PTransform{},
		Pcollections:        map[string]*pipepb.PCollection{},
		WindowingStrategies: map[string]*pipepb.WindowingStrategy{},
		Coders:              map[string]*pipepb.Coder{},
		Environments:        map[string]*pipepb.Environment{},
	}
	var err error
	var addCoder func(id string)
	addCoder = func(id string) {
		if err != nil || d.Coders[id] != nil {
			return
		}
		c := t.comps.GetCoders()[id]
		if c == nil {
			err = fmt.Errorf("coder %q is not defined", id)
			return
		}
		d.Coders[id] = c
		for _, cc := range c.GetComponentCoderIds() {
			addCoder(cc)
		}
	}
	addEnv := func(id string) {
		if id == "" || err != nil {
			return
		}
		e := t.comps.GetEnvironments()[id]
		if e == nil {
			err = fmt.Errorf("environment %q is not defined", id)
			return
		}
		d.Environments[id] = e
	}
	addPCollection := func(id string) {
		if err != nil || d.Pcollections[id] != nil {
			return
		}
		pc := t.comps.GetPcollections()[id]
		d.Pcollections[id] = proto.Clone(pc).(*pipepb.PCollection)
		addCoder(pc.GetCoderId())
		ws := t.comps.GetWindowingStrategies()[pc.GetWindowingStrategyId()]
		d.WindowingStrategies[pc.GetWindowingStrategyId()] = ws
		addCoder(ws.GetWindowCoderId())
		addEnv(ws.GetEnvironmentId())
	}

	for _, id := range s.Transforms {
		tr := t.comps.GetTransforms()[id]
		d.Transforms[id] = proto.Clone(tr).(*pipepb.PTransform)
		for _, pc := range tr.GetInputs() {
			addPCollection(pc)
		}
		for _, pc := range tr.GetOutputs() {
			addPCollection(pc)
		}
		addEnv(tr.GetEnvironmentId())
		switch tr.GetSpec().GetUrn() {
		case urnParDo, urnSDFPairWithRestriction, urnSDFSplitAndSize, urnSDFProcessSizedElements:
			pd := &pipepb.ParDoPayload{}
			if e := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); e != nil {
				return fmt.Errorf("transform %q: decoding ParDoPayload: %w", tr.GetUniqueName(), e)
			}
			if rc := pd.GetRestrictionCoderId(); rc != "" {
				addCoder(rc)
			}
			rewritten := false
			for _, sid := range sortedKeys(pd.GetStateSpecs()) {
				sp := pd.GetStateSpecs()[sid]
				if ol := sp.GetOrderedListSpec(); ol != nil {
					// The host splits and sorts ordered list values, so
					// their elements must be in a coder it can parse.
					safe, e := t.safeCoder(ol.GetElementCoderId())
					if e != nil {
						return fmt.Errorf("transform %q: ordered list state %q: %w", tr.GetUniqueName(), sid, e)
					}
					ol.ElementCoderId = safe
					rewritten = true
					s.OrderedLists = append(s.OrderedLists, OrderedListState{TransformID: id, StateID: sid, ElementCoderID: safe})
				}
				for _, c := range []string{
					sp.GetReadModifyWriteSpec().GetCoderId(), sp.GetBagSpec().GetElementCoderId(),
					sp.GetCombiningSpec().GetAccumulatorCoderId(), sp.GetMapSpec().GetKeyCoderId(),
					sp.GetMapSpec().GetValueCoderId(), sp.GetSetSpec().GetElementCoderId(),
					sp.GetOrderedListSpec().GetElementCoderId(), sp.GetMultimapSpec().GetKeyCoderId(),
					sp.GetMultimapSpec().GetValueCoderId(),
				} {
					if c != "" {
						addCoder(c)
					}
				}
			}
			for _, fam := range sortedKeys(pd.GetTimerFamilySpecs()) {
				spec := pd.GetTimerFamilySpecs()[fam]
				safe, e := t.safeCoder(spec.GetTimerFamilyCoderId())
				if e != nil {
					return fmt.Errorf("transform %q: timer family %q: %w", tr.GetUniqueName(), fam, e)
				}
				if safe != spec.GetTimerFamilyCoderId() {
					spec.TimerFamilyCoderId = safe
					rewritten = true
				}
				addCoder(safe)
			}
			if rewritten {
				b, e := proto.Marshal(pd)
				if e != nil {
					return fmt.Errorf("transform %q: %w", tr.GetUniqueName(), e)
				}
				d.Transforms[id].Spec.Payload = b
			}
		case urnCombinePrecombine, urnCombineMergeAccumulators, urnCombineExtractOutputs:
			cp := &pipepb.CombinePayload{}
			if e := proto.Unmarshal(tr.GetSpec().GetPayload(), cp); e != nil {
				return fmt.Errorf("transform %q: decoding CombinePayload: %w", tr.GetUniqueName(), e)
			}
			addCoder(cp.GetAccumulatorCoderId())
		}
	}
	addEnv(s.EnvironmentID)
	if err != nil {
		return err
	}

	// The input PCollection carries the host-parseable element coder, as
	// the data source decodes it with (Prism does the same).
	inWire := t.wireCoders[s.Input]
	if s.PagedGroups {
		if paged, ok := t.pagedCoder(s.Input, true); ok {
			inWire = paged
		}
	}
	d.Pcollections[s.Input].CoderId = t.comps.GetCoders()[inWire].GetComponentCoderIds()[0]
	addCoder(inWire)
	// Side input values are served as the host stores them: in the wire
	// element coder.
	for _, si := range s.SideInputs {
		w := t.wireCoders[si.PCollection]
		d.Pcollections[si.PCollection].CoderId = t.comps.GetCoders()[w].GetComponentCoderIds()[0]
		addCoder(w)
	}

	taken := func(id string) bool { return d.Transforms[id] != nil || t.comps.GetTransforms()[id] != nil }
	port := func(coder string) ([]byte, error) {
		return proto.Marshal(&fnpb.RemoteGrpcPort{CoderId: coder, ApiServiceDescriptor: &pipepb.ApiServiceDescriptor{}})
	}
	src := uniqueID(s.ID+"_source", taken)
	pl, e := port(inWire)
	if e != nil {
		return e
	}
	d.Transforms[src] = &pipepb.PTransform{
		UniqueName: src,
		Spec:       &pipepb.FunctionSpec{Urn: urnDataSource, Payload: pl},
		Outputs:    map[string]string{"i0": s.Input},
	}
	s.InputTransform = src
	for _, id := range s.Transforms {
		tr := t.comps.GetTransforms()[id]
		if tr.GetSpec().GetUrn() == urnSDFProcessSizedElements && slices.Contains(slices.Collect(maps.Values(tr.GetInputs())), s.Input) {
			s.Checkpointable = true
		}
	}
	s.OutputTransforms = map[string]string{}
	for i, out := range s.Outputs {
		w := t.wireCoders[out]
		addCoder(w)
		sink := uniqueID(fmt.Sprintf("%s_sink_%d", s.ID, i), taken)
		pl, e := port(w)
		if e != nil {
			return e
		}
		d.Transforms[sink] = &pipepb.PTransform{
			UniqueName: sink,
			Spec:       &pipepb.FunctionSpec{Urn: urnDataSink, Payload: pl},
			Inputs:     map[string]string{"i0": out},
		}
		s.OutputTransforms[sink] = out
	}
	if err != nil {
		return err
	}
	s.Descriptor = d
	return nil
}
