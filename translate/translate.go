package translate

import (
	"fmt"
	"path"
	"sort"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Options configure Translate.
type Options struct {
	// StageWASM maps transform unique names (or path.Match globs over them)
	// to WASM module references. A leaf transform is mapped when its own
	// unique name or that of one of its enclosing composites matches (exact
	// names win over globs; globs are tried in sorted order). A stage gets
	// ExecutorWASM only if every transform in it is mapped: fusion never puts
	// mapped and unmapped transforms in one stage, nor transforms mapped to
	// different modules (references that differ only after a "#", which may
	// name a DoFn, are one module).
	StageWASM map[string]string
}

// leafKind classifies the leaf transforms the translator executes.
type leafKind int

const (
	kindImpulse leafKind = iota + 1
	kindSDK              // executed by the SDK (or WASM) inside a stage
	kindGBK
	kindFlatten
	kindRedistribute
	kindTestStream
	kindKafkaRead  // URNKafkaRead: the root of a source sub-topology
	kindKafkaWrite // URNKafkaWrite: a sink of its input
)

// translator holds the state of one Translate call.
type translator struct {
	opts  Options
	p     *pipepb.Pipeline
	comps *pipepb.Components

	parent map[string]string // transform id → enclosing composite id
	// leaves in walk order, then (after sort) in topological order.
	leaves []string
	kind   map[string]leafKind
	// forcedRoot marks SDK transforms that must head their own stage
	// (SDF process transforms).
	forcedRoot map[string]bool
	// sideInputsOf lists the side inputs of each ParDo that has some.
	sideInputsOf map[string][]SideInput
	// sidesUpstream marks the parts of a splittable ParDo with side inputs
	// after the first (split and size, process): their main input comes
	// from the sub-topology the first part heads, downstream of every side
	// input already, so they need no topic of their own to wait on them.
	sidesUpstream map[string]bool
	// spreads are the SpreadRestrictions Redistributes of splittable
	// ParDos (Topic.SpreadBySize).
	spreads map[string]bool
	// timersOf lists the timer families of each stateful ParDo; statefulOf
	// marks every ParDo with user state or timers.
	timersOf   map[string][]TimerFamily
	statefulOf map[string]bool
	// timeSortedOf holds the stateful ParDos requiring time-sorted input,
	// with their input's allowed lateness.
	timeSortedOf map[string]int64
	// stateExpiryOf holds the stateful ParDos whose input is not in the
	// global window, with the allowed lateness of its windowing.
	stateExpiryOf map[string]int64
	// topicName overrides the transform whose unique name names a topic and
	// whose id is the Root.TransformID (lifted combines: the composite).
	rootTransform map[string]string

	producer  map[string]string   // PCollection → leaf transform producing it
	consumers map[string][]string // PCollection → leaf transforms consuming it

	safeMemo   map[string]string // coder id → host-parseable coder id
	wvMemo     map[string]string // safe element coder|window coder → windowed value coder id
	wireCoders map[string]string // PCollection → windowed value coder id

	names map[string]bool // transform unique names in use (lazily built)

	testStream string // id of the pipeline's TestStream, if any

	// kafkaReads and kafkaWrites are the decoded specs of the Kafka IO
	// primitives, by transform id (kafkaio.go).
	kafkaReads  map[string]*KafkaRead
	kafkaWrites map[string]*KafkaWrite
}

// Translate validates a pipeline and lays it out as a Plan. The input is not
// modified: the Plan holds a rewritten copy.
func Translate(p *pipepb.Pipeline, opts Options) (*Plan, error) {
	if p == nil || p.GetComponents() == nil {
		return nil, fmt.Errorf("translate: empty pipeline")
	}
	for pat := range opts.StageWASM {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("translate: stage WASM pattern %q: %w", pat, err)
		}
	}
	p = proto.Clone(p).(*pipepb.Pipeline)
	comps := p.GetComponents()
	if comps.Transforms == nil {
		comps.Transforms = map[string]*pipepb.PTransform{}
	}
	if comps.Pcollections == nil {
		comps.Pcollections = map[string]*pipepb.PCollection{}
	}
	if comps.Coders == nil {
		comps.Coders = map[string]*pipepb.Coder{}
	}
	if comps.WindowingStrategies == nil {
		comps.WindowingStrategies = map[string]*pipepb.WindowingStrategy{}
	}
	if comps.Environments == nil {
		comps.Environments = map[string]*pipepb.Environment{}
	}
	t := &translator{
		opts:          opts,
		p:             p,
		comps:         comps,
		parent:        map[string]string{},
		kind:          map[string]leafKind{},
		forcedRoot:    map[string]bool{},
		sideInputsOf:  map[string][]SideInput{},
		sidesUpstream: map[string]bool{},
		spreads:       map[string]bool{},
		timersOf:      map[string][]TimerFamily{},
		statefulOf:    map[string]bool{},
		timeSortedOf:  map[string]int64{},
		stateExpiryOf: map[string]int64{},
		rootTransform: map[string]string{},
		producer:      map[string]string{},
		consumers:     map[string][]string{},
		safeMemo:      map[string]string{},
		wvMemo:        map[string]string{},
		wireCoders:    map[string]string{},
		kafkaReads:    map[string]*KafkaRead{},
		kafkaWrites:   map[string]*KafkaWrite{},
	}
	if len(p.GetRootTransformIds()) == 0 {
		return nil, fmt.Errorf("translate: pipeline has no root transforms")
	}
	// Walk first, so that an unsupported feature is reported with the
	// transform that uses it rather than as a bare pipeline requirement.
	for _, id := range p.GetRootTransformIds() {
		if err := t.walk(id, ""); err != nil {
			return nil, fmt.Errorf("translate: %w", err)
		}
	}
	if err := t.checkRequirements(); err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	if err := t.transcodeFlattens(); err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	t.gcPCollections()
	if err := t.link(); err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	plan, err := t.layout()
	if err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	return plan, nil
}

// name returns the unique name of a transform for messages.
func (t *translator) name(id string) string {
	if tr := t.comps.GetTransforms()[id]; tr != nil && tr.GetUniqueName() != "" {
		return tr.GetUniqueName()
	}
	return id
}

// checkRequirements fails on pipeline requirements the runner does not meet.
func (t *translator) checkRequirements() error {
	for _, r := range t.p.GetRequirements() {
		switch r {
		case urnReqSplittableDoFn:
		case urnReqStatefulProcessing:
		case urnReqTimeSortedInput:
		case urnReqBundleFinalization:
		case urnReqStableInput:
		case urnReqOnWindowExpiration:
			return fmt.Errorf("pipeline requirement %s: on-window-expiration timers are not supported yet", r)
		default:
			return fmt.Errorf("unknown pipeline requirement %s", r)
		}
	}
	return nil
}

// walk visits a transform and its sub-transforms, recording leaves and
// applying runner-side expansions.
func (t *translator) walk(id, parent string) error {
	tr := t.comps.GetTransforms()[id]
	if tr == nil {
		return fmt.Errorf("transform id %q is referenced but not defined", id)
	}
	if _, seen := t.parent[id]; seen {
		return fmt.Errorf("transform %q: visited twice (listed under two parents?)", tr.GetUniqueName())
	}
	t.parent[id] = parent
	urn := tr.GetSpec().GetUrn()
	switch {
	case redistributeURNs[urn]:
		if len(tr.GetInputs()) != 1 || len(tr.GetOutputs()) != 1 {
			return fmt.Errorf("transform %q: %s needs exactly one input and one output, has %d and %d", tr.GetUniqueName(), urn, len(tr.GetInputs()), len(tr.GetOutputs()))
		}
		t.addLeaf(id, kindRedistribute)
		return nil
	case urn == urnCombinePerKey:
		lifted, err := t.liftCombine(id, tr)
		if err != nil {
			return err
		}
		if lifted {
			return nil
		}
		if len(tr.GetSubtransforms()) == 0 {
			return fmt.Errorf("transform %q: %s cannot be lifted and has no expansion", tr.GetUniqueName(), urn)
		}
	}
	if len(tr.GetSubtransforms()) > 0 {
		for _, sub := range tr.GetSubtransforms() {
			if err := t.walk(sub, id); err != nil {
				return err
			}
		}
		return nil
	}
	switch {
	case urn == urnImpulse:
		if len(tr.GetInputs()) != 0 || len(tr.GetOutputs()) != 1 {
			return fmt.Errorf("transform %q: impulse needs no input and one output", tr.GetUniqueName())
		}
		t.addLeaf(id, kindImpulse)
	case urn == urnTestStream:
		return t.addTestStream(id, tr)
	case urn == URNKafkaRead:
		return t.addKafkaRead(id, tr)
	case urn == URNKafkaWrite:
		return t.addKafkaWrite(id, tr)
	case urn == urnGBK:
		if len(tr.GetInputs()) != 1 || len(tr.GetOutputs()) != 1 {
			return fmt.Errorf("transform %q: group-by-key needs one input and one output", tr.GetUniqueName())
		}
		t.addLeaf(id, kindGBK)
	case urn == urnFlatten:
		if len(tr.GetOutputs()) != 1 {
			return fmt.Errorf("transform %q: flatten needs one output", tr.GetUniqueName())
		}
		if len(tr.GetInputs()) == 0 {
			return fmt.Errorf("transform %q: flatten of no inputs is not supported yet", tr.GetUniqueName())
		}
		t.addLeaf(id, kindFlatten)
	case urn == urnParDo:
		return t.addParDo(id, tr)
	case sdkLeafURNs[urn]:
		if len(tr.GetInputs()) != 1 {
			return fmt.Errorf("transform %q: %s needs exactly one input, has %d", tr.GetUniqueName(), urn, len(tr.GetInputs()))
		}
		if urn == urnSDFProcessSizedElements {
			t.forcedRoot[id] = true
		}
		if urn != urnWindowInto {
			// The SDF and combine components carry the payload of their
			// original transform: validate it like a ParDo.
			if err := t.checkSDKPayload(tr); err != nil {
				return err
			}
		}
		t.addLeaf(id, kindSDK)
	case urn == "":
		// A composite with nothing in it, or an identity placeholder.
		if len(tr.GetInputs())+len(tr.GetOutputs()) == 0 {
			return nil
		}
		if len(tr.GetInputs()) == 1 && len(tr.GetOutputs()) == 1 && onlyValue(tr.GetInputs()) == onlyValue(tr.GetOutputs()) {
			return nil
		}
		return fmt.Errorf("transform %q: has neither a URN nor sub-transforms", tr.GetUniqueName())
	default:
		return fmt.Errorf("transform %q: unsupported URN %s", tr.GetUniqueName(), urn)
	}
	return nil
}

func (t *translator) addLeaf(id string, k leafKind) {
	t.leaves = append(t.leaves, id)
	t.kind[id] = k
}

// mainInput returns the local and global id of the parallel input of an SDK
// transform: its only input that is not a side input.
func mainInput(tr *pipepb.PTransform) (local, global string) {
	sides := sideInputs(tr)
	for _, l := range sortedKeys(tr.GetInputs()) {
		if _, side := sides[l]; !side {
			return l, tr.GetInputs()[l]
		}
	}
	return "", ""
}

// sideInputs returns the side inputs of a ParDo or of a part of a
// splittable one (validated when it was added), by local name; nil for other
// transforms.
func sideInputs(tr *pipepb.PTransform) map[string]*pipepb.SideInput {
	switch tr.GetSpec().GetUrn() {
	case urnParDo, urnSDFPairWithRestriction, urnSDFSplitAndSize, urnSDFProcessSizedElements:
	default:
		return nil
	}
	pd := &pipepb.ParDoPayload{}
	if err := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); err != nil {
		return nil
	}
	return pd.GetSideInputs()
}

func onlyValue(m map[string]string) string {
	for _, v := range m {
		return v
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// gcPCollections drops PCollections no transform refers to any more (the
// outputs of replaced combine expansions).
func (t *translator) gcPCollections() {
	used := map[string]bool{}
	for _, tr := range t.comps.GetTransforms() {
		for _, pc := range tr.GetInputs() {
			used[pc] = true
		}
		for _, pc := range tr.GetOutputs() {
			used[pc] = true
		}
	}
	for id := range t.comps.GetPcollections() {
		if !used[id] {
			delete(t.comps.Pcollections, id)
		}
	}
}

// link computes producers and consumers of the leaves and sorts the leaves
// topologically (stable with respect to walk order).
func (t *translator) link() error {
	for _, id := range t.leaves {
		tr := t.comps.GetTransforms()[id]
		for _, l := range sortedKeys(tr.GetOutputs()) {
			pc := tr.GetOutputs()[l]
			if err := t.checkPCollection(pc); err != nil {
				return fmt.Errorf("transform %q output %q: %w", tr.GetUniqueName(), l, err)
			}
			if other, ok := t.producer[pc]; ok {
				return fmt.Errorf("PCollection %q is produced by both %q and %q", pc, t.name(other), tr.GetUniqueName())
			}
			t.producer[pc] = id
		}
	}
	for _, id := range t.leaves {
		tr := t.comps.GetTransforms()[id]
		seen := map[string]bool{}
		for _, l := range sortedKeys(tr.GetInputs()) {
			pc := tr.GetInputs()[l]
			if err := t.checkPCollection(pc); err != nil {
				return fmt.Errorf("transform %q input %q: %w", tr.GetUniqueName(), l, err)
			}
			if _, ok := t.producer[pc]; !ok {
				return fmt.Errorf("transform %q: input PCollection %q has no producer", tr.GetUniqueName(), pc)
			}
			if !seen[pc] {
				seen[pc] = true
				t.consumers[pc] = append(t.consumers[pc], id)
			}
		}
	}
	// Depth-first topological sort in walk order.
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var order []string
	var visit func(id string) error
	visit = func(id string) error {
		switch state[id] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("transform %q: the pipeline has a cycle", t.name(id))
		}
		state[id] = visiting
		tr := t.comps.GetTransforms()[id]
		for _, l := range sortedKeys(tr.GetInputs()) {
			if err := visit(t.producer[tr.GetInputs()[l]]); err != nil {
				return err
			}
		}
		state[id] = done
		order = append(order, id)
		return nil
	}
	for _, id := range t.leaves {
		if err := visit(id); err != nil {
			return err
		}
	}
	t.leaves = order
	return nil
}

// checkPCollection checks that a PCollection and what it refers to exist.
func (t *translator) checkPCollection(id string) error {
	pc := t.comps.GetPcollections()[id]
	if pc == nil {
		return fmt.Errorf("PCollection %q is not defined", id)
	}
	if t.comps.GetCoders()[pc.GetCoderId()] == nil {
		return fmt.Errorf("PCollection %q: coder %q is not defined", id, pc.GetCoderId())
	}
	if t.comps.GetWindowingStrategies()[pc.GetWindowingStrategyId()] == nil {
		return fmt.Errorf("PCollection %q: windowing strategy %q is not defined", id, pc.GetWindowingStrategyId())
	}
	return nil
}

// wasmModule returns the WASM module a leaf transform is mapped to, looking
// at its own unique name and then at those of its enclosing composites.
func (t *translator) wasmModule(id string) (string, bool) {
	if len(t.opts.StageWASM) == 0 {
		return "", false
	}
	globs := sortedKeys(t.opts.StageWASM)
	for cur := id; cur != ""; cur = t.parent[cur] {
		name := t.name(cur)
		if m, ok := t.opts.StageWASM[name]; ok {
			return m, true
		}
		for _, g := range globs {
			if ok, _ := path.Match(g, name); ok {
				return t.opts.StageWASM[g], true
			}
		}
	}
	return "", false
}
