package translate

import (
	"testing"

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
