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
