package translate

import (
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

func TestSeveralPanes(t *testing.T) {
	count := &pipepb.Trigger{Trigger: &pipepb.Trigger_ElementCount_{ElementCount: &pipepb.Trigger_ElementCount{ElementCount: 3}}}
	for _, c := range []struct {
		name string
		ws   *pipepb.WindowingStrategy
		want bool
	}{
		{"no trigger", &pipepb.WindowingStrategy{}, false},
		{"default", &pipepb.WindowingStrategy{Trigger: &pipepb.Trigger{Trigger: &pipepb.Trigger_Default_{}}}, false},
		{"bare end of window", &pipepb.WindowingStrategy{Trigger: &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEndOfWindow_{AfterEndOfWindow: &pipepb.Trigger_AfterEndOfWindow{}}}}, false},
		{"early firings", &pipepb.WindowingStrategy{Trigger: &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEndOfWindow_{AfterEndOfWindow: &pipepb.Trigger_AfterEndOfWindow{EarlyFirings: count}}}}, true},
		{"late firings", &pipepb.WindowingStrategy{Trigger: &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEndOfWindow_{AfterEndOfWindow: &pipepb.Trigger_AfterEndOfWindow{LateFirings: count}}}}, true},
		{"repeated count", &pipepb.WindowingStrategy{Trigger: &pipepb.Trigger{Trigger: &pipepb.Trigger_Repeat_{Repeat: &pipepb.Trigger_Repeat{Subtrigger: count}}}}, true},
		{"allowed lateness", &pipepb.WindowingStrategy{AllowedLateness: 1000}, true},
	} {
		if got := severalPanes(c.ws); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A side input is ready at its first firing (Topic.ReadyAtFirstFiring)
// only when it is unbounded, in the global window, and fired more than
// once: the window never closes while the source runs.
func TestReadyAtFirstFiring(t *testing.T) {
	for _, c := range []struct {
		name      string
		trigger   bool
		unbounded bool
		want      bool
	}{
		{"unbounded, repeated trigger", true, true, true},
		{"bounded, repeated trigger", true, false, false},
		{"unbounded, default trigger", false, true, false},
	} {
		p, s := beam.NewPipelineWithRoot()
		var opts []beam.WindowIntoOption
		if c.trigger {
			opts = append(opts, beam.Trigger(trigger.Repeat(trigger.AfterCount(1))))
		}
		side := beam.WindowInto(s, window.NewGlobalWindows(), beam.Create(s, "x"), opts...)
		beam.ParDo(s, withSide, beam.Create(s, "a"), beam.SideInput{Input: side})
		pp := marshal(t, p)
		if c.unbounded {
			for _, pc := range pp.GetComponents().GetPcollections() {
				pc.IsBounded = pipepb.IsBounded_UNBOUNDED
			}
		}
		plan := mustTranslate(t, pp, Options{})
		found := false
		for _, tp := range plan.Topics {
			if tp.Kind != TopicSideInput {
				if tp.ReadyAtFirstFiring {
					t.Errorf("%s: topic %s of kind %d is ReadyAtFirstFiring", c.name, tp.Name, tp.Kind)
				}
				continue
			}
			found = true
			if tp.ReadyAtFirstFiring != c.want {
				t.Errorf("%s: ReadyAtFirstFiring %v, want %v", c.name, tp.ReadyAtFirstFiring, c.want)
			}
		}
		if !found {
			t.Errorf("%s: no side input topic", c.name)
		}
	}
}
