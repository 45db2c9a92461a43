package translate

import (
	"fmt"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"reflect"
	"sort"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Tests on hand-edited protos, for constructs the Go SDK does not produce.

func TestRedistributeArbitrarily(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	r := beam.Reshuffle(s, beam.ParDo(s, splitWords, beam.Create(s, "a b")))
	beam.ParDo(s, identity, r)
	pp := marshal(t, p)
	pp.GetComponents().GetTransforms()[findTransform(t, pp, "Reshuffle")].Spec.Urn = urnRedistributeArbitrarily
	plan := mustTranslate(t, pp, Options{})
	if len(plan.SubTopologies) != 2 || plan.SubTopologies[1].Root.Kind != RootPassthrough || plan.Topics[1].Kind != TopicRedistribute {
		t.Errorf("redistribute not laid out as a passthrough: %v", describe(plan)[:500])
	}
}

func TestEnvironments(t *testing.T) {
	build := func() *pipepb.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		beam.ParDo(s, formatCount, beam.ParDo(s, pairWithOne, beam.ParDo(s, identity, beam.Create(s, "a"))))
		return marshal(t, p)
	}

	t.Run("environment change splits fusion", func(t *testing.T) {
		pp := build()
		comps := pp.GetComponents()
		comps.Environments["other"] = proto.Clone(comps.Environments["go"]).(*pipepb.Environment)
		comps.Transforms[findTransform(t, pp, "translate.pairWithOne")].EnvironmentId = "other"
		plan := mustTranslate(t, pp, Options{})
		var envs []string
		for _, s := range plan.SubTopologies[0].Stages {
			envs = append(envs, s.EnvironmentID)
		}
		if strings.Join(envs, ",") != "go,other,go" {
			t.Errorf("stage environments %v, want go,other,go (stages %v)", envs, stageNames(plan))
		}
	})

	t.Run("no environment, one defined", func(t *testing.T) {
		pp := build()
		for _, tr := range pp.GetComponents().GetTransforms() {
			tr.EnvironmentId = ""
		}
		plan := mustTranslate(t, pp, Options{})
		if s := plan.SubTopologies[0].Stages; len(s) != 1 || s[0].EnvironmentID != "go" {
			t.Errorf("stages %v", stageNames(plan))
		}
	})

	t.Run("no environment, several defined", func(t *testing.T) {
		pp := build()
		comps := pp.GetComponents()
		comps.Environments["other"] = proto.Clone(comps.Environments["go"]).(*pipepb.Environment)
		for _, tr := range comps.GetTransforms() {
			tr.EnvironmentId = ""
		}
		_, err := Translate(pp, Options{})
		errContains(t, err, "cannot tell which SDK environment")
	})

	t.Run("undefined environment", func(t *testing.T) {
		pp := build()
		pp.GetComponents().Transforms[findTransform(t, pp, "translate.pairWithOne")].EnvironmentId = "gone"
		_, err := Translate(pp, Options{})
		errContains(t, err, `environment "gone" is not defined`)
	})
}

func TestFlattenDuplicateInputAcrossSubTopologies(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	a := beam.Create(s, "a")
	b := beam.Create(s, "b")
	beam.ParDo(s, identity, beam.Flatten(s, a, a, b))
	plan := mustTranslate(t, marshal(t, p), Options{})
	// The duplicated input is written to the flatten topic once per listing.
	sinks := map[string]int{}
	for _, st := range plan.SubTopologies {
		for _, sk := range st.Sinks {
			if strings.HasSuffix(sk.Topic, "-flatten") {
				sinks[sk.PCollection]++
			}
		}
	}
	counts := []int{}
	for _, n := range sinks {
		counts = append(counts, n)
	}
	sort.Ints(counts)
	if !reflect.DeepEqual(counts, []int{1, 2}) {
		t.Errorf("sinks to the flatten topic per PCollection: %v, want one input twice and one once", sinks)
	}
}

func TestFlattenDuplicateInputInStage(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	a := beam.ParDo(s, identity, beam.Create(s, "a"))
	beam.ParDo(s, splitWords, beam.Flatten(s, a, a))
	plan := mustTranslate(t, marshal(t, p), Options{})
	if n := len(plan.SubTopologies[0].Stages); n != 1 {
		t.Errorf("%d stages, want the flatten fused: %v", n, stageNames(plan))
	}
}

func TestGBKInputNotKV(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
	beam.ParDo(s, joinFn2, beam.GroupByKey(s, kvs))
	pp := marshal(t, p)
	comps := pp.GetComponents()
	gbk := comps.GetTransforms()[findTransform(t, pp, "CoGBK")]
	comps.GetPcollections()[onlyValue(gbk.GetInputs())].CoderId = comps.GetPcollections()[onlyValue(comps.GetTransforms()[findTransform(t, pp, "beam.createFn")].GetOutputs())].GetCoderId()
	_, err := Translate(pp, Options{})
	errContains(t, err, `transform "CoGBK"`, "want a KV coder")
}

func TestRootOutputSunkDirectly(t *testing.T) {
	// A reshuffle output feeding another reshuffle directly: the root output
	// is written to a topic with no stage in between.
	p, s := beam.NewPipelineWithRoot()
	words := beam.ParDo(s, splitWords, beam.Create(s, "a"))
	r := beam.Reshuffle(s.Scope("second"), beam.Reshuffle(s.Scope("first"), words))
	beam.ParDo(s, identity, r)
	plan := mustTranslate(t, marshal(t, p), Options{})
	if len(plan.SubTopologies) != 3 {
		t.Fatalf("topics %v", topicNames(plan))
	}
	st := plan.SubTopologies[1]
	if len(st.Stages) != 0 || len(st.Sinks) != 1 || st.Sinks[0].PCollection != st.Root.Output {
		t.Errorf("sub-topology 1: stages %v sinks %v root %+v", stageNames(plan)[1], st.Sinks, st.Root)
	}
}

func TestRetranslateRewrittenPipeline(t *testing.T) {
	// Plan.Pipeline (lifted combine, expanded SDF) translates again to the
	// same layout.
	p, s := beam.NewPipelineWithRoot()
	lines := textio.Read(s, "/tmp/ksrunner-translate-test-input*")
	counts := stats.Count(s, beam.ParDo(s, splitWords, lines))
	beam.ParDo(s, formatCount, counts)
	first := mustTranslate(t, marshal(t, p), Options{})
	second := mustTranslate(t, first.Pipeline, Options{})
	if a, b := fmt.Sprint(topicNames(first)), fmt.Sprint(topicNames(second)); a != b {
		t.Errorf("topics %s, then %s", a, b)
	}
	if a, b := fmt.Sprint(stageNames(first)), fmt.Sprint(stageNames(second)); a != b {
		t.Errorf("stages %s, then %s", a, b)
	}
}

func TestMalformed(t *testing.T) {
	build := func() *pipepb.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		beam.Reshuffle(s, beam.ParDo(s, identity, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "a"))))
		return marshal(t, p)
	}
	cases := []struct {
		name string
		edit func(t *testing.T, pp *pipepb.Pipeline)
		want []string
	}{{
		name: "window_into without input",
		edit: func(t *testing.T, pp *pipepb.Pipeline) {
			for _, tr := range pp.GetComponents().GetTransforms() {
				if tr.GetSpec().GetUrn() == urnWindowInto {
					tr.Inputs = nil
				}
			}
		},
		want: []string{"needs exactly one input"},
	}, {
		name: "undefined PCollection",
		edit: func(t *testing.T, pp *pipepb.Pipeline) {
			pp.GetComponents().GetTransforms()[findTransform(t, pp, "translate.identity")].Inputs = map[string]string{"i0": "ghost"}
		},
		want: []string{`transform "translate.identity"`, `"ghost"`},
	}, {
		name: "custom window coder",
		edit: func(t *testing.T, pp *pipepb.Pipeline) {
			for _, ws := range pp.GetComponents().GetWindowingStrategies() {
				if ws.GetWindowFn().GetUrn() != "beam:window_fn:global_windows:v1" {
					pp.GetComponents().Coders[ws.GetWindowCoderId()] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: "beam:coder:custom_window:v1"}}
				}
			}
		},
		want: []string{"window coder beam:coder:custom_window:v1 is not supported"},
	}, {
		name: "no roots",
		edit: func(t *testing.T, pp *pipepb.Pipeline) { pp.RootTransformIds = nil },
		want: []string{"no root transforms"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pp := build()
			c.edit(t, pp)
			_, err := Translate(pp, Options{})
			errContains(t, err, c.want...)
		})
	}
}
