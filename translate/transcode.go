package translate

import (
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// transcodeFlattens makes every input of a Flatten or a Reshuffle
// (redistribute) use the transform's output coder. SDKs let their inputs
// use other coders than their output (the Python SDK's CoGroupByKey
// flattens FastPrimitivesCoder tuples into a TupleCoder PCollection; its
// Reshuffle may change the tuple coder's components), but elements the
// host forwards between sub-topologies keep their bytes. So,
// as Prism does, an input whose coder differs gets a one-input Flatten of
// its own, run in the SDK, that decodes with the input's coder and
// encodes with the output's (an SDK flatten transcodes); the original
// transform then reads its output.
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
		if t.kind[id] == kindTestStream {
			extra, err := t.transcodeTestStream(id, consumers)
			if err != nil {
				return err
			}
			leaves = append(append(leaves, id), extra...)
			continue
		}
		if t.kind[id] != kindFlatten && t.kind[id] != kindRedistribute {
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
			leaves = append(leaves, t.addTranscode(id, l, in, pc, env))
			tr.Inputs[l] = pc
		}
		leaves = append(leaves, id)
	}
	t.leaves = leaves
	return nil
}

// transcodeTestStream re-encodes a TestStream's elements when they are in
// another coder than an output's (a Python TestStream(coder=StrUtf8Coder())
// feeding a FastPrimitivesCoder PCollection): the TestStream then emits, for
// that output, a PCollection in its events' coder, and a one-input Flatten
// in the SDK re-encodes it into the original output. It returns the ids of
// the Flattens it added.
func (t *translator) transcodeTestStream(id string, consumers map[string][]string) ([]string, error) {
	tr := t.comps.GetTransforms()[id]
	ts, err := decodeTestStream(tr)
	if err != nil {
		return nil, err
	}
	var added []string
	for _, local := range sortedKeys(tr.GetOutputs()) {
		out := tr.GetOutputs()[local]
		outPC := t.comps.GetPcollections()[out]
		if outPC == nil || t.comps.GetCoders()[ts.GetCoderId()] == nil || t.coderEqual(ts.GetCoderId(), outPC.GetCoderId()) {
			continue
		}
		if safe, err := t.safeCoder(outPC.GetCoderId()); err == nil && safe != outPC.GetCoderId() {
			// A length prefix around the events' coder is added by the
			// host (testStreamRoot).
			if c := t.comps.GetCoders()[safe]; len(c.GetComponentCoderIds()) == 1 && t.coderEqual(c.GetComponentCoderIds()[0], ts.GetCoderId()) {
				continue
			}
		}
		env := t.transcodeEnv("", "", consumers[out])
		if env == "" {
			return nil, fmt.Errorf("transform %q: TestStream events in coder %q must be re-encoded to output %q's coder %q, and no SDK environment is known to do it in", tr.GetUniqueName(), ts.GetCoderId(), local, outPC.GetCoderId())
		}
		events := t.addPCollection(out+"_events", outPC, ts.GetCoderId())
		added = append(added, t.addTranscode(id, local, events, out, env))
		tr.Outputs[local] = events
	}
	return added, nil
}

// addTranscode adds the SDK-side one-input Flatten that re-encodes from
// into to (their PCollection coders) for the input or output local of
// transform id, in environment env, and returns its id.
func (t *translator) addTranscode(id, local, from, to, env string) string {
	tid := uniqueID(id+"_transcode_"+local, func(s string) bool { return t.comps.GetTransforms()[s] != nil })
	t.comps.Transforms[tid] = &pipepb.PTransform{
		UniqueName:    t.uniqueName(t.name(id) + "/Transcode " + local),
		Spec:          &pipepb.FunctionSpec{Urn: urnFlatten},
		Inputs:        map[string]string{"0": from},
		Outputs:       map[string]string{"0": to},
		EnvironmentId: env,
	}
	t.parent[tid] = t.parent[id]
	t.kind[tid] = kindSDK
	return tid
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
