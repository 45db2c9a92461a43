package translate

import (
	"errors"
	"fmt"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate/windowing"
)

// This file holds the event-time parts of translation: which windowing
// strategies a GroupByKey can run (translate/windowing decides), whether a
// GroupByKey needs the full windowing driver, and TestStream.

// urnGoCustomCoder is the Go SDK's coder for types without a standard coder.
const urnGoCustomCoder = "beam:go:coder:custom:v1"

// addTestStream validates a TestStream leaf. One TestStream per pipeline (it
// is the single source of the synthetic processing-time clock, as in Prism),
// events inline (no remote endpoint), every event's tag one of its outputs.
func (t *translator) addTestStream(id string, tr *pipepb.PTransform) error {
	name := tr.GetUniqueName()
	if len(tr.GetInputs()) != 0 {
		return fmt.Errorf("transform %q: a TestStream has no inputs, has %d", name, len(tr.GetInputs()))
	}
	if len(tr.GetOutputs()) == 0 {
		return fmt.Errorf("transform %q: a TestStream needs an output", name)
	}
	if t.testStream != "" {
		return fmt.Errorf("transform %q: a second TestStream (the first is %q) is not supported: one TestStream drives the pipeline's processing-time clock", name, t.name(t.testStream))
	}
	ts, err := decodeTestStream(tr)
	if err != nil {
		return err
	}
	if ts.GetEndpoint().GetUrl() != "" {
		return fmt.Errorf("transform %q: a TestStream reading events from endpoint %s is not supported yet", name, ts.GetEndpoint().GetUrl())
	}
	if t.comps.GetCoders()[ts.GetCoderId()] == nil {
		return fmt.Errorf("transform %q: TestStream coder %q is not defined", name, ts.GetCoderId())
	}
	for i, ev := range ts.GetEvents() {
		switch e := ev.GetEvent().(type) {
		case *pipepb.TestStreamPayload_Event_ElementEvent:
			if _, err := testStreamTag(tr, e.ElementEvent.GetTag()); err != nil {
				return fmt.Errorf("transform %q: event %d: %w", name, i, err)
			}
		case *pipepb.TestStreamPayload_Event_WatermarkEvent:
			if _, err := testStreamTag(tr, e.WatermarkEvent.GetTag()); err != nil {
				return fmt.Errorf("transform %q: event %d: %w", name, i, err)
			}
		case *pipepb.TestStreamPayload_Event_ProcessingTimeEvent:
		default:
			return fmt.Errorf("transform %q: event %d is of unknown kind %T", name, i, e)
		}
	}
	t.testStream = id
	t.addLeaf(id, kindTestStream)
	return nil
}

// testStreamTag resolves an event's tag to the local name of a TestStream
// output: the tag itself, or for the empty tag the only output.
func testStreamTag(tr *pipepb.PTransform, tag string) (string, error) {
	if _, ok := tr.GetOutputs()[tag]; ok {
		return tag, nil
	}
	if tag == "" && len(tr.GetOutputs()) == 1 {
		return sortedKeys(tr.GetOutputs())[0], nil
	}
	return "", fmt.Errorf("tag %q is not one of the TestStream's outputs %v", tag, sortedKeys(tr.GetOutputs()))
}

func decodeTestStream(tr *pipepb.PTransform) (*pipepb.TestStreamPayload, error) {
	ts := &pipepb.TestStreamPayload{}
	if err := proto.Unmarshal(tr.GetSpec().GetPayload(), ts); err != nil {
		return nil, fmt.Errorf("transform %q: decoding TestStreamPayload: %w", tr.GetUniqueName(), err)
	}
	return ts, nil
}

// testStreamRoot builds the root of a TestStream's sub-topology and checks
// that its elements can be forwarded as the output's wire elements.
func (t *translator) testStreamRoot(id string) (Root, error) {
	tr := t.comps.GetTransforms()[id]
	ts, err := decodeTestStream(tr)
	if err != nil {
		return Root{}, err
	}
	tags := sortedKeys(tr.GetOutputs())
	out := tr.GetOutputs()[tags[0]]
	w, err := t.wire(out)
	if err != nil {
		return Root{}, fmt.Errorf("transform %q: %w", tr.GetUniqueName(), err)
	}
	root := Root{Kind: RootTestStream, TransformID: id, Output: out, WindowingStrategy: t.inWS(out), TestStream: ts, TestStreamOuterContext: !t.goSDK(tr)}
	if len(tags) > 1 {
		root.TestStreamOutputs = map[string]string{}
		for _, tag := range tags {
			pc := tr.GetOutputs()[tag]
			// Every output gets the events' bytes handled alike (see
			// transcodeTestStream, which gives them all the events' coder).
			if err := t.sameWire(tr.GetUniqueName(), out, pc); err != nil {
				return Root{}, err
			}
			root.TestStreamOutputs[tag] = pc
		}
	}
	elem := t.comps.GetCoders()[w].GetComponentCoderIds()[0]
	if !t.coderEqual(elem, ts.GetCoderId()) {
		// The wire coder wraps the whole element in a length prefix (a coder
		// the host cannot parse): the host adds the prefix.
		ec := t.comps.GetCoders()[elem]
		if ec.GetSpec().GetUrn() != urnCoderLengthPrefix || len(ec.GetComponentCoderIds()) != 1 || !t.coderEqual(ec.GetComponentCoderIds()[0], ts.GetCoderId()) {
			return Root{}, fmt.Errorf("transform %q: TestStream elements use coder %q, which encodes differently from the output's wire coder %q; re-encoding TestStream elements is not supported yet", tr.GetUniqueName(), ts.GetCoderId(), elem)
		}
		// The Go SDK's custom coders write their own length prefix (exec's
		// customEncoder), so their encoding already is the length-prefixed
		// one.
		root.TestStreamLengthPrefix = t.comps.GetCoders()[ts.GetCoderId()].GetSpec().GetUrn() != urnGoCustomCoder
	}
	return root, nil
}

// goSDK reports whether tr comes from the Go SDK: its environment (or, for
// a transform without one, the pipeline's environments) declares the Go
// SDK's base version capability.
func (t *translator) goSDK(tr *pipepb.PTransform) bool {
	isGo := func(env *pipepb.Environment) bool {
		for _, c := range env.GetCapabilities() {
			if strings.HasPrefix(c, "beam:version:sdk_base:go") {
				return true
			}
		}
		return false
	}
	if env := tr.GetEnvironmentId(); env != "" {
		return isGo(t.comps.GetEnvironments()[env])
	}
	envs := t.comps.GetEnvironments()
	for _, id := range sortedKeys(envs) {
		if !isGo(envs[id]) {
			return false
		}
	}
	return len(envs) > 0
}

// checkStrategy checks that the host's windowing driver can run the
// windowing strategy of a GroupByKey's input and reports whether it needs
// the driver (else the default fast path runs it).
func (t *translator) checkStrategy(name, in string) (windowed bool, err error) {
	ws := t.comps.GetWindowingStrategies()[t.inWS(in)]
	if _, err := windowing.NewStrategy(ws, t.comps); err != nil {
		switch {
		case errors.Is(err, windowing.ErrUnsupportedWindowFn):
			return false, fmt.Errorf("transform %q: GroupByKey over a custom WindowFn (%s) is not supported yet: %w", name, ws.GetWindowFn().GetUrn(), err)
		case errors.Is(err, windowing.ErrUnsupportedTrigger):
			return false, fmt.Errorf("transform %q: GroupByKey trigger is not supported: %w", name, err)
		case errors.Is(err, windowing.ErrUnsupportedWindowCoder):
			return false, fmt.Errorf("transform %q: GroupByKey window coder is not supported yet: %w", name, err)
		case ws.GetAccumulationMode() == pipepb.AccumulationMode_RETRACTING:
			return false, fmt.Errorf("transform %q: GroupByKey with RETRACTING accumulation mode is not supported (Beam has no runner semantics for retractions yet): %w", name, err)
		default:
			return false, fmt.Errorf("transform %q: GroupByKey windowing strategy is not supported: %w", name, err)
		}
	}
	return t.testStream != "" || !isDefaultStrategy(ws), nil
}

// isDefaultStrategy reports whether the host's fast GroupByKey path runs ws:
// the default trigger, non-merging windows, END_OF_WINDOW output times and
// no allowed lateness (one ON_TIME pane per key and window, nothing late).
func isDefaultStrategy(ws *pipepb.WindowingStrategy) bool {
	switch ws.GetTrigger().GetTrigger().(type) {
	case nil, *pipepb.Trigger_Default_:
	default:
		return false
	}
	if ws.GetMergeStatus() != pipepb.MergeStatus_NON_MERGING {
		return false
	}
	switch ws.GetOutputTime() {
	case pipepb.OutputTime_UNSPECIFIED, pipepb.OutputTime_END_OF_WINDOW:
	default:
		return false
	}
	return ws.GetAllowedLateness() <= 0
}

// severalPanes reports whether a PCollection of windowing strategy ws may
// hold several panes of a window: a trigger that may fire more than once
// (anything but the default or a bare AfterEndOfWindow), or allowed
// lateness (late panes).
func severalPanes(ws *pipepb.WindowingStrategy) bool {
	if ws.GetAllowedLateness() > 0 {
		return true
	}
	switch tr := ws.GetTrigger().GetTrigger().(type) {
	case nil, *pipepb.Trigger_Default_:
		return false
	case *pipepb.Trigger_AfterEndOfWindow_:
		return tr.AfterEndOfWindow.GetEarlyFirings() != nil || tr.AfterEndOfWindow.GetLateFirings() != nil
	}
	return true
}

// liftableStrategy reports whether a CombinePerKey over ws may be lifted
// (precombined before the shuffle): the precombined accumulators must not
// change what the trigger counts (AfterCount, Always: as Prism) nor the pane
// timestamps (the SDK's precombine stamps accumulators with an element's
// timestamp, which only END_OF_WINDOW ignores).
func liftableStrategy(ws *pipepb.WindowingStrategy) bool {
	if ws == nil || ws.GetMergeStatus() != pipepb.MergeStatus_NON_MERGING {
		return false
	}
	switch ws.GetOutputTime() {
	case pipepb.OutputTime_UNSPECIFIED, pipepb.OutputTime_END_OF_WINDOW:
	default:
		return false
	}
	return !countsElements(ws.GetTrigger())
}

// countsElements reports whether a trigger contains AfterCount or Always.
func countsElements(tr *pipepb.Trigger) bool {
	if tr == nil {
		return false
	}
	switch x := tr.GetTrigger().(type) {
	case *pipepb.Trigger_ElementCount_, *pipepb.Trigger_Always_:
		return true
	case *pipepb.Trigger_AfterAll_:
		return anyCounts(x.AfterAll.GetSubtriggers())
	case *pipepb.Trigger_AfterAny_:
		return anyCounts(x.AfterAny.GetSubtriggers())
	case *pipepb.Trigger_AfterEach_:
		return anyCounts(x.AfterEach.GetSubtriggers())
	case *pipepb.Trigger_AfterEndOfWindow_:
		return countsElements(x.AfterEndOfWindow.GetEarlyFirings()) || countsElements(x.AfterEndOfWindow.GetLateFirings())
	case *pipepb.Trigger_OrFinally_:
		return countsElements(x.OrFinally.GetMain()) || countsElements(x.OrFinally.GetFinally())
	case *pipepb.Trigger_Repeat_:
		return countsElements(x.Repeat.GetSubtrigger())
	}
	return false
}

func anyCounts(ts []*pipepb.Trigger) bool {
	for _, tr := range ts {
		if countsElements(tr) {
			return true
		}
	}
	return false
}
