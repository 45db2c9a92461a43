// Package pipelinetest edits pipeline protos for tests: it marks
// transforms with features an SDK may not be able to express (the Go SDK
// has no @RequiresStableInput or @RequiresTimeSortedInput), so that the
// runner's handling of them can be tested with Go SDK pipelines.
package pipelinetest

import (
	"fmt"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// RequireStableInput marks the ParDos of p whose unique name ends with
// suffix as requiring stable input, as Java's @RequiresStableInput does,
// and adds the pipeline requirement. It fails if no ParDo matches.
func RequireStableInput(p *pipepb.Pipeline, suffix string) error {
	return editParDos(p, suffix, "beam:requirement:pardo:stable_input:v1", func(pd *pipepb.ParDoPayload) { pd.RequiresStableInput = true })
}

// RequireTimeSortedInput marks the ParDos of p whose unique name ends with
// suffix as requiring time-sorted input, as Java's @RequiresTimeSortedInput
// does, and adds the pipeline requirement. It fails if no ParDo matches.
func RequireTimeSortedInput(p *pipepb.Pipeline, suffix string) error {
	return editParDos(p, suffix, "beam:requirement:pardo:time_sorted_input:v1", func(pd *pipepb.ParDoPayload) { pd.RequiresTimeSortedInput = true })
}

func editParDos(p *pipepb.Pipeline, suffix, requirement string, edit func(*pipepb.ParDoPayload)) error {
	found := false
	for _, tr := range p.GetComponents().GetTransforms() {
		if tr.GetSpec().GetUrn() != "beam:transform:pardo:v1" || !strings.HasSuffix(tr.GetUniqueName(), suffix) {
			continue
		}
		pd := &pipepb.ParDoPayload{}
		if err := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); err != nil {
			return fmt.Errorf("transform %q: %w", tr.GetUniqueName(), err)
		}
		edit(pd)
		b, err := proto.Marshal(pd)
		if err != nil {
			return fmt.Errorf("transform %q: %w", tr.GetUniqueName(), err)
		}
		tr.Spec.Payload, found = b, true
	}
	if !found {
		return fmt.Errorf("no ParDo named *%s", suffix)
	}
	p.Requirements = append(p.Requirements, requirement)
	return nil
}

// AsSource replaces the ParDo of p whose unique name ends with suffix, which
// must read the output of an Impulse, with a root transform of the given
// URN and payload (an I/O primitive the SDK cannot express, such as
// translate.URNKafkaRead): it loses its input and environment, the Impulse
// is removed, and its outputs become unbounded.
func AsSource(p *pipepb.Pipeline, suffix, urn string, payload []byte) error {
	comps := p.GetComponents()
	_, tr, err := onlyParDo(p, suffix)
	if err != nil {
		return err
	}
	if len(tr.GetInputs()) != 1 {
		return fmt.Errorf("transform %q has %d inputs, want the impulse's output", tr.GetUniqueName(), len(tr.GetInputs()))
	}
	var in string
	for _, pc := range tr.GetInputs() {
		in = pc
	}
	imp := ""
	for tid, o := range comps.GetTransforms() {
		for _, pc := range o.GetOutputs() {
			if pc == in && o.GetSpec().GetUrn() == "beam:transform:impulse:v1" {
				imp = tid
			}
		}
	}
	if imp == "" {
		return fmt.Errorf("transform %q does not read an Impulse", tr.GetUniqueName())
	}
	removeTransform(p, imp)
	delete(comps.Pcollections, in)
	tr.Spec = &pipepb.FunctionSpec{Urn: urn, Payload: payload}
	tr.Inputs, tr.EnvironmentId = nil, ""
	for _, pc := range tr.GetOutputs() {
		comps.Pcollections[pc].IsBounded = pipepb.IsBounded_UNBOUNDED
	}
	return nil
}

// AsSink replaces the ParDo of p whose unique name ends with suffix (one
// input, no outputs) with a transform of the given URN and payload, such as
// translate.URNKafkaWrite.
func AsSink(p *pipepb.Pipeline, suffix, urn string, payload []byte) error {
	_, tr, err := onlyParDo(p, suffix)
	if err != nil {
		return err
	}
	if len(tr.GetInputs()) != 1 || len(tr.GetOutputs()) != 0 {
		return fmt.Errorf("transform %q has %d inputs and %d outputs, want 1 and 0", tr.GetUniqueName(), len(tr.GetInputs()), len(tr.GetOutputs()))
	}
	tr.Spec = &pipepb.FunctionSpec{Urn: urn, Payload: payload}
	tr.EnvironmentId = ""
	return nil
}

func onlyParDo(p *pipepb.Pipeline, suffix string) (string, *pipepb.PTransform, error) {
	var id string
	for tid, tr := range p.GetComponents().GetTransforms() {
		if tr.GetSpec().GetUrn() == "beam:transform:pardo:v1" && strings.HasSuffix(tr.GetUniqueName(), suffix) {
			if id != "" {
				return "", nil, fmt.Errorf("two ParDos named *%s", suffix)
			}
			id = tid
		}
	}
	if id == "" {
		return "", nil, fmt.Errorf("no ParDo named *%s", suffix)
	}
	return id, p.GetComponents().GetTransforms()[id], nil
}

// removeTransform deletes a transform and every reference to it.
func removeTransform(p *pipepb.Pipeline, id string) {
	comps := p.GetComponents()
	delete(comps.Transforms, id)
	drop := func(ids []string) []string {
		out := ids[:0]
		for _, s := range ids {
			if s != id {
				out = append(out, s)
			}
		}
		return out
	}
	p.RootTransformIds = drop(p.RootTransformIds)
	for _, tr := range comps.GetTransforms() {
		tr.Subtransforms = drop(tr.Subtransforms)
	}
}
