package translate

import (
	"fmt"
	"slices"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate/windowing"
)

// subBuilder accumulates one sub-topology.
type subBuilder struct {
	st      *SubTopology
	members []string // SDK transforms and local flattens, topological order
}

// stageBuilder accumulates one fused stage.
type stageBuilder struct {
	s      *Stage
	set    map[string]bool
	wasm   bool
	env    string
	forced bool // headed by a transform that must be a stage root
}

func (t *translator) inWS(pc string) string {
	return t.comps.GetPcollections()[pc].GetWindowingStrategyId()
}

// layout splits the (expanded, sorted) leaves into sub-topologies joined by
// topics, fuses each sub-topology's SDK transforms into stages and fills the
// wire coders and descriptors.
func (t *translator) layout() (*Plan, error) {
	plan := &Plan{Pipeline: t.p, WireCoders: t.wireCoders, Bounded: true, Layout: LayoutFirst}
	subOf := map[string]*subBuilder{} // PCollection → sub-topology producing it
	var subs []*subBuilder
	topics := map[string]*Topic{}
	nImpulse := 0

	addTopic := func(tp *Topic) error {
		if !validTopicName(tp.Name) {
			return fmt.Errorf("internal error: invalid topic name %q", tp.Name)
		}
		if topics[tp.Name] != nil {
			return fmt.Errorf("two topics would be named %q", tp.Name)
		}
		topics[tp.Name] = tp
		plan.Topics = append(plan.Topics, tp)
		return nil
	}
	newSub := func(tp *Topic, root Root) (*subBuilder, error) {
		if err := addTopic(tp); err != nil {
			return nil, err
		}
		sb := &subBuilder{st: &SubTopology{ID: len(subs), Input: tp.Name, Root: root}}
		subs = append(subs, sb)
		plan.SubTopologies = append(plan.SubTopologies, sb.st)
		subOf[root.Output] = sb
		return sb, nil
	}
	// sinkTo makes the sub-topologies producing pcs write them to topic.
	sinkTo := func(topic string, pcs ...string) {
		for _, pc := range pcs {
			sb := subOf[pc]
			sb.st.Sinks = append(sb.st.Sinks, Sink{PCollection: pc, Topic: topic})
		}
	}

	plan.TestStream = t.testStream != ""
	for _, id := range t.leaves {
		tr := t.comps.GetTransforms()[id]
		// A PCollection is unbounded because of its origin: a leaf whose
		// outputs are unbounded while its inputs are not. A TestStream as
		// origin keeps the plan bounded (it ends).
		unboundedIn := false
		for _, pc := range tr.GetInputs() {
			unboundedIn = unboundedIn || t.comps.GetPcollections()[pc].GetIsBounded() != pipepb.IsBounded_BOUNDED
		}
		for _, pc := range tr.GetOutputs() {
			if t.comps.GetPcollections()[pc].GetIsBounded() != pipepb.IsBounded_BOUNDED && !unboundedIn && t.kind[id] != kindTestStream {
				plan.Bounded = false
			}
		}
		switch t.kind[id] {
		case kindTestStream:
			root, err := t.testStreamRoot(id)
			if err != nil {
				return nil, err
			}
			tp := &Topic{Name: fmt.Sprintf("teststream-%d", nImpulse), Kind: TopicImpulse, PCollection: root.Output}
			nImpulse++
			sb, err := newSub(tp, root)
			if err != nil {
				return nil, err
			}
			for _, pc := range root.TestStreamOutputs {
				subOf[pc] = sb
			}

		case kindKafkaRead:
			r := t.kafkaReads[id]
			out, errs, err := KafkaReadOutputs(tr.GetOutputs(), r)
			if err != nil {
				return nil, fmt.Errorf("transform %q: %w", tr.GetUniqueName(), err)
			}
			if err := t.checkKafkaRead(tr.GetUniqueName(), out, r); err != nil {
				return nil, err
			}
			if errs != "" {
				s, err := t.kafkaRow(tr.GetUniqueName(), "error output", errs)
				if err != nil {
					return nil, err
				}
				if err := SameRowLayout(s, KafkaErrorSchema()); err != nil {
					return nil, fmt.Errorf("transform %q: error output %q: the row is not a Kafka read's error row (failed_row, error_message): %w", tr.GetUniqueName(), errs, err)
				}
			}
			// A Kafka read is unbounded whatever its output says, unless
			// its spec bounds it (max_num_records, max_read_time): then it
			// ends, its watermark at +inf.
			if !r.Bounded() {
				plan.Bounded = false
			}
			// One source sub-topology per topic (kafkaio.go); several
			// feed a flatten topic whose sub-topology produces the
			// read's output for what follows.
			var sources []*subBuilder
			for _, topic := range r.Topics {
				tp := &Topic{Name: topic, Kind: TopicKafka, PCollection: out}
				if topics[tp.Name] != nil {
					return nil, fmt.Errorf("transform %q: topic %q is read twice, or collides with an internal topic's name; read it once and use the output twice", tr.GetUniqueName(), tp.Name)
				}
				sb, err := newSub(tp, Root{Kind: RootKafkaSource, TransformID: id, Output: out, ErrorOutput: errs, WindowingStrategy: t.inWS(out), KafkaRead: r})
				if err != nil {
					return nil, err
				}
				if errs != "" {
					subOf[errs] = sb // one topic: translate checked it
				}
				sources = append(sources, sb)
			}
			if len(sources) > 1 {
				tp := &Topic{Name: sanitizeTopicName(tr.GetUniqueName()) + "-flatten", Kind: TopicRedistribute, PCollection: out, Producers: []string{out}}
				for _, sb := range sources {
					sb.st.Sinks = append(sb.st.Sinks, Sink{PCollection: out, Topic: tp.Name})
				}
				if _, err := newSub(tp, Root{Kind: RootPassthrough, TransformID: id, Output: out, WindowingStrategy: t.inWS(out)}); err != nil {
					return nil, err
				}
			}

		case kindKafkaWrite:
			in := onlyValue(tr.GetInputs())
			w := t.kafkaWrites[id]
			if err := t.checkKafkaWrite(tr.GetUniqueName(), in, w); err != nil {
				return nil, err
			}
			sb := subOf[in]
			sink := Sink{PCollection: in, Topic: w.Topic, KafkaWrite: w, TransformID: id}
			if w.ErrorOutput != "" {
				// Its error rows are the write's sub-topology's, as a
				// stage's output: their consumers fuse there.
				sink.ErrorOutput = tr.GetOutputs()[w.ErrorOutput]
				ins, err := t.kafkaRow(tr.GetUniqueName(), "input", in)
				if err != nil {
					return nil, err
				}
				errs, err := t.kafkaRow(tr.GetUniqueName(), "error output", sink.ErrorOutput)
				if err != nil {
					return nil, err
				}
				if err := SameRowLayout(errs, KafkaWriteErrorSchema(ins)); err != nil {
					return nil, fmt.Errorf("transform %q: error output %q: the row is not a Kafka write's error row (failed_row, error_message): %w", tr.GetUniqueName(), sink.ErrorOutput, err)
				}
				subOf[sink.ErrorOutput] = sb
			}
			sb.st.Sinks = append(sb.st.Sinks, sink)

		case kindImpulse:
			out := onlyValue(tr.GetOutputs())
			tp := &Topic{Name: fmt.Sprintf("impulse-%d", nImpulse), Kind: TopicImpulse, PCollection: out}
			nImpulse++
			if _, err := newSub(tp, Root{Kind: RootImpulse, TransformID: id, Output: out, WindowingStrategy: t.inWS(out)}); err != nil {
				return nil, err
			}

		case kindGBK:
			rootID := id
			if r, ok := t.rootTransform[id]; ok {
				rootID = r
			}
			in, out := onlyValue(tr.GetInputs()), onlyValue(tr.GetOutputs())
			if err := t.checkGBK(rootID, in, out); err != nil {
				return nil, err
			}
			windowed, err := t.checkStrategy(t.name(rootID), in)
			if err != nil {
				return nil, err
			}
			tp := &Topic{Name: sanitizeTopicName(t.name(rootID)) + "-repartition", Kind: TopicRepartition, PCollection: in, Producers: []string{in}}
			sinkTo(tp.Name, in)
			sb, err := newSub(tp, Root{Kind: RootGroupByKey, TransformID: rootID, Output: out, WindowingStrategy: t.inWS(in), Windowed: windowed})
			if err != nil {
				return nil, err
			}
			if isCustomMerging(t.comps.GetWindowingStrategies()[t.inWS(in)]) {
				if sb.st.Root.MergeWindows, err = t.mergeStage(rootID, in, fmt.Sprintf("stage-%d-merge", sb.st.ID)); err != nil {
					return nil, err
				}
			}

		case kindRedistribute:
			in, out := onlyValue(tr.GetInputs()), onlyValue(tr.GetOutputs())
			if err := t.sameWire(tr.GetUniqueName(), out, in); err != nil {
				return nil, err
			}
			tp := &Topic{Name: sanitizeTopicName(tr.GetUniqueName()) + "-repartition", Kind: TopicRedistribute, PCollection: in, Producers: []string{in}, SpreadBySize: t.spreads[id]}
			sinkTo(tp.Name, in)
			if _, err := newSub(tp, Root{Kind: RootPassthrough, TransformID: id, Output: out, WindowingStrategy: t.inWS(in)}); err != nil {
				return nil, err
			}

		case kindFlatten:
			out := onlyValue(tr.GetOutputs())
			var ins []string
			var from *subBuilder
			local := true
			for _, l := range sortedKeys(tr.GetInputs()) {
				pc := tr.GetInputs()[l]
				ins = append(ins, pc)
				if from == nil {
					from = subOf[pc]
				} else if subOf[pc] != from {
					local = false
				}
			}
			if local {
				from.members = append(from.members, id)
				subOf[out] = from
				continue
			}
			// Inputs from several sub-topologies: materialize the
			// flatten as a redistribute topic all inputs write to. A
			// PCollection listed twice is written twice, as the model
			// wants (every element appears once per listing).
			if err := t.sameWire(tr.GetUniqueName(), out, ins...); err != nil {
				return nil, err
			}
			tp := &Topic{Name: sanitizeTopicName(tr.GetUniqueName()) + "-flatten", Kind: TopicRedistribute, PCollection: out, Producers: ins}
			sinkTo(tp.Name, ins...)
			if _, err := newSub(tp, Root{Kind: RootPassthrough, TransformID: id, Output: out, WindowingStrategy: t.inWS(out)}); err != nil {
				return nil, err
			}

		case kindSDK:
			_, in := mainInput(tr)
			sb := subOf[in]
			sides := sideInputs(tr)
			if len(sides) > 0 || t.statefulOf[id] {
				// A stage waits for its side inputs to be complete; its
				// task holds its output watermark meanwhile. So that the
				// hold never feeds back into a side input, the main input
				// is materialized and the ParDo heads a sub-topology of its
				// own, downstream of everything it waits for. A stateful
				// ParDo needs the same, keyed: the topic partitions KVs by
				// key, so each key's state lives in one task.
				for _, l := range sortedKeys(sides) {
					pc := tr.GetInputs()[l]
					name := sanitizeTopicName(t.comps.GetPcollections()[pc].GetUniqueName()) + "-side"
					if topics[name] == nil {
						spc := t.comps.GetPcollections()[pc]
						ws := t.comps.GetWindowingStrategies()[spc.GetWindowingStrategyId()]
						first := severalPanes(ws) && spc.GetIsBounded() == pipepb.IsBounded_UNBOUNDED && ws.GetWindowFn().GetUrn() == windowing.URNGlobalWindows
						if err := addTopic(&Topic{Name: name, Kind: TopicSideInput, PCollection: pc, Producers: []string{pc}, ReadyAtFirstFiring: first}); err != nil {
							return nil, err
						}
						sinkTo(name, pc)
					}
					t.sideInputsOf[id] = append(t.sideInputsOf[id], SideInput{
						TransformID: id, LocalName: l, PCollection: pc, Topic: name,
						Multimap: sides[l].GetAccessPattern().GetUrn() == urnSideInputMultimap,
					})
				}
				if stays, layout := t.staysWithGroups(id, tr, sb, in); stays {
					plan.Layout = max(plan.Layout, layout)
					// The fast path fires each group only once these
					// side inputs are complete for its window (see
					// Root.SideInputTopics): the ParDo reads its groups
					// where they are, in pages, and nothing is parked.
					// A windowed GroupByKey fires as its triggers say,
					// and the ParDo's stage parks the panes its side
					// inputs are not ready for (with their pages). Its
					// state, if any, is keyed as the groups are.
					if !sb.st.Root.Windowed {
						for _, si := range t.sideInputsOf[id] {
							if !slices.Contains(sb.st.Root.SideInputTopics, si.Topic) {
								sb.st.Root.SideInputTopics = append(sb.st.Root.SideInputTopics, si.Topic)
							}
						}
						slices.Sort(sb.st.Root.SideInputTopics)
					}
				} else if !t.sidesUpstream[id] {
					tp := &Topic{Name: sanitizeTopicName(tr.GetUniqueName()) + "-main", Kind: TopicRedistribute, PCollection: in, Producers: []string{in}}
					sinkTo(tp.Name, in)
					nsb, err := newSub(tp, Root{Kind: RootPassthrough, TransformID: id, Output: in, WindowingStrategy: t.inWS(in)})
					if err != nil {
						return nil, err
					}
					sb = nsb
				}
			}
			sb.members = append(sb.members, id)
			for _, pc := range tr.GetOutputs() {
				subOf[pc] = sb
			}
		}
	}

	for _, sb := range subs {
		if err := t.fuse(sb); err != nil {
			return nil, err
		}
	}

	// Wire coders for everything that crosses the host boundary.
	var boundary []string
	for _, tp := range plan.Topics {
		boundary = append(boundary, tp.PCollection)
		boundary = append(boundary, tp.Producers...)
	}
	for _, st := range plan.SubTopologies {
		boundary = append(boundary, st.Root.Output)
		if st.Root.ErrorOutput != "" {
			boundary = append(boundary, st.Root.ErrorOutput)
		}
		for _, s := range st.Stages {
			boundary = append(boundary, s.Input)
			boundary = append(boundary, s.Outputs...)
		}
		for _, f := range st.Flattens {
			boundary = append(boundary, f.Output)
			boundary = append(boundary, f.Inputs...)
		}
		for _, sk := range st.Sinks {
			boundary = append(boundary, sk.PCollection)
			if sk.ErrorOutput != "" {
				boundary = append(boundary, sk.ErrorOutput)
			}
		}
	}
	for _, pc := range boundary {
		if _, err := t.wire(pc); err != nil {
			return nil, err
		}
	}
	pieced := t.piecedTopics(plan)
	for _, st := range plan.SubTopologies {
		t.pageGroups(st, pieced)
		for _, s := range st.Stages {
			if err := t.buildDescriptor(s); err != nil {
				return nil, fmt.Errorf("stage %s: %w", s.ID, err)
			}
		}
	}
	return plan, nil
}

// fusionKey is what must agree for two transforms to share a stage.
// WASM transforms fuse only with transforms of the same module (the
// reference up to a '#', which may name a DoFn in it).
func (t *translator) fusionKey(id string) (wasm bool, env string) {
	if m, ok := t.wasmModule(id); ok {
		mod, _, _ := strings.Cut(m, "#")
		return true, "wasm:" + mod
	}
	return false, t.comps.GetTransforms()[id].GetEnvironmentId()
}

func (sb *stageBuilder) compatible(wasm bool, env string) bool {
	return sb.wasm == wasm && (sb.env == "" || env == "" || sb.env == env)
}

func (sb *stageBuilder) add(t *translator, id string, env string) {
	sb.s.Transforms = append(sb.s.Transforms, id)
	sb.s.SideInputs = append(sb.s.SideInputs, t.sideInputsOf[id]...)
	sb.s.TimerFamilies = append(sb.s.TimerFamilies, t.timersOf[id]...)
	sb.s.Stateful = sb.s.Stateful || t.statefulOf[id]
	if lateness, ok := t.timeSortedOf[id]; ok {
		sb.s.TimeSortedInput, sb.s.TimeSortedLateness = true, lateness
	}
	if lateness, ok := t.stateExpiryOf[id]; ok {
		if sb.s.StateExpiry == nil {
			sb.s.StateExpiry = map[string]int64{}
		}
		sb.s.StateExpiry[id] = lateness
	}
	sb.set[id] = true
	if sb.env == "" {
		sb.env = env
	}
}

// fuse greedily fuses the members of a sub-topology into stages: a transform
// joins the stage producing its input when the executor and environment
// agree, else a sibling stage reading the same input, else starts a stage.
// SDF process transforms always start a stage. A flatten joins a stage when
// all its inputs are produced in that stage or are its input; otherwise it
// becomes a runner-side Flatten of the sub-topology.
func (t *translator) fuse(sb *subBuilder) error {
	st := sb.st
	stageOf := map[string]*stageBuilder{}
	var stages []*stageBuilder
	newStage := func(input string, wasm bool, forced bool) *stageBuilder {
		s := &stageBuilder{
			s:      &Stage{ID: fmt.Sprintf("stage-%d-%d", st.ID, len(stages)), Input: input},
			set:    map[string]bool{},
			wasm:   wasm,
			forced: forced,
		}
		stages = append(stages, s)
		return s
	}
	for _, id := range sb.members {
		tr := t.comps.GetTransforms()[id]
		wasm, env := t.fusionKey(id)
		if t.kind[id] == kindFlatten {
			var cand *stageBuilder
			for _, l := range sortedKeys(tr.GetInputs()) {
				if s := stageOf[t.producer[tr.GetInputs()[l]]]; s != nil {
					cand = s
					break
				}
			}
			ok := cand != nil && cand.compatible(wasm, env)
			for _, pc := range tr.GetInputs() {
				if !ok {
					break
				}
				ok = stageOf[t.producer[pc]] == cand || cand.s.Input == pc
			}
			if ok {
				cand.add(t, id, env)
				stageOf[id] = cand
				continue
			}
			f := &Flatten{TransformID: id, Output: onlyValue(tr.GetOutputs())}
			for _, l := range sortedKeys(tr.GetInputs()) {
				f.Inputs = append(f.Inputs, tr.GetInputs()[l])
			}
			if err := t.sameWire(tr.GetUniqueName(), f.Output, f.Inputs...); err != nil {
				return err
			}
			st.Flattens = append(st.Flattens, f)
			continue
		}
		_, in := mainInput(tr)
		var target *stageBuilder
		if !t.forcedRoot[id] {
			if s := stageOf[t.producer[in]]; s != nil && s.compatible(wasm, env) {
				target = s
			} else {
				for _, s := range stages {
					if s.s.Input == in && !s.forced && s.compatible(wasm, env) {
						target = s
						break
					}
				}
			}
		}
		if target == nil {
			target = newStage(in, wasm, t.forcedRoot[id])
		}
		target.add(t, id, env)
		stageOf[id] = target
	}

	for _, s := range stages {
		if err := t.finishStage(s); err != nil {
			return err
		}
		st.Stages = append(st.Stages, s.s)
	}
	return nil
}

// finishStage decides a stage's executor and environment and computes its
// outputs.
func (t *translator) finishStage(sb *stageBuilder) error {
	s := sb.s
	if sb.wasm {
		s.Executor = ExecutorWASM
		s.WASMModules = map[string]string{}
		for _, id := range s.Transforms {
			m, _ := t.wasmModule(id)
			s.WASMModules[id] = m
		}
	} else {
		s.Executor = ExecutorHarness
		env := sb.env
		if env == "" {
			if envs := t.comps.GetEnvironments(); len(envs) == 1 {
				env = sortedKeys(envs)[0]
			} else {
				return fmt.Errorf("stage of transforms %v: cannot tell which SDK environment runs it", t.displayNames(s.Transforms))
			}
		}
		if t.comps.GetEnvironments()[env] == nil {
			return fmt.Errorf("stage of transforms %v: environment %q is not defined", t.displayNames(s.Transforms), env)
		}
		s.EnvironmentID = env
	}
	outs := map[string]bool{}
	for _, id := range s.Transforms {
		for _, pc := range t.comps.GetTransforms()[id].GetOutputs() {
			for _, c := range t.consumers[pc] {
				if !sb.set[c] {
					outs[pc] = true
				}
			}
		}
	}
	s.Outputs = sortedKeys(outs)
	return nil
}

func (t *translator) displayNames(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = t.name(id)
	}
	return out
}

// checkGBK checks the windowing and coders of a GroupByKey (rootID names it
// in messages: the lifted combine, or the GroupByKey itself).
func (t *translator) checkGBK(rootID, in, out string) error {
	name := t.name(rootID)
	if err := t.checkWindowCoder(in); err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	inW, err := t.wire(in)
	if err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	outW, err := t.wire(out)
	if err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	cs := t.comps.GetCoders()
	inKV := cs[cs[inW].GetComponentCoderIds()[0]]
	outKV := cs[cs[outW].GetComponentCoderIds()[0]]
	if inKV.GetSpec().GetUrn() != urnCoderKV || len(inKV.GetComponentCoderIds()) != 2 {
		return fmt.Errorf("transform %q: GroupByKey input %q has coder %s, want a KV coder", name, in, inKV.GetSpec().GetUrn())
	}
	if outKV.GetSpec().GetUrn() != urnCoderKV || len(outKV.GetComponentCoderIds()) != 2 {
		return fmt.Errorf("transform %q: GroupByKey output %q has coder %s, want a KV coder", name, out, outKV.GetSpec().GetUrn())
	}
	iter := cs[outKV.GetComponentCoderIds()[1]]
	if iter.GetSpec().GetUrn() != urnCoderIterable || len(iter.GetComponentCoderIds()) != 1 {
		return fmt.Errorf("transform %q: GroupByKey output %q has value coder %s, want an iterable coder", name, out, iter.GetSpec().GetUrn())
	}
	if !t.coderEqual(inKV.GetComponentCoderIds()[0], outKV.GetComponentCoderIds()[0]) ||
		!t.coderEqual(inKV.GetComponentCoderIds()[1], iter.GetComponentCoderIds()[0]) ||
		!t.coderEqual(cs[inW].GetComponentCoderIds()[1], cs[outW].GetComponentCoderIds()[1]) {
		return fmt.Errorf("transform %q: GroupByKey output coder is not KV<K, Iterable<V>> of its input coder KV<K, V> in the same windows", name)
	}
	return nil
}

// sameWire checks that elements of the from PCollections can be forwarded
// unchanged as elements of to: their wire coders encode alike.
func (t *translator) sameWire(name, to string, from ...string) error {
	toW, err := t.wire(to)
	if err != nil {
		return fmt.Errorf("transform %q: %w", name, err)
	}
	for _, pc := range from {
		w, err := t.wire(pc)
		if err != nil {
			return fmt.Errorf("transform %q: %w", name, err)
		}
		if !t.coderEqual(w, toW) {
			return fmt.Errorf("transform %q: input %q and output %q are encoded differently (coders %q and %q); re-encoding between them is not supported yet", name, pc, to, t.comps.GetPcollections()[pc].GetCoderId(), t.comps.GetPcollections()[to].GetCoderId())
		}
	}
	return nil
}

// staysWithGroups reports whether ParDo id, reading side inputs or keeping
// user state, stays in sub-topology sb, whose GroupByKey root produces its
// main input in, rather than heading a sub-topology of its own fed by a
// "-main" topic, and the layout version (Plan.Layout) that rule came with.
// The groups of a key all come to the one task that owns the key, as a
// topic keyed for state would bring them; so a group is read from the store
// in pages however large, and never crosses a topic whole (which bounded
// it to internal_max_message_bytes).
//
// A ParDo with side inputs stays when the root is the GroupByKey fast path
// (one pane per key and window, at its end) and the ParDo is the only
// reader of the groups. The root then holds a group back until the ParDo's
// side inputs are complete for its window, as the ParDo's own task would
// hold its input. The only reader, because any other would get each group
// only when this ParDo's side inputs are ready, a wait that is not its own;
// and then nothing made from the groups (nothing in sb) comes before the
// ParDo, so none of its side inputs can wait on the groups held for them.
// Behind a windowed GroupByKey (whose panes fire early or late, which the
// fast path's timer cannot hold back) a ParDo with side inputs stays too
// when it is the only reader (LayoutGatedPanes), over merging windows as
// well unless it keeps user state: the root fires as its triggers say, and
// the ParDo's stage parks each pane until its side inputs are ready for
// it, as its own task would, copying a paged pane's values into the store
// (host/internal/task/gatepages.go). The parked panes hold the task's
// output watermark, which only the ParDo's own output follows (it is the
// only reader), so no side input waits on them.
//
// A stateful ParDo without side inputs waits for nothing, so it stays
// whatever else reads the groups (LayoutGroupReaders when it is the fast
// path's only reader, LayoutStatefulReaders otherwise), behind a windowed
// GroupByKey too: its timers and state expiry follow the root's output
// watermark, which holds at the earliest pane the root still holds, as the
// watermark the root reports to a topic would. Merging windows keep the
// topic for stateful ParDos (Beam has no user state over merging windows).
//
// Splittable ParDos and ParDos requiring stable or time-sorted input keep
// the topic.
func (t *translator) staysWithGroups(id string, tr *pipepb.PTransform, sb *subBuilder, in string) (bool, int) {
	r := sb.st.Root
	if r.Kind != RootGroupByKey || r.Output != in || t.sidesUpstream[id] || tr.GetSpec().GetUrn() != urnParDo {
		return false, 0
	}
	pd := &pipepb.ParDoPayload{}
	if err := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); err != nil {
		return false, 0
	}
	if pd.GetRequiresStableInput() || pd.GetRequiresTimeSortedInput() || pd.GetRestrictionCoderId() != "" {
		return false, 0
	}
	ws := t.comps.GetWindowingStrategies()[t.comps.GetPcollections()[in].GetWindowingStrategyId()]
	merging := ws.GetMergeStatus() != pipepb.MergeStatus_NON_MERGING
	onlyReader := len(t.consumers[in]) == 1
	sides := len(t.sideInputsOf[id]) > 0
	switch {
	case merging:
		if sides && !t.statefulOf[id] && onlyReader {
			return true, LayoutGatedPanes
		}
	case !r.Windowed && onlyReader:
		return true, LayoutGroupReaders
	case !sides:
		return true, LayoutStatefulReaders
	case onlyReader:
		return true, LayoutGatedPanes
	}
	return false, 0
}

// pageGroups sets PagedGroups on a GroupByKey root and the stages reading
// its output when every consumer can take state-backed iterables: harness
// stages whose input is consumed at once (no time sorting, no splittable
// DoFn; a stage parking its input for side inputs the root does not wait
// for copies a parked group's pages, host/internal/task/gatepages.go),
// reading a wire coder of KV<K, iterable<V>>, and sinks to the topics in
// pieced (piecedTopics), which then carry a large group in pieces. A
// flatten, another sink or a WASM stage reading the output gets whole
// groups.
func (t *translator) pageGroups(st *SubTopology, pieced map[string]*Stage) {
	if st.Root.Kind != RootGroupByKey {
		return
	}
	if _, ok := t.pagedCoder(st.Root.Output, false); !ok {
		return
	}
	for _, f := range st.Flattens {
		if slices.Contains(f.Inputs, st.Root.Output) {
			return
		}
	}
	var sinks []*Sink
	for i := range st.Sinks {
		sk := &st.Sinks[i]
		if sk.PCollection != st.Root.Output {
			continue
		}
		if pieced[sk.Topic] == nil {
			return
		}
		sinks = append(sinks, sk)
	}
	var readers []*Stage
	for _, s := range st.Stages {
		if s.Input != st.Root.Output {
			continue
		}
		if !t.takesPages(s) {
			return
		}
		readers = append(readers, s)
	}
	if len(readers)+len(sinks) == 0 {
		return
	}
	st.Root.PagedGroups = true
	for _, s := range readers {
		s.PagedGroups = true
	}
	for _, sk := range sinks {
		sk.PagedGroups = true
		pieced[sk.Topic].PagedGroups = true
	}
}

// takesPages reports whether stage s can read its input's groups as
// state-backed iterables: a harness stage that consumes its input at once
// or parks it for side inputs, never holding an element past the cycle
// otherwise (no time sorting, no splittable DoFn).
func (t *translator) takesPages(s *Stage) bool {
	return s.Executor == ExecutorHarness && !s.TimeSortedInput && !t.splits(s)
}

// piecedTopics returns the topics a GroupByKey's groups may cross in
// pieces, each with the stage that reads them: a redistribute topic
// ("-main", "-flatten", a Reshuffle's or stable input's "-repartition")
// whose producers are all GroupByKey roots' outputs, and whose
// sub-topology passes it to one stage only, which takes pages. That stage
// stores a large group's pieces as a parked group's copy
// (host/internal/task/gatepages.go) and reads it in pages once released:
// by the gate when its side inputs are ready, or in the next cycle when it
// has none (the host gates every such stage). So the group is never whole
// in a record or in memory. A reader that time-sorts its input or splits
// it (a splittable DoFn), a WASM stage, or a topic another kind of
// producer writes too, gets whole groups.
func (t *translator) piecedTopics(plan *Plan) map[string]*Stage {
	topics := map[string]*Topic{}
	for _, tp := range plan.Topics {
		topics[tp.Name] = tp
	}
	groups := map[string]bool{}
	for _, st := range plan.SubTopologies {
		if st.Root.Kind == RootGroupByKey {
			groups[st.Root.Output] = true
		}
	}
	out := map[string]*Stage{}
	for _, st := range plan.SubTopologies {
		tp := topics[st.Input]
		if st.Root.Kind != RootPassthrough || tp == nil || tp.Kind != TopicRedistribute || len(tp.Producers) == 0 {
			continue
		}
		ok := true
		for _, pc := range tp.Producers {
			_, paged := t.pagedCoder(pc, false)
			ok = ok && groups[pc] && paged
		}
		if _, paged := t.pagedCoder(st.Root.Output, false); !ok || !paged {
			continue
		}
		var reader *Stage
		for _, s := range st.Stages {
			if s.Input != st.Root.Output {
				continue
			}
			ok = ok && reader == nil && t.takesPages(s)
			reader = s
		}
		for _, f := range st.Flattens {
			ok = ok && !slices.Contains(f.Inputs, st.Root.Output)
		}
		for _, sk := range st.Sinks {
			ok = ok && sk.PCollection != st.Root.Output
		}
		if ok && reader != nil {
			out[tp.Name] = reader
		}
	}
	return out
}

// splits reports whether a stage runs a splittable DoFn, whose residuals
// would carry its input elements past the cycle.
func (t *translator) splits(s *Stage) bool {
	for _, id := range s.Transforms {
		if t.comps.GetTransforms()[id].GetSpec().GetUrn() == urnSDFProcessSizedElements {
			return true
		}
	}
	return false
}

// pagedCoder is the wire coder of pcoll (a windowed KV<K, iterable<V>>)
// with the iterable declared state-backed, as coders added (when add is
// set) to the pipeline's components under ids derived from the originals;
// ok is false when the wire coder is not of that shape.
func (t *translator) pagedCoder(pcoll string, add bool) (id string, ok bool) {
	coders := t.comps.GetCoders()
	wv := coders[t.wireCoders[pcoll]]
	if wv.GetSpec().GetUrn() != urnCoderWindowedValue || len(wv.GetComponentCoderIds()) != 2 {
		return "", false
	}
	kv := coders[wv.GetComponentCoderIds()[0]]
	if kv.GetSpec().GetUrn() != urnCoderKV || len(kv.GetComponentCoderIds()) != 2 {
		return "", false
	}
	it := coders[kv.GetComponentCoderIds()[1]]
	if it.GetSpec().GetUrn() != urnCoderIterable || len(it.GetComponentCoderIds()) != 1 {
		return "", false
	}
	if !add {
		return "", true
	}
	put := func(base string, c *pipepb.Coder) string {
		id := base + "_paged"
		for n := 1; coders[id] != nil && !proto.Equal(coders[id], c); n++ {
			id = fmt.Sprintf("%s_paged%d", base, n)
		}
		coders[id] = c
		return id
	}
	sbi := put(kv.GetComponentCoderIds()[1], &pipepb.Coder{
		Spec:              &pipepb.FunctionSpec{Urn: urnCoderStateBackedIterable},
		ComponentCoderIds: []string{it.GetComponentCoderIds()[0]},
	})
	pkv := put(wv.GetComponentCoderIds()[0], &pipepb.Coder{
		Spec:              proto.Clone(kv.GetSpec()).(*pipepb.FunctionSpec),
		ComponentCoderIds: []string{kv.GetComponentCoderIds()[0], sbi},
	})
	return put(t.wireCoders[pcoll], &pipepb.Coder{
		Spec:              proto.Clone(wv.GetSpec()).(*pipepb.FunctionSpec),
		ComponentCoderIds: []string{pkv, wv.GetComponentCoderIds()[1]},
	}), true
}
