package translate

import (
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// transcodeFlattens makes every input of a Flatten use the Flatten's
// output coder. SDKs let a Flatten's inputs use other coders than its
// output (the Python SDK's CoGroupByKey flattens FastPrimitivesCoder tuples
// into a TupleCoder PCollection), but elements the host forwards between
// sub-topologies or through a runner-side flatten keep their bytes. So,
// as Prism does, an input whose coder differs gets a one-input Flatten of
// its own, run in the SDK, that decodes with the input's coder and
// encodes with the output's (an SDK flatten transcodes); the original
// Flatten then reads its output.
func (t *translator) transcodeFlattens() error {
	producer := map[string]string{}
	consumers := map[string][]string{}
	for _, id := range t.leaves {
		tr := t.comps.GetTransforms()[id]
		for _, pc := range tr.GetOutputs() {
			producer[pc] = id
		}
		for _, pc := range tr.GetInputs() {
			consumers[pc] = append(consumers[pc], id)
		}
	}
	var leaves []string
	for _, id := range t.leaves {
		tr := t.comps.GetTransforms()[id]
		if t.kind[id] != kindFlatten {
			leaves = append(leaves, id)
			continue
		}
		out := onlyValue(tr.GetOutputs())
		outPC := t.comps.GetPcollections()[out]
		for _, l := range sortedKeys(tr.GetInputs()) {
			in := tr.GetInputs()[l]
			inPC := t.comps.GetPcollections()[in]
			if inPC == nil || outPC == nil || t.coderEqual(inPC.GetCoderId(), outPC.GetCoderId()) {
				continue
			}
			env := t.transcodeEnv(tr.GetEnvironmentId(), producer[in], consumers[out])
			if env == "" {
				return fmt.Errorf("transform %q: input %q (coder %q) must be re-encoded to the output's coder %q, and no SDK environment is known to do it in", tr.GetUniqueName(), in, inPC.GetCoderId(), outPC.GetCoderId())
			}
			pc := t.addPCollection(in+"_transcoded", outPC, outPC.GetCoderId())
			tid := uniqueID(id+"_transcode_"+l, func(s string) bool { return t.comps.GetTransforms()[s] != nil })
			t.comps.Transforms[tid] = &pipepb.PTransform{
				UniqueName:    t.uniqueName(tr.GetUniqueName() + "/Transcode " + l),
				Spec:          &pipepb.FunctionSpec{Urn: urnFlatten},
				Inputs:        map[string]string{"0": in},
				Outputs:       map[string]string{"0": pc},
				EnvironmentId: env,
			}
			t.parent[tid] = t.parent[id]
			t.kind[tid] = kindSDK
			leaves = append(leaves, tid)
			tr.Inputs[l] = pc
		}
		leaves = append(leaves, id)
	}
	t.leaves = leaves
	return nil
}

// transcodeEnv picks the SDK environment of a transcoding flatten: the
// Flatten's own, else its input's producer's, else a consumer's of its
// output, else the pipeline's only environment.
func (t *translator) transcodeEnv(own, producer string, consumers []string) string {
	if own != "" {
		return own
	}
	if e := t.comps.GetTransforms()[producer].GetEnvironmentId(); e != "" {
		return e
	}
	for _, c := range consumers {
		if e := t.comps.GetTransforms()[c].GetEnvironmentId(); e != "" {
			return e
		}
	}
	if len(t.comps.GetEnvironments()) == 1 {
		for id := range t.comps.GetEnvironments() {
			return id
		}
	}
	return ""
}
