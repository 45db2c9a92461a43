package translate

import (
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"
	"google.golang.org/protobuf/proto"
)

func gbkRoots(plan *Plan) []Root {
	var out []Root
	for _, st := range plan.SubTopologies {
		if st.Root.Kind == RootGroupByKey {
			out = append(out, st.Root)
		}
	}
	return out
}

func TestWindowedGBKRoots(t *testing.T) {
	cases := []struct {
		name     string
		opts     []beam.WindowIntoOption
		fn       *window.Fn
		combine  bool
		windowed bool
		lifted   bool
	}{
		{name: "fixed default", fn: window.NewFixedWindows(time.Minute), windowed: false},
		{name: "fixed default combine", fn: window.NewFixedWindows(time.Minute), combine: true, lifted: true},
		{name: "sessions", fn: window.NewSessions(time.Minute), windowed: true},
		{name: "sessions combine", fn: window.NewSessions(time.Minute), combine: true, windowed: true},
		{name: "trigger", fn: window.NewGlobalWindows(), opts: []beam.WindowIntoOption{beam.Trigger(trigger.Repeat(trigger.AfterCount(2))), beam.PanesDiscard()}, windowed: true},
		{name: "count trigger combine not lifted", fn: window.NewGlobalWindows(), combine: true, opts: []beam.WindowIntoOption{beam.Trigger(trigger.Repeat(trigger.AfterCount(2))), beam.PanesDiscard()}, windowed: true},
		{name: "lateness", fn: window.NewFixedWindows(time.Minute), opts: []beam.WindowIntoOption{beam.AllowedLateness(time.Minute)}, windowed: true},
		{name: "processing time combine lifted", fn: window.NewFixedWindows(time.Minute), combine: true, lifted: true, windowed: true,
			opts: []beam.WindowIntoOption{beam.Trigger(trigger.AfterEndOfWindow().EarlyFiring(trigger.AfterProcessingTime().PlusDelay(time.Second))), beam.PanesAccumulate()}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, s := beam.NewPipelineWithRoot()
			kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
			w := beam.WindowInto(s, c.fn, kvs, c.opts...)
			if c.combine {
				beam.ParDo(s, formatCount, beam.CombinePerKey(s, sumInts, w))
			} else {
				beam.ParDo(s, joinFn2, beam.GroupByKey(s, w))
			}
			plan := mustTranslate(t, marshal(t, p), Options{})
			roots := gbkRoots(plan)
			if len(roots) != 1 {
				t.Fatalf("%d GroupByKey roots", len(roots))
			}
			if roots[0].Windowed != c.windowed {
				t.Errorf("Windowed = %v, want %v", roots[0].Windowed, c.windowed)
			}
			lifted := false
			for _, tr := range plan.Pipeline.GetComponents().GetTransforms() {
				lifted = lifted || tr.GetSpec().GetUrn() == urnCombinePrecombine
			}
			if lifted != c.lifted {
				t.Errorf("lifted = %v, want %v", lifted, c.lifted)
			}
		})
	}
}

func TestTestStream(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	cfg := teststream.NewConfig()
	cfg.AddElements(1000, "a", "b")
	cfg.AdvanceProcessingTime(5000)
	cfg.AdvanceWatermark(60000)
	cfg.AddElements(2000, "c")
	ts := teststream.Create(s, cfg)
	kvs := beam.ParDo(s, pairWithOne, ts)
	w := beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs)
	beam.ParDo(s, formatCount, beam.CombinePerKey(s, sumInts, w))
	plan := mustTranslate(t, marshal(t, p), Options{})
	if !plan.TestStream || !plan.Bounded {
		t.Errorf("TestStream %v Bounded %v, want both", plan.TestStream, plan.Bounded)
	}
	root := plan.SubTopologies[0].Root
	if root.Kind != RootTestStream || plan.Topics[0].Kind != TopicImpulse || plan.Topics[0].Name != "teststream-0" {
		t.Fatalf("root %+v topic %+v", root, plan.Topics[0])
	}
	if n := len(root.TestStream.GetEvents()); n != 4 {
		t.Errorf("%d events, want 4", n)
	}
	roots := gbkRoots(plan)
	if len(roots) == 0 {
		t.Fatalf("no GroupByKey root for the CombinePerKey: %s", describe(plan))
	}
	for _, r := range roots {
		if !r.Windowed {
			t.Errorf("GroupByKey root %s not windowed in a TestStream pipeline", r.TransformID)
		}
	}

	// A second TestStream is refused.
	p2, s2 := beam.NewPipelineWithRoot()
	a := teststream.Create(s2, cfg)
	b := teststream.Create(s2, cfg)
	beam.Flatten(s2, a, b)
	if _, err := Translate(marshal(t, p2), Options{}); err == nil {
		t.Errorf("two TestStreams accepted")
	} else {
		errContains(t, err, "second TestStream")
	}
}

// A TestStream with two outputs (the Python SDK's tagged TestStream): both
// outputs are roots' outputs of its sub-topology, and an event naming
// another tag is refused.
func TestTestStreamTwoOutputs(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	cfg := teststream.NewConfig()
	cfg.AddElements(1000, "a", "b")
	beam.ParDo(s, pairWithOne, teststream.Create(s, cfg))
	pp := marshal(t, p)
	comps := pp.GetComponents()
	var tsID string
	for id, tr := range comps.GetTransforms() {
		if tr.GetSpec().GetUrn() == urnTestStream {
			tsID = id
		}
	}
	tr := comps.GetTransforms()[tsID]
	main := tr.GetOutputs()[sortedKeys(tr.GetOutputs())[0]]
	side := proto.Clone(comps.GetPcollections()[main]).(*pipepb.PCollection)
	side.UniqueName = "side"
	comps.Pcollections["side"] = side
	tr.Outputs["zside"] = "side"
	payload := &pipepb.TestStreamPayload{}
	if err := proto.Unmarshal(tr.GetSpec().GetPayload(), payload); err != nil {
		t.Fatal(err)
	}
	for _, ev := range payload.GetEvents() {
		if e := ev.GetElementEvent(); e != nil {
			e.Tag = sortedKeys(tr.GetOutputs())[0]
		}
	}
	payload.Events = append(payload.Events,
		&pipepb.TestStreamPayload_Event{Event: &pipepb.TestStreamPayload_Event_ElementEvent{ElementEvent: &pipepb.TestStreamPayload_Event_AddElements{Tag: "zside", Elements: payload.GetEvents()[0].GetElementEvent().GetElements()}}},
		&pipepb.TestStreamPayload_Event{Event: &pipepb.TestStreamPayload_Event_WatermarkEvent{WatermarkEvent: &pipepb.TestStreamPayload_Event_AdvanceWatermark{Tag: "zside", NewWatermark: 5000}}})
	setPayload := func() {
		b, err := proto.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		tr.Spec.Payload = b
	}
	setPayload()
	plan := mustTranslate(t, pp, Options{})
	root := plan.SubTopologies[0].Root
	if root.Kind != RootTestStream || len(root.TestStreamOutputs) != 2 || root.TestStreamOutputs["zside"] != "side" || root.Output != main {
		t.Fatalf("root %+v", root)
	}
	if plan.WireCoders["side"] == "" {
		t.Error("the second output has no wire coder")
	}

	payload.Events[0].GetElementEvent().Tag = "nope"
	setPayload()
	if _, err := Translate(pp, Options{}); err == nil {
		t.Error("an event with an unknown tag was accepted")
	} else {
		errContains(t, err, `tag "nope"`)
	}
}

var _ = pipepb.AccumulationMode_RETRACTING
