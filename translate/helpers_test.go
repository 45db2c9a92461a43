package translate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// marshal builds the pipeline proto the way the universal runner does.
func marshal(t testing.TB, p *beam.Pipeline) *pipepb.Pipeline {
	t.Helper()
	edges, _, err := p.Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	env, err := graphx.CreateEnvironment(context.Background(), graphx.URNEnvDocker, func(context.Context) string { return "apache/beam_go_sdk:test" })
	if err != nil {
		t.Fatalf("CreateEnvironment: %v", err)
	}
	pp, err := graphx.Marshal(edges, &graphx.Options{Environment: env})
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	return pp
}

// findTransform returns the id of the transform with the given unique name.
func findTransform(t testing.TB, p *pipepb.Pipeline, name string) string {
	t.Helper()
	for id, tr := range p.GetComponents().GetTransforms() {
		if tr.GetUniqueName() == name {
			return id
		}
	}
	var names []string
	for _, tr := range p.GetComponents().GetTransforms() {
		names = append(names, tr.GetUniqueName())
	}
	sort.Strings(names)
	t.Fatalf("no transform named %q in %q", name, names)
	return ""
}

// stageNames lists, per sub-topology and stage, the unique names of the
// stage's transforms.
func stageNames(p *Plan) [][][]string {
	var out [][][]string
	for _, st := range p.SubTopologies {
		var ss [][]string
		for _, s := range st.Stages {
			var ns []string
			for _, id := range s.Transforms {
				ns = append(ns, p.Pipeline.GetComponents().GetTransforms()[id].GetUniqueName())
			}
			ss = append(ss, ns)
		}
		out = append(out, ss)
	}
	return out
}

// checkCoderHostParseable verifies that a coder only uses host coders
// outside length prefixes.
func checkCoderHostParseable(coders map[string]*pipepb.Coder, id string) error {
	c := coders[id]
	if c == nil {
		return fmt.Errorf("coder %q missing", id)
	}
	urn := c.GetSpec().GetUrn()
	if !hostCoderURNs[urn] && urn != urnCoderStateBackedIterable { // the host writes it (PagedGroups)
		return fmt.Errorf("coder %q (%s) is not host-parseable", id, urn)
	}
	for _, cc := range c.GetComponentCoderIds() {
		if coders[cc] == nil {
			return fmt.Errorf("coder %q: component %q missing", id, cc)
		}
		if urn == urnCoderLengthPrefix {
			continue
		}
		if err := checkCoderHostParseable(coders, cc); err != nil {
			return fmt.Errorf("in %q: %w", id, err)
		}
	}
	return nil
}

// checkPlan verifies the invariants plan.go promises the host, and the
// self-consistency of every stage descriptor.
func checkPlan(t testing.TB, p *Plan) {
	t.Helper()
	comps := p.Pipeline.GetComponents()
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
	}

	// Topics: valid unique names, each read by exactly one sub-topology.
	topics := map[string]*Topic{}
	for _, tp := range p.Topics {
		if !validTopicName(tp.Name) {
			errorf("topic %q: invalid name", tp.Name)
		}
		if topics[tp.Name] != nil {
			errorf("topic %q: duplicate", tp.Name)
		}
		topics[tp.Name] = tp
		if comps.GetPcollections()[tp.PCollection] == nil {
			errorf("topic %q: PCollection %q missing", tp.Name, tp.PCollection)
		}
		if (tp.Kind == TopicImpulse || tp.Kind == TopicKafka) && len(tp.Producers) != 0 {
			errorf("topic %q: impulse or Kafka topic with producers", tp.Name)
		}
		if tp.Kind != TopicImpulse && tp.Kind != TopicKafka && len(tp.Producers) == 0 {
			errorf("topic %q: no producers", tp.Name)
		}
	}
	readers := map[string]int{}
	subOfTopic := map[string]int{}
	for i, st := range p.SubTopologies {
		if st.ID != i {
			errorf("sub-topology %d has ID %d", i, st.ID)
		}
		readers[st.Input]++
		subOfTopic[st.Input] = st.ID
		if topics[st.Input] == nil {
			errorf("sub-topology %d reads unknown topic %q", st.ID, st.Input)
		}
	}
	for name, tp := range topics {
		if tp.Kind == TopicSideInput {
			if readers[name] != 0 {
				errorf("side input topic %q read by %d sub-topologies, want none", name, readers[name])
			}
			continue
		}
		if readers[name] != 1 {
			errorf("topic %q read by %d sub-topologies", name, readers[name])
		}
	}

	wire := func(pc, what string) {
		t.Helper()
		w, ok := p.WireCoders[pc]
		if !ok {
			errorf("%s: PCollection %q has no wire coder", what, pc)
			return
		}
		c := comps.GetCoders()[w]
		if c.GetSpec().GetUrn() != urnCoderWindowedValue {
			errorf("%s: wire coder %q of %q is %s, want windowed_value", what, w, pc, c.GetSpec().GetUrn())
			return
		}
		if err := checkCoderHostParseable(comps.GetCoders(), w); err != nil {
			errorf("%s: wire coder of %q: %v", what, pc, err)
		}
		elem := comps.GetCoders()[c.GetComponentCoderIds()[0]]
		orig := comps.GetCoders()[comps.GetPcollections()[pc].GetCoderId()]
		if !hostCoderURNs[orig.GetSpec().GetUrn()] && elem.GetSpec().GetUrn() != urnCoderLengthPrefix {
			errorf("%s: %q has unknown coder %s but its wire coder is not length-prefixed", what, pc, orig.GetSpec().GetUrn())
		}
	}

	// Sinks and producers.
	sinkFrom := map[string]map[string]int{} // topic → PCollection → sub-topology
	for _, st := range p.SubTopologies {
		produced := map[string]bool{st.Root.Output: true}
		wire(st.Root.Output, "root output")
		for _, s := range st.Stages {
			if !produced[s.Input] {
				errorf("stage %s: input %q is not produced earlier in sub-topology %d", s.ID, s.Input, st.ID)
			}
			for _, o := range s.Outputs {
				produced[o] = true
			}
			for _, f := range st.Flattens {
				// Flattens are in topological order relative to stages only
				// through their PCollections: admit their outputs once their
				// inputs are produced.
				all := true
				for _, in := range f.Inputs {
					all = all && produced[in]
				}
				if all {
					produced[f.Output] = true
				}
			}
		}
		for _, f := range st.Flattens {
			wire(f.Output, "flatten output")
			for _, in := range f.Inputs {
				wire(in, "flatten input")
				if !produced[in] {
					errorf("flatten %s: input %q not produced in sub-topology %d", f.TransformID, in, st.ID)
				}
			}
		}
		for _, sk := range st.Sinks {
			if !produced[sk.PCollection] {
				errorf("sub-topology %d sinks %q which it does not produce", st.ID, sk.PCollection)
			}
			if sk.KafkaWrite != nil {
				if topics[sk.Topic] != nil || sk.Topic != sk.KafkaWrite.Topic {
					errorf("sub-topology %d: Kafka sink to %q names a Plan topic or not its write's topic", st.ID, sk.Topic)
				}
				continue
			}
			if topics[sk.Topic] == nil {
				errorf("sub-topology %d sinks to unknown topic %q", st.ID, sk.Topic)
				continue
			}
			if sinkFrom[sk.Topic] == nil {
				sinkFrom[sk.Topic] = map[string]int{}
			}
			if _, dup := sinkFrom[sk.Topic][sk.PCollection]; dup && !strings.HasSuffix(sk.Topic, "-flatten") {
				errorf("PCollection %q sunk twice to %q", sk.PCollection, sk.Topic)
			}
			sinkFrom[sk.Topic][sk.PCollection] = st.ID
			if subOfTopic[sk.Topic] <= st.ID {
				if topics[sk.Topic].Kind != TopicSideInput {
					errorf("topic %q: producer sub-topology %d is not listed before its consumer %d", sk.Topic, st.ID, subOfTopic[sk.Topic])
				}
			}
		}
	}
	for _, tp := range p.Topics {
		wire(tp.PCollection, "topic "+tp.Name)
		for _, pr := range tp.Producers {
			wire(pr, "producer of "+tp.Name)
			if _, ok := sinkFrom[tp.Name][pr]; !ok {
				errorf("topic %q: producer %q has no sink", tp.Name, pr)
			}
		}
		distinct := map[string]bool{}
		for _, pr := range tp.Producers {
			distinct[pr] = true
		}
		if len(sinkFrom[tp.Name]) != len(distinct) {
			errorf("topic %q: %d sinks for %d producers", tp.Name, len(sinkFrom[tp.Name]), len(tp.Producers))
		}
	}

	// Every SDK leaf is in exactly one stage; stages are well-formed.
	inStage := map[string]string{}
	for _, st := range p.SubTopologies {
		for _, s := range st.Stages {
			if !sort.StringsAreSorted(s.Outputs) {
				errorf("stage %s: outputs not sorted", s.ID)
			}
			wire(s.Input, "stage "+s.ID+" input")
			for _, o := range s.Outputs {
				wire(o, "stage "+s.ID+" output")
			}
			for _, id := range s.Transforms {
				if prev, ok := inStage[id]; ok {
					errorf("transform %q in stages %s and %s", id, prev, s.ID)
				}
				inStage[id] = s.ID
			}
			switch s.Executor {
			case ExecutorHarness:
				if comps.GetEnvironments()[s.EnvironmentID] == nil {
					errorf("stage %s: environment %q missing", s.ID, s.EnvironmentID)
				}
			case ExecutorWASM:
				if len(s.WASMModules) != len(s.Transforms) {
					errorf("stage %s: %d WASM modules for %d transforms", s.ID, len(s.WASMModules), len(s.Transforms))
				}
			default:
				errorf("stage %s: executor %d", s.ID, s.Executor)
			}
			checkDescriptor(t, p, s)
		}
	}
	parent := map[string]string{}
	for id, tr := range comps.GetTransforms() {
		for _, sub := range tr.GetSubtransforms() {
			parent[sub] = id
		}
	}
	underRedistribute := func(id string) bool {
		for cur := parent[id]; cur != ""; cur = parent[cur] {
			if redistributeURNs[comps.GetTransforms()[cur].GetSpec().GetUrn()] {
				return true
			}
		}
		return false
	}
	for id, tr := range comps.GetTransforms() {
		if len(tr.GetSubtransforms()) == 0 && sdkLeafURNs[tr.GetSpec().GetUrn()] && !underRedistribute(id) {
			if _, ok := inStage[id]; !ok {
				errorf("SDK transform %q is in no stage", tr.GetUniqueName())
			}
		}
	}
	// Components: every referenced coder exists.
	for id, c := range comps.GetCoders() {
		for _, cc := range c.GetComponentCoderIds() {
			if comps.GetCoders()[cc] == nil {
				errorf("coder %q: component %q missing", id, cc)
			}
		}
	}
	for id, pc := range comps.GetPcollections() {
		if comps.GetCoders()[pc.GetCoderId()] == nil {
			errorf("PCollection %q: coder %q missing", id, pc.GetCoderId())
		}
	}
}

// checkDescriptor verifies a stage descriptor refers only to what it holds.
func checkDescriptor(t testing.TB, p *Plan, s *Stage) {
	t.Helper()
	d := s.Descriptor
	if d == nil {
		t.Errorf("stage %s: no descriptor", s.ID)
		return
	}
	if d.GetId() != s.ID {
		t.Errorf("stage %s: descriptor id %q", s.ID, d.GetId())
	}
	coder := func(id, what string) {
		t.Helper()
		if d.GetCoders()[id] == nil {
			t.Errorf("stage %s: %s: coder %q missing from descriptor", s.ID, what, id)
		}
	}
	for id, c := range d.GetCoders() {
		for _, cc := range c.GetComponentCoderIds() {
			coder(cc, "component of "+id)
		}
	}
	for id, pc := range d.GetPcollections() {
		coder(pc.GetCoderId(), "PCollection "+id)
		ws := d.GetWindowingStrategies()[pc.GetWindowingStrategyId()]
		if ws == nil {
			t.Errorf("stage %s: PCollection %q: windowing strategy %q missing", s.ID, id, pc.GetWindowingStrategyId())
			continue
		}
		coder(ws.GetWindowCoderId(), "window coder of "+pc.GetWindowingStrategyId())
		if e := ws.GetEnvironmentId(); e != "" && d.GetEnvironments()[e] == nil {
			t.Errorf("stage %s: environment %q missing", s.ID, e)
		}
	}
	var sources, sinks []string
	for id, tr := range d.GetTransforms() {
		for _, pc := range tr.GetInputs() {
			if d.GetPcollections()[pc] == nil {
				t.Errorf("stage %s: transform %q input %q missing", s.ID, id, pc)
			}
		}
		for _, pc := range tr.GetOutputs() {
			if d.GetPcollections()[pc] == nil {
				t.Errorf("stage %s: transform %q output %q missing", s.ID, id, pc)
			}
		}
		if e := tr.GetEnvironmentId(); e != "" && d.GetEnvironments()[e] == nil {
			t.Errorf("stage %s: transform %q environment %q missing", s.ID, id, e)
		}
		switch tr.GetSpec().GetUrn() {
		case urnDataSource, urnDataSink:
			port := &fnpb.RemoteGrpcPort{}
			if err := proto.Unmarshal(tr.GetSpec().GetPayload(), port); err != nil {
				t.Errorf("stage %s: port of %q: %v", s.ID, id, err)
			}
			coder(port.GetCoderId(), "port of "+id)
			if err := checkCoderHostParseable(d.GetCoders(), port.GetCoderId()); err != nil {
				t.Errorf("stage %s: port of %q: %v", s.ID, id, err)
			}
			if tr.GetSpec().GetUrn() == urnDataSource {
				sources = append(sources, id)
				if !s.PagedGroups && port.GetCoderId() != p.WireCoders[s.Input] {
					t.Errorf("stage %s: source coder %q, want wire coder %q", s.ID, port.GetCoderId(), p.WireCoders[s.Input])
				}
				if s.PagedGroups && !pagedLike(d.GetCoders(), p.Pipeline.GetComponents().GetCoders(), port.GetCoderId(), p.WireCoders[s.Input]) {
					t.Errorf("stage %s: source coder %q, want wire coder %q with its iterable state-backed", s.ID, port.GetCoderId(), p.WireCoders[s.Input])
				}
			} else {
				sinks = append(sinks, id)
				if pc := s.OutputTransforms[id]; port.GetCoderId() != p.WireCoders[pc] || onlyValue(tr.GetInputs()) != pc {
					t.Errorf("stage %s: sink %q carries %q with coder %q, want %q with %q", s.ID, id, onlyValue(tr.GetInputs()), port.GetCoderId(), pc, p.WireCoders[pc])
				}
			}
		}
	}
	if len(sources) != 1 || sources[0] != s.InputTransform {
		t.Errorf("stage %s: sources %v, InputTransform %q", s.ID, sources, s.InputTransform)
	} else if onlyValue(d.GetTransforms()[s.InputTransform].GetOutputs()) != s.Input {
		t.Errorf("stage %s: source does not produce the input %q", s.ID, s.Input)
	}
	if len(sinks) != len(s.Outputs) || len(s.OutputTransforms) != len(s.Outputs) {
		t.Errorf("stage %s: %d sinks, %d output transforms, %d outputs", s.ID, len(sinks), len(s.OutputTransforms), len(s.Outputs))
	}
	for _, id := range s.Transforms {
		if d.GetTransforms()[id] == nil {
			t.Errorf("stage %s: transform %q missing from descriptor", s.ID, id)
		}
	}
	if s.Executor == ExecutorHarness && d.GetEnvironments()[s.EnvironmentID] == nil {
		t.Errorf("stage %s: environment %q missing from descriptor", s.ID, s.EnvironmentID)
	}
}

// errContains fails unless err mentions every part.
func errContains(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Translate succeeded, want an error mentioning %q", parts)
	}
	for _, part := range parts {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %q", err, part)
		}
	}
}

// pagedLike reports whether coder got (in d) is coder want (in comps) with
// exactly one iterable, the value of its KV, declared state-backed.
func pagedLike(d, comps map[string]*pipepb.Coder, got, want string) bool {
	g, w := d[got], comps[want]
	if g == nil || w == nil || len(g.GetComponentCoderIds()) != len(w.GetComponentCoderIds()) {
		return false
	}
	switch gu, wu := g.GetSpec().GetUrn(), w.GetSpec().GetUrn(); {
	case gu == urnCoderStateBackedIterable && wu == urnCoderIterable:
		return g.GetComponentCoderIds()[0] == w.GetComponentCoderIds()[0]
	case gu != wu:
		return false
	case gu == urnCoderKV:
		return g.GetComponentCoderIds()[0] == w.GetComponentCoderIds()[0] && pagedLike(d, comps, g.GetComponentCoderIds()[1], w.GetComponentCoderIds()[1])
	case gu == urnCoderWindowedValue:
		return g.GetComponentCoderIds()[1] == w.GetComponentCoderIds()[1] && pagedLike(d, comps, g.GetComponentCoderIds()[0], w.GetComponentCoderIds()[0])
	}
	return false
}
