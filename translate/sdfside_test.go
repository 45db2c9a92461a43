package translate

import (
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	register.DoFn4x0[*sdf.LockRTracker, string, func(*string) bool, func(string)](&sideSDF{})
}

// sideSDF is a splittable DoFn with an iterable side input.
type sideSDF struct{}

func (*sideSDF) CreateInitialRestriction(string) offsetrange.Restriction {
	return offsetrange.Restriction{End: 2}
}
func (*sideSDF) SplitRestriction(_ string, r offsetrange.Restriction) []offsetrange.Restriction {
	return []offsetrange.Restriction{r}
}
func (*sideSDF) RestrictionSize(_ string, r offsetrange.Restriction) float64 { return r.Size() }
func (*sideSDF) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}
func (*sideSDF) ProcessElement(rt *sdf.LockRTracker, s string, side func(*string) bool, emit func(string)) {
	for p := int64(0); rt.TryClaim(p); p++ {
		emit(s)
	}
}

// A splittable DoFn with a side input: every part of its expansion lists
// the side input (the SDKs build each part from the ParDo payload), but
// only the first, pair with restriction, gets a materialized main input to
// wait on: split and size runs in its stage, and the process stage heads
// the SpreadRestrictions sub-topology, downstream of the side input already.
// Both stages wait for the side input (the host gates them) and their
// descriptors carry it.
func TestSplittableSideInput(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.Create(s, "x")
	beam.ParDo(s, &sideSDF{}, beam.Create(s, "a"), beam.SideInput{Input: side})
	plan := mustTranslate(t, marshal(t, p), Options{})
	comps := plan.Pipeline.GetComponents()

	var mains, sides, spreads int
	for _, tp := range plan.Topics {
		switch {
		case tp.Kind == TopicSideInput:
			sides++
		case strings.HasSuffix(tp.Name, "-main"):
			mains++
		case strings.HasSuffix(tp.Name, "SpreadRestrictions-repartition"):
			spreads++
			if !tp.SpreadBySize {
				t.Errorf("topic %s: SpreadBySize unset", tp.Name)
			}
			continue
		}
		if tp.SpreadBySize {
			t.Errorf("topic %s: SpreadBySize set on a topic that is not a splittable DoFn's restrictions", tp.Name)
		}
	}
	if mains != 1 || sides != 1 || spreads != 1 {
		t.Errorf("topics %v: want one -main (pair with restriction), one side input and one SpreadRestrictions topic", topicNames(plan))
	}
	parts := map[string]*Stage{} // URN → stage
	for _, st := range plan.SubTopologies {
		for _, stg := range st.Stages {
			for _, id := range stg.Transforms {
				urn := comps.GetTransforms()[id].GetSpec().GetUrn()
				switch urn {
				case urnSDFPairWithRestriction, urnSDFSplitAndSize, urnSDFProcessSizedElements:
				default:
					continue
				}
				parts[urn] = stg
				var listed bool
				for _, si := range stg.SideInputs {
					listed = listed || si.TransformID == id
				}
				if !listed {
					t.Errorf("stage %s: %s (%s) is not among its side inputs' readers %+v", stg.ID, id, urn, stg.SideInputs)
				}
				if len(comps.GetTransforms()[id].GetInputs()) != 2 {
					t.Errorf("%s (%s): inputs %v, want the main and the side input", id, urn, comps.GetTransforms()[id].GetInputs())
				}
			}
			for _, si := range stg.SideInputs {
				if stg.Descriptor.GetPcollections()[si.PCollection].GetCoderId() == "" {
					t.Errorf("stage %s: the descriptor lacks side input PCollection %s", stg.ID, si.PCollection)
				}
			}
		}
	}
	if len(parts) != 3 {
		t.Fatalf("stages of the expansion's parts %v, want all three", parts)
	}
	if parts[urnSDFPairWithRestriction] != parts[urnSDFSplitAndSize] {
		t.Errorf("pair with restriction and split and size run in stages %s and %s, want one", parts[urnSDFPairWithRestriction].ID, parts[urnSDFSplitAndSize].ID)
	}
	if parts[urnSDFProcessSizedElements] == parts[urnSDFSplitAndSize] {
		t.Errorf("the process part shares stage %s with split and size", parts[urnSDFSplitAndSize].ID)
	}
}
