package translate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func splitWords(line string, emit func(string)) {
	for _, w := range strings.Fields(line) {
		emit(w)
	}
}

func formatCount(w string, c int) string { return fmt.Sprintf("%s: %d", w, c) }

func pairWithOne(w string) (string, int) { return w, 1 }

func sumInts(a, b int) int { return a + b }

func splitTwo(w string, a func(string, int), b func(string, string)) {
	a(w, len(w))
	b(w, strings.ToUpper(w))
}

func joinFn(k string, as func(*int) bool, bs func(*string) bool) string { return k }

func identity(s string) string { return s }

func withSide(s string, side []string, emit func(string)) { emit(s) }

// meanAccum is a struct accumulator: the Go SDK gives it a custom coder,
// which must be length-prefixed at the host boundary.
type meanAccum struct {
	Sum   int
	Count int
}

type meanFn struct{}

func (meanFn) CreateAccumulator() meanAccum { return meanAccum{} }
func (meanFn) AddInput(a meanAccum, v int) meanAccum {
	return meanAccum{a.Sum + v, a.Count + 1}
}
func (meanFn) MergeAccumulators(a, b meanAccum) meanAccum {
	return meanAccum{a.Sum + b.Sum, a.Count + b.Count}
}
func (meanFn) ExtractOutput(a meanAccum) float64 {
	if a.Count == 0 {
		return 0
	}
	return float64(a.Sum) / float64(a.Count)
}

type countStateFn struct {
	Count state.Value[int]
}

func (f *countStateFn) ProcessElement(sp state.Provider, k string, v int, emit func(string, int)) {
	c, _, _ := f.Count.Read(sp)
	f.Count.Write(sp, c+v)
	emit(k, c+v)
}

// groupStateFn keeps a count per key of the groups it reads.
type groupStateFn struct {
	Count state.Value[int]
}

func (f *groupStateFn) ProcessElement(sp state.Provider, k string, vs func(*int) bool) string {
	c, _, _ := f.Count.Read(sp)
	f.Count.Write(sp, c+1)
	return k
}

// groupStateSideFn is groupStateFn with a side input.
type groupStateSideFn struct {
	Count state.Value[int]
}

func (f *groupStateSideFn) ProcessElement(sp state.Provider, k string, vs func(*int) bool, side []string) string {
	c, _, _ := f.Count.Read(sp)
	f.Count.Write(sp, c+1)
	return k
}

func init() {
	register.DoFn3x1[state.Provider, string, func(*int) bool, string](&groupStateFn{})
	register.DoFn4x1[state.Provider, string, func(*int) bool, []string, string](&groupStateSideFn{})
	register.Function2x0(splitWords)
	register.Function2x1(formatCount)
	register.Function1x2(pairWithOne)
	register.Function2x1(sumInts)
	register.Function3x0(splitTwo)
	register.Function3x1(joinFn)
	register.Function1x1(identity)
	register.Function3x0(withSide)
	register.Combiner3[meanAccum, int, float64](&meanFn{})
	register.DoFn4x0[state.Provider, string, int, func(string, int)](&countStateFn{})
	register.Emitter1[string]()
	register.Emitter2[string, int]()
	register.Emitter2[string, string]()
}

func mustTranslate(t *testing.T, p *pipepb.Pipeline, opts Options) *Plan {
	t.Helper()
	orig := proto.Clone(p)
	plan, err := Translate(p, opts)
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	if !proto.Equal(orig, p) {
		t.Errorf("Translate modified its input pipeline")
	}
	checkPlan(t, plan)
	// Deterministic: a second translation gives the same plan.
	again, err := Translate(p, opts)
	if err != nil {
		t.Fatalf("second Translate: %v", err)
	}
	if a, b := describe(plan), describe(again); a != b {
		t.Errorf("Translate is not deterministic:\n%s\n---\n%s", a, b)
	}
	return plan
}

// describe renders a plan deterministically.
func describe(p *Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bounded=%v\n", p.Bounded)
	for _, tp := range p.Topics {
		fmt.Fprintf(&b, "topic %s kind=%d pc=%s producers=%v\n", tp.Name, tp.Kind, tp.PCollection, tp.Producers)
	}
	for _, st := range p.SubTopologies {
		root := st.Root
		root.MergeWindows = nil
		if root.KafkaRead != nil {
			spec, _ := json.Marshal(root.KafkaRead) // %+v would print the bounds' pointers
			fmt.Fprintf(&b, "kafka read %s\n", spec)
			root.KafkaRead = nil
		}
		var sinks []string
		for _, sk := range st.Sinks {
			if sk.KafkaWrite != nil {
				fmt.Fprintf(&b, "kafka write %+v\n", *sk.KafkaWrite)
				sk.KafkaWrite = nil
			}
			sinks = append(sinks, fmt.Sprintf("%+v", sk))
		}
		fmt.Fprintf(&b, "sub %d input=%s root=%+v sinks=%v\n", st.ID, st.Input, root, sinks)
		stages := st.Stages
		if ms := st.Root.MergeWindows; ms != nil {
			stages = append([]*Stage{ms}, stages...)
		}
		for _, f := range st.Flattens {
			fmt.Fprintf(&b, "  flatten %+v\n", *f)
		}
		for _, s := range stages {
			fmt.Fprintf(&b, "  stage %s exec=%d env=%s transforms=%v in=%s outs=%v wasm=%v src=%s sinks=%v\n", s.ID, s.Executor, s.EnvironmentID, s.Transforms, s.Input, s.Outputs, s.WASMModules, s.InputTransform, s.OutputTransforms)
			b.WriteString(prototext.MarshalOptions{Multiline: false}.Format(s.Descriptor))
			b.WriteString("\n")
		}
	}
	for _, k := range sortedKeys(p.WireCoders) {
		fmt.Fprintf(&b, "wire %s=%s\n", k, p.WireCoders[k])
	}
	b.WriteString(prototext.Format(p.Pipeline))
	return b.String()
}

func topicNames(p *Plan) []string {
	var ns []string
	for _, tp := range p.Topics {
		ns = append(ns, tp.Name)
	}
	return ns
}

func TestWordCountStatsCount(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	lines := beam.Create(s, "a b", "b c")
	words := beam.ParDo(s, splitWords, lines)
	counts := stats.Count(s, words)
	beam.ParDo(s, formatCount, counts)
	pp := marshal(t, p)
	plan := mustTranslate(t, pp, Options{})

	combine := "stats.Count/stats.SumPerKey/CombinePerKey"
	wantTopics := []string{"impulse-0", sanitizeTopicName(combine) + "-repartition"}
	if got := topicNames(plan); fmt.Sprint(got) != fmt.Sprint(wantTopics) {
		t.Fatalf("topics = %v, want %v", got, wantTopics)
	}
	if !plan.Bounded {
		t.Errorf("Bounded = false, want true")
	}
	got := stageNames(plan)
	want := [][][]string{
		{{"beam.createFn", "translate.splitWords", "stats.Count/stats.keyedCountFn", combine + "/Precombine"}},
		{{combine + "/MergeAccumulators", combine + "/ExtractOutputs", "translate.formatCount"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stages = %q\nwant %q", got, want)
	}
	st1 := plan.SubTopologies[1]
	if st1.Root.Kind != RootGroupByKey || st1.Root.TransformID != findTransform(t, plan.Pipeline, combine) {
		t.Errorf("root = %+v, want a GroupByKey root on the combine", st1.Root)
	}
	pre := plan.SubTopologies[0].Stages[0]
	if len(pre.Outputs) != 1 || pre.Outputs[0] != plan.Topics[1].PCollection {
		t.Errorf("precombine stage outputs %v, want [%s]", pre.Outputs, plan.Topics[1].PCollection)
	}
	if len(plan.SubTopologies[0].Sinks) != 1 || plan.SubTopologies[0].Sinks[0].Topic != plan.Topics[1].Name {
		t.Errorf("sinks = %v", plan.SubTopologies[0].Sinks)
	}
	if len(st1.Stages[0].Outputs) != 0 {
		t.Errorf("final stage outputs %v, want none (leaf output)", st1.Stages[0].Outputs)
	}
	// The combine's original expansion is gone; the composite now holds
	// the lifted parts.
	comps := plan.Pipeline.GetComponents()
	for _, tr := range comps.GetTransforms() {
		if tr.GetSpec().GetUrn() == "beam:transform:group_by_key:v1" && !strings.HasPrefix(tr.GetUniqueName(), combine+"/GroupByKey") {
			t.Errorf("stale GroupByKey %q left in the pipeline", tr.GetUniqueName())
		}
	}
	if n := len(comps.GetTransforms()[st1.Root.TransformID].GetSubtransforms()); n != 4 {
		t.Errorf("lifted combine has %d sub-transforms, want 4", n)
	}
	// The repartition topic carries KV<word, accumulator>.
	w := comps.GetCoders()[plan.WireCoders[plan.Topics[1].PCollection]]
	kv := comps.GetCoders()[w.GetComponentCoderIds()[0]]
	if kv.GetSpec().GetUrn() != urnCoderKV || comps.GetCoders()[kv.GetComponentCoderIds()[0]].GetSpec().GetUrn() != urnCoderStringUTF8 {
		t.Errorf("repartition wire coder %v: want KV<string_utf8, ...>", prototext.Format(kv))
	}
}

func TestWordCountCombinePerKeyCustomAccumulator(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	lines := beam.Create(s, "a b", "b c")
	words := beam.ParDo(s, splitWords, lines)
	kvs := beam.ParDo(s, pairWithOne, words)
	sums := beam.CombinePerKey(s, sumInts, kvs)
	means := beam.CombinePerKey(s.Scope("Mean"), &meanFn{}, kvs)
	beam.ParDo(s, formatCount, sums)
	_ = means
	pp := marshal(t, p)
	plan := mustTranslate(t, pp, Options{})
	if len(plan.Topics) != 3 || len(plan.SubTopologies) != 3 {
		t.Fatalf("topics %v, want impulse and two repartitions", topicNames(plan))
	}
	// One producing stage feeds both repartition topics.
	st0 := plan.SubTopologies[0]
	if len(st0.Stages) != 1 || len(st0.Stages[0].Outputs) != 2 || len(st0.Sinks) != 2 {
		t.Fatalf("sub-topology 0: %d stages, sinks %v", len(st0.Stages), st0.Sinks)
	}
	// The mean accumulator, a struct, has a coder the host cannot parse
	// (the Go SDK's row coder): the wire coder of the lifted PCollection
	// must length-prefix it.
	comps := plan.Pipeline.GetComponents()
	var lifted string
	for _, st := range plan.SubTopologies {
		if strings.HasPrefix(comps.GetTransforms()[st.Root.TransformID].GetUniqueName(), "Mean/") {
			for _, tp := range plan.Topics {
				if tp.Name == st.Input {
					lifted = tp.PCollection
				}
			}
		}
	}
	if lifted == "" {
		t.Fatalf("no topic feeds the Mean combine: %s", describe(plan))
	}
	acc := comps.GetCoders()[comps.GetCoders()[comps.GetPcollections()[lifted].GetCoderId()].GetComponentCoderIds()[1]]
	if hostCoderURNs[acc.GetSpec().GetUrn()] {
		t.Fatalf("the Go SDK gave the struct accumulator coder %s, which the host parses: this test needs one it cannot", acc.GetSpec().GetUrn())
	}
	w := comps.GetCoders()[plan.WireCoders[lifted]]
	kv := comps.GetCoders()[w.GetComponentCoderIds()[0]]
	if v := comps.GetCoders()[kv.GetComponentCoderIds()[1]]; v.GetSpec().GetUrn() != urnCoderLengthPrefix {
		t.Errorf("accumulator coder %s is %s on the wire, want it length-prefixed", acc.GetSpec().GetUrn(), v.GetSpec().GetUrn())
	}
}

func TestCoGroupByKeyMultiOutput(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	words := beam.Create(s, "a", "bb")
	as, bs := beam.ParDo2(s, splitTwo, words)
	joined := beam.CoGroupByKey(s, as, bs)
	beam.ParDo(s, joinFn, joined)
	plan := mustTranslate(t, marshal(t, p), Options{})
	if len(plan.SubTopologies) != 2 {
		t.Fatalf("topics %v, want impulse + one repartition", topicNames(plan))
	}
	st0 := plan.SubTopologies[0]
	if len(st0.Stages) != 1 || len(st0.Flattens) != 0 {
		t.Fatalf("sub-topology 0: %d stages %d flattens, want the flatten fused into one stage", len(st0.Stages), len(st0.Flattens))
	}
	hasFlatten := false
	for _, id := range st0.Stages[0].Transforms {
		if plan.Pipeline.GetComponents().GetTransforms()[id].GetSpec().GetUrn() == urnFlatten {
			hasFlatten = true
		}
	}
	if !hasFlatten {
		t.Errorf("CoGBK flatten not executed in the stage: %v", stageNames(plan))
	}
	if got := plan.SubTopologies[1].Stages; len(got) != 1 || len(got[0].Transforms) != 2 {
		t.Errorf("consumer stages %v, want expand + joinFn", stageNames(plan)[1])
	}
}

func TestCombineGlobally(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	nums := beam.Create(s, 1, 2, 3)
	sum := beam.Combine(s, sumInts, nums)
	beam.ParDo(s, func(i int) string { return fmt.Sprint(i) }, sum)
	plan := mustTranslate(t, marshal(t, p), Options{})
	if len(plan.SubTopologies) != 2 || plan.SubTopologies[1].Root.Kind != RootGroupByKey {
		t.Fatalf("want impulse + lifted combine, got topics %v", topicNames(plan))
	}
	root := plan.Pipeline.GetComponents().GetTransforms()[plan.SubTopologies[1].Root.TransformID]
	if root.GetSpec().GetUrn() != urnCombinePerKey {
		t.Errorf("root transform %q is %s, want the lifted combine", root.GetUniqueName(), root.GetSpec().GetUrn())
	}
}

func TestFlattenAcrossSubTopologies(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	a := beam.Create(s, "a")
	b := beam.Create(s, "b")
	bb := beam.ParDo(s, identity, b)
	f := beam.Flatten(s, a, bb)
	beam.ParDo(s, splitWords, f)
	plan := mustTranslate(t, marshal(t, p), Options{})
	var ft *Topic
	for _, tp := range plan.Topics {
		if strings.HasSuffix(tp.Name, "-flatten") {
			ft = tp
		}
	}
	if ft == nil || ft.Kind != TopicRedistribute || len(ft.Producers) != 2 {
		t.Fatalf("want a materialized flatten topic with two producers, got %v", describe(plan)[:600])
	}
	last := plan.SubTopologies[len(plan.SubTopologies)-1]
	if last.Input != ft.Name || last.Root.Kind != RootPassthrough || last.Root.Output != ft.PCollection {
		t.Errorf("flatten sub-topology root %+v", last.Root)
	}
	if len(last.Stages) != 1 {
		t.Errorf("flatten consumer stages %v", stageNames(plan))
	}
}

func TestFlattenSameSubTopologyDifferentExecutors(t *testing.T) {
	// One branch is mapped to WASM, so the flatten of both branches cannot
	// be fused into either stage and runs as a runner-side Flatten.
	p, s := beam.NewPipelineWithRoot()
	a := beam.Create(s, "a b")
	x := beam.ParDo(s, identity, a)
	y := beam.ParDo(s, splitWords, a)
	f := beam.Flatten(s, x, y)
	beam.ParDo(s, formatCount, beam.ParDo(s, pairWithOne, f))
	plan := mustTranslate(t, marshal(t, p), Options{StageWASM: map[string]string{"translate.splitWords": "mod.wasm"}})
	if len(plan.SubTopologies) != 1 {
		t.Fatalf("want one sub-topology, got %v", topicNames(plan))
	}
	st := plan.SubTopologies[0]
	if len(st.Flattens) != 1 {
		t.Fatalf("want a runner-side flatten, got %s", describe(plan)[:2000])
	}
	var wasm, harness int
	for _, s := range st.Stages {
		switch s.Executor {
		case ExecutorWASM:
			wasm++
			if s.WASMModules[s.Transforms[0]] != "mod.wasm" || s.EnvironmentID != "" {
				t.Errorf("WASM stage %+v", s)
			}
		case ExecutorHarness:
			harness++
		}
	}
	if wasm != 1 || harness != 2 {
		t.Errorf("stages %v: %d WASM, %d harness; want 1 and 2", stageNames(plan), wasm, harness)
	}
	last := st.Stages[len(st.Stages)-1]
	if last.Input != st.Flattens[0].Output {
		t.Errorf("last stage reads %q, want the flatten output %q", last.Input, st.Flattens[0].Output)
	}
}

func TestReshuffle(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	a := beam.Create(s, "a b")
	r := beam.Reshuffle(s, beam.ParDo(s, splitWords, a))
	beam.ParDo(s, identity, r)
	plan := mustTranslate(t, marshal(t, p), Options{})
	if len(plan.Topics) != 2 {
		t.Fatalf("topics %v", topicNames(plan))
	}
	tp := plan.Topics[1]
	if tp.Name != "Reshuffle-repartition" || tp.Kind != TopicRedistribute {
		t.Errorf("topic %+v", tp)
	}
	st := plan.SubTopologies[1]
	if st.Root.Kind != RootPassthrough || plan.Pipeline.GetComponents().GetTransforms()[st.Root.TransformID].GetUniqueName() != "Reshuffle" {
		t.Errorf("root %+v", st.Root)
	}
	// The Go SDK's fallback expansion (reify, GBK with an Always trigger,
	// unreify) must not be used.
	for _, ss := range stageNames(plan) {
		for _, s := range ss {
			for _, n := range s {
				if strings.HasPrefix(n, "Reshuffle/") {
					t.Errorf("reshuffle expansion transform %q in a stage", n)
				}
			}
		}
	}
}

func TestTextIO(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	lines := textio.Read(s, "/tmp/ksrunner-translate-test-input*")
	textio.Write(s, "/tmp/ksrunner-translate-test-output", beam.ParDo(s, identity, lines))
	pp := marshal(t, p)
	plan := mustTranslate(t, pp, Options{})
	comps := plan.Pipeline.GetComponents()
	// The splittable read is expanded, and its process transform heads its
	// own stage whose input is the sized restrictions.
	var proc *Stage
	for _, st := range plan.SubTopologies {
		for _, s := range st.Stages {
			for i, id := range s.Transforms {
				if comps.GetTransforms()[id].GetSpec().GetUrn() == urnSDFProcessSizedElements {
					if i != 0 {
						t.Errorf("SDF process transform is not the head of stage %s", s.ID)
					}
					proc = s
				}
			}
		}
	}
	if proc == nil {
		t.Fatalf("no SDF process stage in %v", stageNames(plan))
	}
	procT := comps.GetTransforms()[proc.Transforms[0]]
	if proc.Input != onlyValue(procT.GetInputs()) {
		t.Errorf("process stage input %q, want %q", proc.Input, onlyValue(procT.GetInputs()))
	}
	// It reads the restrictions from a redistribute topic: a sub-topology
	// of its own, so that the splits are processed in parallel.
	for _, st := range plan.SubTopologies {
		if !slices.Contains(st.Stages, proc) {
			continue
		}
		if st.Root.Kind != RootPassthrough || st.Root.Output != proc.Input || !strings.HasSuffix(comps.GetTransforms()[st.Root.TransformID].GetUniqueName(), "/SpreadRestrictions") {
			t.Errorf("process stage's sub-topology: root %+v, want the SpreadRestrictions passthrough of %s", st.Root, proc.Input)
		}
		for _, tp := range plan.Topics {
			if tp.Name == st.Input && tp.Kind != TopicRedistribute {
				t.Errorf("process stage's sub-topology reads topic %s of kind %d, want a redistribute topic", tp.Name, tp.Kind)
			}
		}
	}
	// The restriction coder reaches the wire length-prefixed.
	w := comps.GetCoders()[plan.WireCoders[proc.Input]]
	if err := checkCoderHostParseable(comps.GetCoders(), plan.WireCoders[proc.Input]); err != nil {
		t.Error(err)
	}
	_ = w
	// textio.Write groups by a fixed key.
	found := false
	for _, tp := range plan.Topics {
		found = found || tp.Name == sanitizeTopicName("textio.Write/CoGBK")+"-repartition"
	}
	if !found {
		t.Errorf("topics %v: no textio.Write repartition", topicNames(plan))
	}
	// pair-with-restriction and split-and-size run in the producing stage.
	splits := 0
	for _, st := range plan.SubTopologies {
		for _, s := range st.Stages {
			if s == proc {
				continue
			}
			for _, id := range s.Transforms {
				if comps.GetTransforms()[id].GetSpec().GetUrn() == urnSDFSplitAndSize {
					splits++
					if len(s.Outputs) == 0 {
						t.Errorf("split stage %s has no output", s.ID)
					}
				}
			}
		}
	}
	if splits != 1 {
		t.Errorf("%d stages run the split-and-size transform, want 1: %v", splits, stageNames(plan))
	}
}

func TestFixedWindowsGBK(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
	w := beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs)
	beam.ParDo(s, formatCount, beam.CombinePerKey(s, sumInts, w))
	plan := mustTranslate(t, marshal(t, p), Options{})
	comps := plan.Pipeline.GetComponents()
	wc := comps.GetCoders()[comps.GetCoders()[plan.WireCoders[plan.Topics[1].PCollection]].GetComponentCoderIds()[1]]
	if wc.GetSpec().GetUrn() != urnCoderIntervalWindow {
		t.Errorf("window coder %s, want interval", wc.GetSpec().GetUrn())
	}
	if got := stageNames(plan)[0][0]; len(got) != 4 {
		t.Errorf("window_into not fused: %v", got)
	}
}

func TestUnsupported(t *testing.T) {
	cases := []struct {
		name  string
		build func(t *testing.T) *pipepb.Pipeline
		want  []string
	}{{
		name: "unknown URN",
		build: func(t *testing.T) *pipepb.Pipeline {
			p, s := beam.NewPipelineWithRoot()
			beam.ParDo(s, identity, beam.Create(s, "a"))
			pp := marshal(t, p)
			id := findTransform(t, pp, "translate.identity")
			pp.GetComponents().GetTransforms()[id].Spec = &pipepb.FunctionSpec{Urn: "beam:transform:teleport:v1"}
			return pp
		},
		want: []string{`transform "translate.identity": unsupported URN beam:transform:teleport:v1`},
	}, {
		name: "retracting",
		build: func(t *testing.T) *pipepb.Pipeline {
			p, s := beam.NewPipelineWithRoot()
			kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
			beam.ParDo(s, joinFn2, beam.GroupByKey(s, kvs))
			pp := marshal(t, p)
			for _, ws := range pp.GetComponents().GetWindowingStrategies() {
				ws.AccumulationMode = pipepb.AccumulationMode_RETRACTING
			}
			return pp
		},
		want: []string{`transform "CoGBK"`, "RETRACTING"},
	}, {
		name: "custom merging window fn without an environment",
		build: func(t *testing.T) *pipepb.Pipeline {
			pp := customWindowFnPipeline(t, pipepb.MergeStatus_NEEDS_MERGE)
			for _, ws := range pp.GetComponents().GetWindowingStrategies() {
				ws.EnvironmentId = ""
			}
			return pp
		},
		want: []string{`transform "CoGBK"`, "custom merging WindowFn", "beam:window_fn:custom:v1", "no SDK environment"},
	}, {
		name: "custom window coder",
		build: func(t *testing.T) *pipepb.Pipeline {
			pp := customWindowFnPipeline(t, pipepb.MergeStatus_NON_MERGING)
			for _, ws := range pp.GetComponents().GetWindowingStrategies() {
				pp.GetComponents().GetCoders()[ws.GetWindowCoderId()].Spec.Urn = "beam:coder:my_window:v1"
			}
			return pp
		},
		want: []string{"beam:coder:my_window:v1", "not supported"},
	}, {
		name: "unknown requirement",
		build: func(t *testing.T) *pipepb.Pipeline {
			p, s := beam.NewPipelineWithRoot()
			beam.ParDo(s, identity, beam.Create(s, "a"))
			pp := marshal(t, p)
			pp.Requirements = append(pp.Requirements, "beam:requirement:pardo:teleportation:v1")
			return pp
		},
		want: []string{"unknown pipeline requirement beam:requirement:pardo:teleportation:v1"},
	}, {
		name: "time-sorted input without state",
		build: func(t *testing.T) *pipepb.Pipeline {
			p, s := beam.NewPipelineWithRoot()
			beam.ParDo(s, identity, beam.Create(s, "a"))
			pp := marshal(t, p)
			if err := pipelinetest.RequireTimeSortedInput(pp, ".identity"); err != nil {
				t.Fatal(err)
			}
			return pp
		},
		want: []string{"time-sorted input is supported for stateful DoFns"},
	}, {
		name: "missing transform",
		build: func(t *testing.T) *pipepb.Pipeline {
			p, s := beam.NewPipelineWithRoot()
			beam.ParDo(s, identity, beam.Create(s, "a"))
			pp := marshal(t, p)
			pp.RootTransformIds = append(pp.RootTransformIds, "nope")
			return pp
		},
		want: []string{`"nope"`},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Translate(c.build(t), Options{})
			errContains(t, err, c.want...)
		})
	}
}

func joinFn2(k string, vs func(*int) bool) string { return k }

func init() { register.Function2x1(joinFn2) }

func TestUnbounded(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo(s, identity, beam.Create(s, "a"))
	pp := marshal(t, p)
	for _, pc := range pp.GetComponents().GetPcollections() {
		pc.IsBounded = pipepb.IsBounded_UNBOUNDED
		break
	}
	plan := mustTranslate(t, pp, Options{})
	if plan.Bounded {
		t.Errorf("Bounded = true with an unbounded PCollection")
	}
}

func TestWASMGlobAndComposite(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	words := beam.ParDo(s, splitWords, beam.Create(s, "a b"))
	counts := stats.Count(s, words)
	beam.ParDo(s, formatCount, counts)
	pp := marshal(t, p)
	// Map the whole stats.Count composite (covers keyedCountFn and the lifted
	// combine parts) and, by glob, the formatter.
	plan := mustTranslate(t, pp, Options{StageWASM: map[string]string{"stats.Count": "count.wasm", "translate.format*": "fmt.wasm"}})
	got := map[string]ExecutorKind{}
	for _, st := range plan.SubTopologies {
		for _, s := range st.Stages {
			for _, id := range s.Transforms {
				got[plan.Pipeline.GetComponents().GetTransforms()[id].GetUniqueName()] = s.Executor
			}
		}
	}
	want := map[string]ExecutorKind{
		"beam.createFn":                                               ExecutorHarness,
		"translate.splitWords":                                        ExecutorHarness,
		"stats.Count/stats.keyedCountFn":                              ExecutorWASM,
		"stats.Count/stats.SumPerKey/CombinePerKey/Precombine":        ExecutorWASM,
		"stats.Count/stats.SumPerKey/CombinePerKey/MergeAccumulators": ExecutorWASM,
		"stats.Count/stats.SumPerKey/CombinePerKey/ExtractOutputs":    ExecutorWASM,
		"translate.formatCount":                                       ExecutorWASM,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("executors %v\nwant %v", got, want)
	}
	if _, err := Translate(pp, Options{StageWASM: map[string]string{"[": "x"}}); err == nil {
		t.Errorf("bad glob accepted")
	}
}

var _ = context.Background

// A ParDo with a side input heads a sub-topology of its own fed by a
// materialized main input, and its stage lists the side input, which is
// written to a one-per-PCollection side topic.
func TestSideInput(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.Create(s, "x")
	beam.ParDo(s, withSide, beam.Create(s, "a"), beam.SideInput{Input: side})
	plan := mustTranslate(t, marshal(t, p), Options{})

	var sideTopic, mainTopic *Topic
	for _, tp := range plan.Topics {
		switch tp.Kind {
		case TopicSideInput:
			sideTopic = tp
		case TopicRedistribute:
			mainTopic = tp
		}
	}
	if sideTopic == nil || mainTopic == nil {
		t.Fatalf("want a side input topic and a materialized main input, got topics %+v", plan.Topics)
	}
	var gated *Stage
	for _, st := range plan.SubTopologies {
		if st.Input == sideTopic.Name {
			t.Errorf("sub-topology %d reads side topic %s: side topics are read by instances, not tasks", st.ID, sideTopic.Name)
		}
		for _, stg := range st.Stages {
			if len(stg.SideInputs) > 0 {
				if st.Input != mainTopic.Name {
					t.Errorf("stage %s with side inputs is in sub-topology reading %s, want %s", stg.ID, st.Input, mainTopic.Name)
				}
				gated = stg
			}
		}
	}
	if gated == nil {
		t.Fatal("no stage lists the side input")
	}
	si := gated.SideInputs[0]
	if si.Topic != sideTopic.Name || si.PCollection != sideTopic.PCollection || si.Multimap {
		t.Errorf("side input %+v, want topic %s of %s, iterable", si, sideTopic.Name, sideTopic.PCollection)
	}
	if got := gated.Descriptor.GetPcollections()[si.PCollection].GetCoderId(); got == "" {
		t.Errorf("descriptor lacks side input PCollection %s", si.PCollection)
	}
}

// A stateful ParDo heads a sub-topology fed by a keyed topic, and its stage
// is marked stateful with the state coders in its descriptor.
func TestStatefulParDo(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
	beam.ParDo(s, &countStateFn{Count: state.MakeValueState[int]("count")}, kvs)
	plan := mustTranslate(t, marshal(t, p), Options{})
	var stateful *Stage
	var sub *SubTopology
	for _, st := range plan.SubTopologies {
		for _, stg := range st.Stages {
			if stg.Stateful {
				stateful, sub = stg, st
			}
		}
	}
	if stateful == nil {
		t.Fatal("no stage is marked stateful")
	}
	if sub.Root.Kind != RootPassthrough || sub.Root.Output != stateful.Input {
		t.Errorf("stateful stage's sub-topology root %+v, want a passthrough of %s", sub.Root, stateful.Input)
	}
	for _, tp := range plan.Topics {
		if tp.Name == sub.Input && tp.Kind != TopicRedistribute {
			t.Errorf("stateful stage reads topic %s of kind %d, want a redistribute (keyed) topic", tp.Name, tp.Kind)
		}
	}
}

// A stateful ParDo's state expires with its windows (Stage.StateExpiry, the
// allowed lateness of its input's windowing), except in the global window.
func TestStatefulParDoStateExpiry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window func(s beam.Scope, kvs beam.PCollection) beam.PCollection
		want   map[string]int64 // by the transform's name
	}{
		{"global window", func(_ beam.Scope, kvs beam.PCollection) beam.PCollection { return kvs }, nil},
		{"fixed windows", func(s beam.Scope, kvs beam.PCollection) beam.PCollection {
			return beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs)
		}, map[string]int64{"translate.countStateFn": 0}},
		{"fixed windows with allowed lateness", func(s beam.Scope, kvs beam.PCollection) beam.PCollection {
			return beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs, beam.AllowedLateness(30*time.Second))
		}, map[string]int64{"translate.countStateFn": 30000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s := beam.NewPipelineWithRoot()
			kvs := tc.window(s, beam.ParDo(s, pairWithOne, beam.Create(s, "a")))
			beam.ParDo(s, &countStateFn{Count: state.MakeValueState[int]("count")}, kvs)
			pipe := marshal(t, p)
			plan := mustTranslate(t, pipe, Options{})
			var got map[string]int64
			for _, st := range plan.SubTopologies {
				for _, stg := range st.Stages {
					for id, l := range stg.StateExpiry {
						if got == nil {
							got = map[string]int64{}
						}
						got[pipe.GetComponents().GetTransforms()[id].GetUniqueName()] = l
					}
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("state expiry %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWASMFusionPerModule(t *testing.T) {
	// Create -> splitWords -> pairWithOne: both mapped to WASM. One module
	// (whatever the DoFn after '#'): one stage; two modules: two stages.
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo(s, pairWithOne, beam.ParDo(s, splitWords, beam.Create(s, "a b")))
	pipe := marshal(t, p)
	wasmStages := func(opts Options) [][]string {
		var out [][]string
		for _, st := range mustTranslate(t, pipe, opts).SubTopologies {
			for _, s := range st.Stages {
				if s.Executor == ExecutorWASM {
					out = append(out, s.Transforms)
				}
			}
		}
		return out
	}
	same := wasmStages(Options{StageWASM: map[string]string{"translate.splitWords": "m.wasm#Split", "translate.pairWithOne": "m.wasm#Pair"}})
	if len(same) != 1 || len(same[0]) != 2 {
		t.Errorf("one module: WASM stages %v, want one of two transforms", same)
	}
	two := wasmStages(Options{StageWASM: map[string]string{"translate.splitWords": "a.wasm", "translate.pairWithOne": "b.wasm"}})
	if len(two) != 2 {
		t.Errorf("two modules: WASM stages %v, want two", two)
	}
}

// customWindowFnPipeline is a GroupByKey whose windowing strategy has a
// window fn the host does not know, with the given merge status, defined
// by the pipeline's SDK environment.
func customWindowFnPipeline(t *testing.T, ms pipepb.MergeStatus_Enum) *pipepb.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
	beam.ParDo(s, joinFn2, beam.GroupByKey(s, kvs))
	pp := marshal(t, p)
	var env string
	for id := range pp.GetComponents().GetEnvironments() {
		env = id
	}
	for _, ws := range pp.GetComponents().GetWindowingStrategies() {
		ws.WindowFn = &pipepb.FunctionSpec{Urn: "beam:window_fn:custom:v1", Payload: []byte("fn")}
		ws.MergeStatus = ms
		ws.EnvironmentId = env
	}
	return pp
}

// A custom WindowFn's windows are assigned in the SDK; a merging one gets a
// merge stage that runs the SDK's merge_windows transform on its windows.
func TestCustomWindowFn(t *testing.T) {
	plan := mustTranslate(t, customWindowFnPipeline(t, pipepb.MergeStatus_NON_MERGING), Options{})
	for _, st := range plan.SubTopologies {
		if st.Root.MergeWindows != nil {
			t.Errorf("sub-topology %d: a merge stage for a non-merging window fn", st.ID)
		}
	}

	plan = mustTranslate(t, customWindowFnPipeline(t, pipepb.MergeStatus_NEEDS_MERGE), Options{})
	var gbk *SubTopology
	for _, st := range plan.SubTopologies {
		if st.Root.Kind == RootGroupByKey {
			gbk = st
		}
	}
	if gbk == nil || !gbk.Root.Windowed || gbk.Root.MergeWindows == nil {
		t.Fatalf("GroupByKey root %+v: want Windowed with a merge stage", gbk)
	}
	ms := gbk.Root.MergeWindows
	d := ms.Descriptor
	merge := d.GetTransforms()[ms.Transforms[0]]
	if merge.GetSpec().GetUrn() != "beam:transform:merge_windows:v1" || merge.GetEnvironmentId() != ms.EnvironmentID || ms.EnvironmentID == "" {
		t.Errorf("merge transform %v in environment %q", merge, ms.EnvironmentID)
	}
	fn := &pipepb.FunctionSpec{}
	if err := proto.Unmarshal(merge.GetSpec().GetPayload(), fn); err != nil || fn.GetUrn() != "beam:window_fn:custom:v1" || string(fn.GetPayload()) != "fn" {
		t.Errorf("merge transform payload: %v %v, want the window fn", fn, err)
	}
	if d.GetTransforms()[ms.InputTransform].GetSpec().GetUrn() != urnDataSource || len(ms.OutputTransforms) != 1 {
		t.Errorf("merge stage wiring: source %q, sinks %v", ms.InputTransform, ms.OutputTransforms)
	}
	for _, pc := range []string{ms.Input, ms.Outputs[0]} {
		if plan.WireCoders[pc] == "" || d.GetCoders()[plan.WireCoders[pc]] == nil {
			t.Errorf("PCollection %s: wire coder %q missing from the descriptor", pc, plan.WireCoders[pc])
		}
	}
	// The stage input is KV<bytes, iterable<window>> in the global window.
	in := plan.Pipeline.GetComponents().GetCoders()[plan.WireCoders[ms.Input]]
	kv := plan.Pipeline.GetComponents().GetCoders()[in.GetComponentCoderIds()[0]]
	if kv.GetSpec().GetUrn() != urnCoderKV || plan.Pipeline.GetComponents().GetCoders()[in.GetComponentCoderIds()[1]].GetSpec().GetUrn() != urnCoderGlobalWindow {
		t.Errorf("merge input coder %v", in)
	}
}

// A Flatten input whose coder differs from the output's (the Python SDK's
// CoGroupByKey does this) is re-encoded by a one-input Flatten run in the
// SDK, fused after the input's producer; the topic then carries one
// encoding.
func TestFlattenTranscodesInputs(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	a := beam.Create(s, "a")
	bb := beam.ParDo(s, identity, beam.Create(s, "b"))
	beam.ParDo(s, splitWords, beam.Flatten(s, a, bb))
	pp := marshal(t, p)
	comps := pp.GetComponents()
	flatten := findTransform(t, pp, "Flatten")
	in := comps.GetTransforms()[flatten].GetInputs()
	var local, other string
	for l, pc := range in {
		if comps.GetTransforms()[findProducer(t, pp, pc)].GetSpec().GetUrn() == urnParDo {
			local, other = l, pc
		}
	}
	if local == "" {
		t.Fatal("no flatten input produced by a ParDo")
	}
	comps.Coders["custom_string"] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: "beam:coder:my_string:v1"}}
	comps.GetPcollections()[other].CoderId = "custom_string"

	plan := mustTranslate(t, pp, Options{})
	got := plan.Pipeline.GetComponents()
	newIn := got.GetTransforms()[flatten].GetInputs()[local]
	if newIn == other {
		t.Fatalf("flatten still reads %s", other)
	}
	tc := got.GetTransforms()[findProducer(t, plan.Pipeline, newIn)]
	if tc.GetSpec().GetUrn() != urnFlatten || tc.GetInputs()["0"] != other || tc.GetEnvironmentId() == "" ||
		got.GetPcollections()[newIn].GetCoderId() != got.GetPcollections()[got.GetTransforms()[flatten].GetOutputs()["i0"]].GetCoderId() {
		t.Errorf("transcoding transform %v, output coder %s", tc, got.GetPcollections()[newIn].GetCoderId())
	}
	fused := false
	for _, st := range plan.SubTopologies {
		for _, stg := range st.Stages {
			if slices.Contains(stg.Transforms, findProducer(t, plan.Pipeline, newIn)) && slices.Contains(stg.Transforms, findProducer(t, plan.Pipeline, other)) {
				fused = true
			}
		}
	}
	if !fused {
		t.Errorf("the transcoding flatten is not fused with its input's producer: %v", stageNames(plan))
	}
}

func findProducer(t *testing.T, p *pipepb.Pipeline, pc string) string {
	t.Helper()
	for id, tr := range p.GetComponents().GetTransforms() {
		if len(tr.GetSubtransforms()) > 0 {
			continue
		}
		for _, o := range tr.GetOutputs() {
			if o == pc {
				return id
			}
		}
	}
	t.Fatalf("no producer of %s", pc)
	return ""
}

// A ParDo requiring stable input reads committed records: a Redistribute
// run by the host is put before it, so it heads a sub-topology of its own
// rather than being fused with the (possibly non-deterministic) ParDo that
// produces its input. A stateful ParDo reads its own topic already.
func TestStableInput(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	words := beam.ParDo(s, splitWords, beam.Create(s, "a b"))
	beam.ParDo(s, identity, words)
	pipe := marshal(t, p)
	if err := pipelinetest.RequireStableInput(pipe, ".identity"); err != nil {
		t.Fatal(err)
	}
	plan := mustTranslate(t, pipe, Options{})
	names := stageNames(plan)
	if len(plan.SubTopologies) != 2 || len(plan.Topics) != 2 {
		t.Fatalf("sub-topologies %v, topics %v; want 2 of each", names, topicNames(plan))
	}
	tp := plan.Topics[1]
	if tp.Kind != TopicRedistribute || !strings.HasSuffix(tp.Name, "StableInput-repartition") {
		t.Errorf("topic %+v, want the stable input's redistribute topic", tp)
	}
	comps := plan.Pipeline.GetComponents()
	st := plan.SubTopologies[1]
	if st.Root.Kind != RootPassthrough || st.Input != tp.Name || !strings.HasSuffix(comps.GetTransforms()[st.Root.TransformID].GetUniqueName(), ".identity/StableInput") {
		t.Errorf("second sub-topology: input %s, root %+v", st.Input, st.Root)
	}
	if got := fmt.Sprint(names[1]); !strings.HasSuffix(got, ".identity]]") || strings.Contains(got, "splitWords") {
		t.Errorf("stages of the second sub-topology %s, want the identity ParDo alone", got)
	}
	if got := fmt.Sprint(names[0]); !strings.Contains(got, "splitWords") {
		t.Errorf("stages of the first sub-topology %s, want splitWords", got)
	}

	// Stateful: no extra topic.
	p, s = beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
	beam.ParDo(s, &countStateFn{Count: state.MakeValueState[int]("count")}, kvs)
	plain := mustTranslate(t, marshal(t, p), Options{})
	pipe = marshal(t, p)
	if err := pipelinetest.RequireStableInput(pipe, "countStateFn"); err != nil {
		t.Fatal(err)
	}
	if got, want := topicNames(mustTranslate(t, pipe, Options{})), topicNames(plain); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stateful ParDo requiring stable input: topics %v, want %v as without", got, want)
	}

	// Side inputs: the main input is materialized already, no extra topic.
	p, s = beam.NewPipelineWithRoot()
	side := beam.Create(s, "x")
	beam.ParDo(s, withSide, beam.ParDo(s, splitWords, beam.Create(s, "a b")), beam.SideInput{Input: side})
	plain = mustTranslate(t, marshal(t, p), Options{})
	pipe = marshal(t, p)
	if err := pipelinetest.RequireStableInput(pipe, ".withSide"); err != nil {
		t.Fatal(err)
	}
	if got, want := topicNames(mustTranslate(t, pipe, Options{})), topicNames(plain); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParDo with side inputs requiring stable input: topics %v, want %v as without", got, want)
	}
}

func joinWithSide(k string, vs func(*int) bool, side []string) string { return k }

func init() { register.Function3x1(joinWithSide) }

// A GroupByKey's groups are paged (Root and Stage PagedGroups, the stage's
// descriptor reading a state-backed iterable: checkPlan checks the coder)
// only when every reader is a harness stage that consumes its input at once,
// on the fast path and for windowed GroupByKeys (panes) alike.
func TestPagedGroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s beam.Scope, kvs beam.PCollection)
		opts  Options
		want  bool
		// sides is how many side input topics the GroupByKey root waits
		// for, its side-input readers staying in its sub-topology; with
		// none, a side-input reader heads one of its own ("-main").
		sides int
		// layout is the plan's layout version (0: LayoutFirst).
		layout int
		// pieced: the reader heads a sub-topology of its own, and the
		// groups cross its "-main" topic in pieces (Sink.PagedGroups), to
		// its stage reading them in pages.
		pieced bool
	}{
		{"a harness stage", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, joinFn2, beam.GroupByKey(s, kvs))
		}, Options{}, true, 0, 0, false},
		{"a WASM stage", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, joinFn2, beam.GroupByKey(s, kvs))
		}, Options{StageWASM: map[string]string{"translate.joinFn2": "j.wasm"}}, false, 0, 0, false},
		{"a stage with a side input", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, joinWithSide, beam.GroupByKey(s, kvs), beam.SideInput{Input: beam.Create(s, "x")})
		}, Options{}, true, 1, LayoutGroupReaders, false},
		{"a stateful stage", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, &groupStateFn{}, beam.GroupByKey(s, kvs))
		}, Options{}, true, 0, LayoutGroupReaders, false},
		{"a stateful stage, and another reader of the groups", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, kvs)
			beam.ParDo(s, &groupStateFn{}, g)
			beam.ParDo(s, joinFn2, g)
		}, Options{}, true, 0, LayoutStatefulReaders, false},
		{"a stateful stage after a GroupByKey with allowed lateness (a windowed GroupByKey)", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs, beam.AllowedLateness(time.Minute)))
			beam.ParDo(s, &groupStateFn{}, g)
		}, Options{}, true, 0, LayoutStatefulReaders, false},
		{"a stateful stage and a side input, and another reader of the groups", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, kvs)
			beam.ParDo(s, &groupStateSideFn{}, g, beam.SideInput{Input: beam.Create(s, "x")})
			beam.ParDo(s, joinFn2, g)
		}, Options{}, true, 0, 0, true},
		{"a stateful stage after merging windows", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, &groupStateFn{}, beam.GroupByKey(s, beam.WindowInto(s, window.NewSessions(time.Minute), kvs)))
		}, Options{}, true, 0, 0, true},
		{"a side input, and another reader of the groups", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, kvs)
			beam.ParDo(s, joinWithSide, g, beam.SideInput{Input: beam.Create(s, "x")})
			beam.ParDo(s, joinFn2, g)
		}, Options{}, true, 0, 0, true},
		{"a side input made from the groups", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, kvs)
			beam.ParDo(s, joinWithSide, g, beam.SideInput{Input: beam.ParDo(s, joinFn2, g)})
		}, Options{}, true, 0, 0, true},
		{"a side input made from the groups in another sub-topology", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, kvs)
			beam.ParDo(s, joinWithSide, g, beam.SideInput{Input: beam.Reshuffle(s, beam.ParDo(s, joinFn2, g))})
		}, Options{}, true, 0, 0, true},
		{"merging windows (a windowed GroupByKey)", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, joinFn2, beam.GroupByKey(s, beam.WindowInto(s, window.NewSessions(time.Minute), kvs)))
		}, Options{}, true, 0, 0, false},
		// Behind a windowed GroupByKey the root does not wait: the
		// reader's stage parks its panes (gated, sides 0).
		{"a side input after merging windows", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, beam.WindowInto(s, window.NewSessions(time.Minute), kvs))
			beam.ParDo(s, joinWithSide, g, beam.SideInput{Input: beam.Create(s, "x")})
		}, Options{}, true, 0, LayoutGatedPanes, false},
		{"a side input after a GroupByKey with allowed lateness", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs, beam.AllowedLateness(time.Minute)))
			beam.ParDo(s, joinWithSide, g, beam.SideInput{Input: beam.Create(s, "x")})
		}, Options{}, true, 0, LayoutGatedPanes, false},
		{"a stateful stage and a side input after a GroupByKey with allowed lateness", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs, beam.AllowedLateness(time.Minute)))
			beam.ParDo(s, &groupStateSideFn{}, g, beam.SideInput{Input: beam.Create(s, "x")})
		}, Options{}, true, 0, LayoutGatedPanes, false},
		{"a stateful stage and a side input after merging windows", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, beam.WindowInto(s, window.NewSessions(time.Minute), kvs))
			beam.ParDo(s, &groupStateSideFn{}, g, beam.SideInput{Input: beam.Create(s, "x")})
		}, Options{}, true, 0, 0, true},
		{"a side input after a GroupByKey with allowed lateness, and another reader of the groups", func(s beam.Scope, kvs beam.PCollection) {
			g := beam.GroupByKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs, beam.AllowedLateness(time.Minute)))
			beam.ParDo(s, joinWithSide, g, beam.SideInput{Input: beam.Create(s, "x")})
			beam.ParDo(s, joinFn2, g)
		}, Options{}, true, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s := beam.NewPipelineWithRoot()
			tc.build(s, beam.ParDo(s, pairWithOne, beam.Create(s, "a", "b")))
			plan := mustTranslate(t, marshal(t, p), tc.opts)
			var roots int
			for _, st := range plan.SubTopologies {
				if st.Root.Kind != RootGroupByKey {
					continue
				}
				roots++
				if st.Root.PagedGroups != tc.want {
					t.Errorf("root PagedGroups %v, want %v", st.Root.PagedGroups, tc.want)
				}
				if len(st.Root.SideInputTopics) != tc.sides {
					t.Errorf("root waits for side inputs %q, want %d", st.Root.SideInputTopics, tc.sides)
				}
				for _, stg := range st.Stages {
					if stg.Input == st.Root.Output && stg.PagedGroups != tc.want {
						t.Errorf("stage %s PagedGroups %v, want %v", stg.ID, stg.PagedGroups, tc.want)
					}
				}
			}
			if roots != 1 {
				t.Fatalf("%d GroupByKey roots, want 1", roots)
			}
			var main []string
			for _, tp := range plan.Topics {
				if strings.HasSuffix(tp.Name, "-main") {
					main = append(main, tp.Name)
				}
			}
			// A side-input or stateful reader heads a sub-topology of its
			// own unless it stays with the GroupByKey (paged, then).
			reader := strings.Contains(tc.name, "side input") || strings.Contains(tc.name, "stateful")
			if wantMain := reader && (!tc.want || tc.pieced); (len(main) > 0) != wantMain {
				t.Errorf("main input topics %q; want one: %v", main, wantMain)
			}
			for _, st := range plan.SubTopologies {
				for _, sk := range st.Sinks {
					if strings.HasSuffix(sk.Topic, "-main") && sk.PagedGroups != tc.pieced {
						t.Errorf("sink of %s to %s: PagedGroups %v, want %v", sk.PCollection, sk.Topic, sk.PagedGroups, tc.pieced)
					}
				}
				if st.Root.Kind != RootPassthrough || !strings.HasSuffix(st.Input, "-main") {
					continue
				}
				for _, stg := range st.Stages {
					if stg.Input == st.Root.Output && stg.PagedGroups != tc.pieced {
						t.Errorf("stage %s reading %s: PagedGroups %v, want %v", stg.ID, st.Input, stg.PagedGroups, tc.pieced)
					}
				}
			}
			wantLayout := max(tc.layout, LayoutFirst)
			if plan.Layout != wantLayout {
				t.Errorf("layout %d, want %d", plan.Layout, wantLayout)
			}
		})
	}
}

// Groups cross the other redistribute topics in pieces too when every
// producer is a GroupByKey's output and one stage taking pages reads them
// (it holds a group until the cycle after its last piece, gated without
// side inputs): here a ParDo requiring stable input. (A Flatten or a
// Reshuffle of groups, which the Go SDK does not build, is the same rule;
// host/pythontest runs a Flatten of groups.) A WASM reader gets whole
// groups.
func TestPiecedTopics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		build  func(s beam.Scope, kvs beam.PCollection)
		stable string // a transform to mark as requiring stable input
		suffix string // the topic's name ends so
		want   bool
	}{
		{"a ParDo requiring stable input", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, joinFn2, beam.GroupByKey(s, kvs))
		}, "joinFn2", "StableInput-repartition", true},
		{"a ParDo requiring stable input, run as WASM", func(s beam.Scope, kvs beam.PCollection) {
			beam.ParDo(s, joinFn2, beam.GroupByKey(s, kvs))
		}, "joinFn2", "StableInput-repartition", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s := beam.NewPipelineWithRoot()
			tc.build(s, beam.ParDo(s, pairWithOne, beam.Create(s, "a", "b")))
			pipe := marshal(t, p)
			if tc.stable != "" {
				if err := pipelinetest.RequireStableInput(pipe, tc.stable); err != nil {
					t.Fatal(err)
				}
			}
			opts := Options{}
			if strings.Contains(tc.name, "WASM") {
				opts.StageWASM = map[string]string{"translate.joinFn2": "j.wasm"}
			}
			plan := mustTranslate(t, pipe, opts)
			var topic string
			for _, tp := range plan.Topics {
				if strings.HasSuffix(tp.Name, tc.suffix) {
					topic = tp.Name
				}
			}
			if topic == "" {
				t.Fatalf("no topic ending %s in %v", tc.suffix, topicNames(plan))
			}
			groups := map[string]bool{}
			for _, st := range plan.SubTopologies {
				if st.Root.Kind == RootGroupByKey {
					groups[st.Root.Output] = true
				}
			}
			var sinks int
			for _, st := range plan.SubTopologies {
				for _, sk := range st.Sinks {
					if sk.Topic != topic || !groups[sk.PCollection] {
						continue
					}
					sinks++
					if sk.PagedGroups != tc.want || st.Root.PagedGroups != tc.want {
						t.Errorf("sink of %s to %s: PagedGroups %v (its root's %v), want %v", sk.PCollection, topic, sk.PagedGroups, st.Root.PagedGroups, tc.want)
					}
				}
				if st.Input != topic {
					continue
				}
				for _, stg := range st.Stages {
					if stg.Input == st.Root.Output && stg.PagedGroups != tc.want {
						t.Errorf("stage %s reading %s: PagedGroups %v, want %v", stg.ID, topic, stg.PagedGroups, tc.want)
					}
				}
			}
			if sinks == 0 {
				t.Errorf("no GroupByKey writes its groups to %s", topic)
			}
		})
	}
}
