package translate

import (
	"fmt"
	"slices"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Plan is a pipeline laid out for the host.
//
// Invariants (the host relies on them):
//   - Every SubTopology reads exactly one Topic, and every Topic but the
//     TopicSideInput ones is read by
//     exactly one SubTopology. A Sink with KafkaWrite names no Plan topic.
//   - Every PCollection that crosses the host boundary (a stage input or output,
//     a topic's contents, a root's output) has a wire coder in WireCoders whose
//     element coder the host can parse: only standard coders (bytes,
//     string_utf8, varint, double, bool, kv, iterable, length_prefix,
//     global/interval window, windowed_value) appear in it, anything else is
//     wrapped in a length_prefix.
//   - SubTopologies are listed so that a topic's producers come before its
//     consumer where the graph allows (it always does: pipelines are DAGs).
type Plan struct {
	// Pipeline is the pipeline after runner-side rewrites (lifted combines,
	// added coders). Its Components hold every coder, windowing strategy and
	// environment that the Plan refers to by id.
	Pipeline *pipepb.Pipeline

	Topics        []*Topic
	SubTopologies []*SubTopology

	// WireCoders maps a PCollection id to the id (in Pipeline.Components.Coders)
	// of the windowed_value coder its elements use wherever the host sees them.
	WireCoders map[string]string

	// Bounded is true when every PCollection of the pipeline is bounded, or
	// unbounded only because a TestStream produces it (a TestStream ends: its
	// watermark reaches +inf after its last event).
	Bounded bool

	// TestStream is true when a RootTestStream drives the pipeline: the host
	// then runs on the TestStream's synthetic processing-time clock instead of
	// the wall clock, and every GroupByKey root is Windowed.
	TestStream bool

	// Layout is the version of ksrunner's layout rules the plan depends on:
	// LayoutFirst when every earlier ksrunner laid it out the same (its
	// sub-topologies, topics and changelogs), a later one when a rule
	// changed since touches it. An application's state and in-flight
	// records are only valid under the layout that made them, so the
	// version is part of the application's fingerprint (see
	// host/internal/application).
	Layout int
}

const (
	// LayoutFirst is the layout of every ksrunner before 2026-12-06.
	LayoutFirst = 1
	// LayoutGroupReaders: a ParDo with side inputs or user state that is
	// the only reader of a fast-path GroupByKey's groups stays in the
	// GroupByKey's sub-topology, where it had a "-main" topic and a
	// sub-topology of its own (staysWithGroups), renumbering the
	// sub-topologies after it.
	LayoutGroupReaders = 2
	// LayoutStatefulReaders: a stateful ParDo without side inputs also
	// stays with a GroupByKey whose groups other transforms read too, or
	// whose windowing has triggers or allowed lateness.
	LayoutStatefulReaders = 3
	// LayoutGatedPanes: a ParDo with side inputs that is the only reader of
	// a windowed GroupByKey's panes (triggers, allowed lateness, merging
	// windows) stays in the GroupByKey's sub-topology too, its input parked
	// there until its side inputs are ready.
	LayoutGatedPanes = 4
)

// LayoutChange says what layout version l changed, for messages.
func LayoutChange(l int) string {
	switch l {
	case LayoutFirst:
		return "the first layout"
	case LayoutGroupReaders:
		return "a ParDo with side inputs or user state that is the only reader of a GroupByKey's groups stays in the GroupByKey's sub-topology, renumbering the sub-topologies after it"
	case LayoutStatefulReaders:
		return "a stateful ParDo without side inputs stays in its GroupByKey's sub-topology also when other transforms read the groups or the GroupByKey has triggers or allowed lateness, renumbering the sub-topologies after it"
	case LayoutGatedPanes:
		return "a ParDo with side inputs that is the only reader of a GroupByKey with triggers, allowed lateness or merging windows stays in the GroupByKey's sub-topology, renumbering the sub-topologies after it"
	}
	return fmt.Sprintf("layout %d, unknown to this ksrunner", l)
}

// TopicKind tells how records reach a topic and how many partitions it has.
type TopicKind int

const (
	// TopicImpulse holds the single impulse record of one Impulse (or
	// TestStream) transform. It has one partition.
	TopicImpulse TopicKind = iota + 1
	// TopicRepartition holds the input of a GroupByKey (or lifted combine):
	// records keyed by the encoded key, internal_parallelism partitions.
	TopicRepartition
	// TopicRedistribute holds the input of a Reshuffle/Redistribute or a
	// Flatten whose inputs come from different sub-topologies: records spread
	// over internal_parallelism partitions (keyed when the element is a KV,
	// else round-robin by producer).
	TopicRedistribute
	// TopicSideInput holds a PCollection read as a side input. It has one
	// partition and no consuming sub-topology: every instance reads all of
	// it into its state store (see SideInput).
	TopicSideInput
	// TopicKafka is a user's topic read by a Kafka read (URNKafkaRead). Its
	// Name is the user's topic name, which is also its full Kafka name (no
	// prefix); ksrunner never creates nor deletes it, and the host discovers
	// its partition count at Run (a missing topic fails the job there). Its
	// records are the user's, without ksrunner's envelope. It has no
	// producers in the plan.
	TopicKafka
)

// Topic is a topic a sub-topology reads, or a side input topic. An internal
// topic's full Kafka name is "__beam_<application_id>_<Name>" (see
// shuffle); a TopicKafka's is Name.
type Topic struct {
	Name string // e.g. "impulse-0", "<transform>-repartition"
	Kind TopicKind
	// PCollection whose elements the records carry (the GroupByKey's input,
	// the Flatten's output, the Impulse's output).
	PCollection string
	// Producers are the PCollections whose elements are written to this
	// topic, each by the sub-topology that produces it. For a GroupByKey it is
	// the single input; for a Flatten materialized here, all of its inputs
	// that are produced in other sub-topologies. Empty for TopicImpulse.
	Producers []string
	// SpreadBySize marks a splittable DoFn's SpreadRestrictions topic: its
	// elements are KV<KV<element, restriction>, size> with the size a
	// Beam double, and each producing task sends each to the partition its
	// restrictions so far weigh least in, so that the process tasks get
	// equal work. Hashing the keys (the element and restriction) gave 16
	// even splits 8, 1, 2 and 5 per partition of 4.
	SpreadBySize bool
	// ReadyAtFirstFiring marks the side input topic of an unbounded
	// PCollection in the global window whose trigger may fire more than
	// once, Beam's slowly updating side input: its window never closes
	// while the source runs, so the side input is ready for every main
	// input once its first firing is in the store (as Dataflow has it), and
	// later firings add to it. Other side inputs are ready once their
	// watermark passes the window.
	ReadyAtFirstFiring bool
}

// RootKind says what a sub-topology does with the records of its input topic.
type RootKind int

const (
	// RootImpulse emits one empty-bytes element in the global window at the
	// minimum timestamp to Output, once.
	RootImpulse RootKind = iota + 1
	// RootGroupByKey groups the KV elements of the topic by encoded key and
	// window, and emits KV<K, Iterable<V>> to Output when the window closes.
	RootGroupByKey
	// RootPassthrough emits every element of the topic unchanged to Output.
	RootPassthrough
	// RootTestStream executes Root.TestStream's events in order once its
	// topic's single record arrives (like RootImpulse): element batches are
	// emitted to Output with their timestamps in the global window, watermark
	// advances become the task's output watermark, processing-time advances
	// move the job's synthetic processing-time clock; after the last event
	// the watermark goes to +inf.
	RootTestStream
	// RootKafkaSource reads the records of a user's topic (Root.KafkaRead,
	// the sub-topology's TopicKafka input): each record becomes an element
	// KV<key, value> of Output in the global window, with the no-firing
	// pane, timestamped per the read's timestamp policy, its key and value
	// deserialized per the read's formats and encoded in Output's wire
	// coder (translate checks the coders match the formats). Its output
	// watermark follows the record timestamps (see the host).
	RootKafkaSource
)

// SubTopology is the unit of parallelism: one task per partition of Input.
type SubTopology struct {
	ID    int
	Input string // Topic.Name
	Root  Root
	// Stages run user code, in topological order. A stage's input is
	// Root.Output, an output of an earlier stage, or the Output of one of
	// Flattens.
	Stages []*Stage
	// Flattens are runner-side flattens executed in memory inside this
	// sub-topology: every element of any of Inputs is forwarded to Output.
	// Inputs are Root.Output, stage outputs or other Flattens' outputs, and
	// all use the same wire encoding as Output. Translate only emits one when
	// a flatten cannot run inside a stage (its inputs come from stages with
	// different executors or environments); usually the SDK flattens inside
	// a stage.
	Flattens []*Flatten
	// Sinks name the PCollections produced here that are written to topics.
	Sinks []Sink
}

// Root is the first processor of a sub-topology.
type Root struct {
	Kind        RootKind
	TransformID string // the Impulse, GroupByKey (or lifted CombinePerKey), Reshuffle or Flatten
	// Output is the PCollection the root emits.
	Output string
	// ErrorOutput (RootKafkaSource with KafkaRead.ErrorOutput only) is the
	// PCollection of the read's error rows (KafkaErrorSchema), which the
	// root emits besides Output, in the same windowing.
	ErrorOutput string
	// WindowingStrategy is the id of the windowing strategy of the topic's
	// PCollection (grouping and firing follow it).
	WindowingStrategy string
	// Windowed (RootGroupByKey only) says the GroupByKey needs the full
	// windowing driver (translate/windowing.Strategy built from WindowingStrategy):
	// a non-default trigger, merging windows, a timestamp combiner other
	// than END_OF_WINDOW, allowed lateness, or a TestStream-driven pipeline.
	// When false the strategy is the default trigger over non-merging windows
	// with END_OF_WINDOW timestamps and zero allowed lateness: one ON_TIME
	// pane per key and window.
	Windowed bool
	// PagedGroups (RootGroupByKey, fast path or Windowed) says every consumer of
	// Output is a stage or Sink with PagedGroups: the host may send a large group or pane
	// as a state-backed iterable, its first values inline and the rest
	// served in pages through the Fn API state API (StateKey.Runner), so no
	// group is ever whole in memory.
	PagedGroups bool
	// SideInputTopics (RootGroupByKey fast path only) are the side input
	// topics of the ParDo that reads Output in this sub-topology rather
	// than heading one of its own (Output's only reader): the root fires a
	// key and window only once every one of them is complete for the
	// window (its watermark past the window's end), holding the group in
	// the store until then, so that ParDo's stage never parks its input
	// and may read it in pages.
	SideInputTopics []string
	// TestStream (RootTestStream only) is the TestStream's payload. Its
	// elements are encoded with CoderId, which encodes like the element coder
	// of Output's wire coder (translate checks it), or, when
	// TestStreamLengthPrefix, like its length-prefixed component: the host
	// then prefixes each element with its length (varint).
	TestStream             *pipepb.TestStreamPayload
	TestStreamLengthPrefix bool
	// TestStreamOuterContext says the events' elements are in the coder's
	// outer context, as the Java and Python SDKs encode them (a string or
	// bytes value without its length); the Go SDK encodes them nested. The
	// host nests them (a length before bytes and strings, also as a KV's
	// value) unless TestStreamLengthPrefix already wraps them whole.
	TestStreamOuterContext bool
	// TestStreamOutputs (a TestStream with several outputs only) maps each
	// output tag to its PCollection, Output among them; all use the same
	// wire coder. Each tag has a watermark of its own; the sub-topology's
	// output watermark is the least of them.
	TestStreamOutputs map[string]string
	// MergeWindows (RootGroupByKey over a custom merging WindowFn only) is
	// the harness stage that merges windows in the SDK that defined the
	// WindowFn (see merge.go for its input and output). It is not part of
	// Stages: the root runs it on the side, with one element per key.
	MergeWindows *Stage
	// KafkaRead (RootKafkaSource only) is the read's spec. Translate has
	// checked it reads one topic, without metadata, unbounded, from the
	// committed offsets or auto.offset.reset.
	KafkaRead *KafkaRead
}

// Flatten forwards Inputs to Output inside one sub-topology.
type Flatten struct {
	TransformID string
	Inputs      []string
	Output      string
}

// Sink writes the elements of PCollection to Topic.
type Sink struct {
	PCollection string
	Topic       string // Topic.Name; the user's topic when KafkaWrite is set
	// KafkaWrite (a URNKafkaWrite only) makes the sink a Kafka write: the
	// KV elements are serialized per its formats and produced to the user's
	// topic KafkaWrite.Topic (not a Plan topic: the host discovers its
	// partitions at Run), and no watermark or other ksrunner record goes
	// there. TransformID is the write transform.
	KafkaWrite  *KafkaWrite
	TransformID string
	// ErrorOutput (a Kafka write with KafkaWrite.ErrorOutput only) is the
	// PCollection of the write's error rows (KafkaWriteErrorSchema of its
	// input's), which the sink emits in its sub-topology, in the input
	// element's windows.
	ErrorOutput string
	// PagedGroups (a GroupByKey root's Output written to a "-main" topic
	// whose sub-topology's only reader has Stage.PagedGroups) says a group
	// the root pages crosses the topic in pieces (shuffle.KindGroupPiece,
	// then shuffle.KindGroupEnd), each of whole values, rather than whole in
	// one record; smaller groups cross whole, as any element does.
	PagedGroups bool
}

// ExecutorKind names the executor of a stage.
type ExecutorKind int

const (
	ExecutorHarness ExecutorKind = iota + 1 // Fn API SDK harness
	ExecutorWASM                            // wazero, in process
)

// Stage is a fused set of transforms run by one executor, one bundle at a time
// per task.
type Stage struct {
	ID         string
	Executor   ExecutorKind
	Transforms []string // ids of the pipeline transforms fused into this stage
	// PagedGroups says the stage's input is a GroupByKey's groups that its
	// descriptor declares as KV<K, state_backed_iterable<V>>: the SDK reads
	// a group's values past the inline ones through the state API. Set for
	// harness stages that read the root's output where the GroupByKey runs,
	// neither time sorting their input nor splitting it (splittable DoFns),
	// whose elements would outlive the commit cycle that serves their pages
	// (a stage parking its input for side inputs copies a parked group's
	// pages, host/internal/task/gatepages.go); and for the one reader of a
	// topic whose Sink has PagedGroups, a harness stage parking its input
	// for side inputs, which stores the pieces it gets.
	PagedGroups bool
	// Input is the PCollection the stage consumes (its parallel input).
	Input string
	// Outputs are the PCollections that leave the stage (consumed by another
	// stage, a flatten or a sink), sorted.
	Outputs []string

	// Harness stages only.
	EnvironmentID string
	// Descriptor is ready to register, except that the ApiServiceDescriptor of
	// the data ports (and the state API) is left empty for the harness to fill.
	// Translate also fills it (and InputTransform, OutputTransforms) for WASM
	// stages, as a description of the stage's wiring.
	Descriptor *fnpb.ProcessBundleDescriptor
	// SideInputs are read by transforms of the stage. The host holds back
	// the stage's input until every side input is complete for the
	// windows of that input, and serves them over the Fn API state service.
	SideInputs []SideInput
	// Stateful is true when a transform of the stage has user state or
	// timers: its input is partitioned by key (the sub-topology reads a
	// keyed topic) and the host serves user state per key and window.
	Stateful bool
	// TimerFamilies are the timer families of the stage's stateful
	// transforms: the host stores the timers the SDK sets and delivers them
	// back when they fire.
	TimerFamilies []TimerFamily
	// TimeSortedInput is set when the stage's stateful transform requires
	// time-sorted input: the host holds each element until the input
	// watermark, less TimeSortedLateness (the input's allowed lateness,
	// milliseconds), passes its timestamp, and hands the stage the held
	// elements in timestamp order; an element that arrives behind that
	// point is dropped (counted in dropped_late_elements).
	TimeSortedInput    bool
	TimeSortedLateness int64
	// StateExpiry maps each stateful transform of the stage whose input is
	// not in the global window to the allowed lateness (milliseconds) of
	// that input's windowing: a window's user state of the transform
	// expires, and the host deletes it, once the stage's input watermark
	// has passed the window's maximum timestamp plus that lateness, as
	// Beam's model has it. Global-window state lives as long as the job.
	StateExpiry map[string]int64
	// OrderedLists are the ordered list states of the stage's transforms,
	// whose values the host sorts by timestamp.
	OrderedLists []OrderedListState

	// InputTransform is the id of the data source transform in Descriptor.
	InputTransform string
	// Checkpointable says the data source feeds a splittable DoFn's
	// ProcessSizedElementsAndRestrictions: the host may checkpoint a
	// running bundle of the stage (a ProcessBundleSplit at fraction 0)
	// and process the rest of its restriction in a later bundle.
	Checkpointable bool
	// OutputTransforms maps the id of each data sink transform in Descriptor to
	// the PCollection it carries.
	OutputTransforms map[string]string

	// WASM stages only: WASMModules maps the id of every transform of the
	// stage to the module reference Options.StageWASM gave it.
	WASMModules map[string]string
}

// SideInput is one side input of a stage's transform.
type SideInput struct {
	TransformID string // the ParDo reading it
	LocalName   string // its local name in the ParDo's inputs (the state API's side_input_id)
	PCollection string
	Topic       string // Topic.Name of the TopicSideInput holding it
	// Multimap is true for beam:side_input:multimap:v1 (values served per
	// key), false for beam:side_input:iterable:v1.
	Multimap bool
}

// TimerFamily is one timer family of a stateful ParDo.
type TimerFamily struct {
	TransformID, FamilyID string
	EventTime             bool // else processing time
	// CoderID is the timer coder (beam:coder:timer:v1) the SDK encodes the
	// family's timers in, with its key coder made host-parseable (the
	// descriptor's ParDo payload is rewritten to it).
	CoderID string
}

// OrderedListState is one ordered list state of a stateful ParDo. Its values
// are encoded as a varint timestamp followed by the element in
// ElementCoderID, which the host can parse (translate rewrites the
// descriptor's state spec to a length-prefixed coder where needed).
type OrderedListState struct {
	TransformID, StateID string
	ElementCoderID       string
}

// ExecutorStages returns every stage of st the host starts an executor for:
// Root.MergeWindows, if set, then Stages.
func (st *SubTopology) ExecutorStages() []*Stage {
	if st.Root.MergeWindows == nil {
		return st.Stages
	}
	return append([]*Stage{st.Root.MergeWindows}, st.Stages...)
}

// WaitsForSides reports whether the root fires only what every side input
// of stage s is complete for (SideInputTopics), so that s, reading the
// root's output, never parks it: true for a stage without side inputs.
func (r *Root) WaitsForSides(s *Stage) bool {
	if len(s.SideInputs) == 0 {
		return true
	}
	if s.Input != r.Output {
		return false
	}
	for _, si := range s.SideInputs {
		if !slices.Contains(r.SideInputTopics, si.Topic) {
			return false
		}
	}
	return true
}
