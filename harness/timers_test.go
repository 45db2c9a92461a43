package harness_test

// Timers with the real Go SDK harness: a stateful DoFn sets an event-time
// timer in one bundle, the runner delivers it in another.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/harness"
)

func init() {
	register.Function2x0(keyFn)
	register.DoFn6x0[beam.Window, state.Provider, timers.Provider, string, string, func(string, string)](&timerFn{})
	register.Emitter2[string, string]()
}

// keyFn makes the KV input of timerFn; only there for the pipeline's shape.
func keyFn(elem []byte, emit func(string, string)) { emit(string(elem), string(elem)) }

// timerFn remembers the value of each key and sets an event-time timer at
// the end of its window; when the timer fires it emits what it remembered.
type timerFn struct {
	Fire timers.EventTime
	Last state.Value[string]
}

func (fn *timerFn) ProcessElement(w beam.Window, sp state.Provider, tp timers.Provider, key, value string, emit func(string, string)) {
	fn.Fire.Set(tp, w.MaxTimestamp().ToTime())
	if err := fn.Last.Write(sp, value); err != nil {
		panic(err)
	}
	emit(key, "processed:"+value)
}

func (fn *timerFn) OnTimer(_ context.Context, _ beam.EventTime, sp state.Provider, _ timers.Provider, key string, timer timers.Context, emit func(string, string)) {
	if timer.Family != fn.Fire.Family {
		panic("unexpected timer family " + timer.Family)
	}
	v, ok, err := fn.Last.Read(sp)
	if err != nil {
		panic(err)
	}
	if !ok {
		panic("no state for key " + key)
	}
	emit(key, "fired:"+v)
}

// userState is an in-memory StateHandler for bag user state.
type userState struct {
	mu   sync.Mutex
	bags map[string][]byte
}

func bagKey(key *fnpb.StateKey) (string, error) {
	bag := key.GetBagUserState()
	if bag == nil {
		return "", fmt.Errorf("state key type %s not supported by the test", harness.StateKeyType(key))
	}
	return fmt.Sprintf("%s\x00%s\x00%x\x00%x", bag.GetTransformId(), bag.GetUserStateId(), bag.GetKey(), bag.GetWindow()), nil
}

func (s *userState) Get(_ context.Context, key *fnpb.StateKey, _ []byte) ([]byte, []byte, error) {
	k, err := bagKey(key)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bags[k]), nil, nil
}

func (s *userState) Append(_ context.Context, key *fnpb.StateKey, data []byte) error {
	k, err := bagKey(key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bags == nil {
		s.bags = map[string][]byte{}
	}
	s.bags[k] = append(s.bags[k], data...)
	return nil
}

func (s *userState) Clear(_ context.Context, key *fnpb.StateKey) error {
	k, err := bagKey(key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bags, k)
	return nil
}

// timerStage is the stage of timerFn with its one timer family.
type timerStage struct {
	stageSpec
	family  harness.TimerFamily
	coders  *graphx.CoderUnmarshaller
	inCoder string // windowed-value coder id of the input
}

func buildTimerStage(t *testing.T) timerStage {
	t.Helper()
	spec := buildStageWhere(t, func(s beam.Scope, imp beam.PCollection) {
		keyed := beam.ParDo(s, keyFn, imp)
		beam.ParDo(s, &timerFn{Fire: timers.InEventTime("fire"), Last: state.MakeValueState[string]("last")}, keyed)
	}, func(tr *pipepb.PTransform) bool {
		var payload pipepb.ParDoPayload
		if err := proto.Unmarshal(tr.GetSpec().GetPayload(), &payload); err != nil {
			t.Fatal(err)
		}
		return len(payload.GetTimerFamilySpecs()) > 0
	})
	ts := timerStage{stageSpec: spec, coders: graphx.NewCoderUnmarshaller(spec.desc.GetCoders())}
	for id, tr := range spec.desc.GetTransforms() {
		if tr.GetSpec().GetUrn() != harness.URNParDo {
			continue
		}
		var payload pipepb.ParDoPayload
		if err := proto.Unmarshal(tr.GetSpec().GetPayload(), &payload); err != nil {
			t.Fatal(err)
		}
		families := slices.Collect(maps.Keys(payload.GetTimerFamilySpecs()))
		if len(families) != 1 {
			t.Fatalf("timerFn's ParDo has timer families %q, want one", families)
		}
		ts.family = harness.TimerFamily{TransformID: id, FamilyID: families[0]}
	}
	var port fnpb.RemoteGrpcPort
	if err := proto.Unmarshal(spec.desc.GetTransforms()[spec.input].GetSpec().GetPayload(), &port); err != nil {
		t.Fatal(err)
	}
	ts.inCoder = port.GetCoderId()
	return ts
}

func (ts timerStage) coder(t *testing.T, id string) *coder.Coder {
	t.Helper()
	c, err := ts.coders.Coder(id)
	if err != nil {
		t.Fatalf("unmarshalling coder %s: %v", id, err)
	}
	return c
}

// encodeKV encodes KV<string, string> elements for the stage's input.
func (ts timerStage) encodeKV(t *testing.T, kvs ...[2]string) []byte {
	t.Helper()
	enc := exec.MakeElementEncoder(ts.coder(t, ts.inCoder))
	var buf bytes.Buffer
	for _, kv := range kvs {
		fv := &exec.FullValue{Elm: kv[0], Elm2: kv[1], Windows: window.SingleGlobalWindow, Timestamp: mtime.ZeroTimestamp, Pane: typex.NoFiringPane()}
		if err := enc.Encode(fv, &buf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// decodeKV decodes the stage's output PCollection as "key=value" strings.
func (ts timerStage) decodeKV(t *testing.T, data []byte) []string {
	t.Helper()
	dec := exec.MakeElementDecoder(ts.coder(t, "wv-"+ts.order[0]))
	var out []string
	r := bytes.NewReader(data)
	for r.Len() > 0 {
		fv, err := dec.Decode(r)
		if err != nil {
			t.Fatalf("decoding output: %v", err)
		}
		out = append(out, fmt.Sprintf("%v=%v", fv.Elm, fv.Elm2))
	}
	return out
}

// decodeTimers decodes concatenated timers of the stage's timer family.
func (ts timerStage) decodeTimers(t *testing.T, data []byte) []exec.TimerRecv {
	t.Helper()
	var payload pipepb.ParDoPayload
	if err := proto.Unmarshal(ts.desc.GetTransforms()[ts.family.TransformID].GetSpec().GetPayload(), &payload); err != nil {
		t.Fatal(err)
	}
	dec := exec.MakeElementDecoder(ts.coder(t, payload.GetTimerFamilySpecs()[ts.family.FamilyID].GetTimerFamilyCoderId()))
	var out []exec.TimerRecv
	r := bytes.NewReader(data)
	for r.Len() > 0 {
		fv, err := dec.Decode(r)
		if err != nil {
			t.Fatalf("decoding timer: %v", err)
		}
		out = append(out, fv.Elm.(exec.TimerRecv))
	}
	return out
}

// timerCollector gathers the timers a bundle sets, checking that they never
// arrive concurrently with each other or with data output.
type timerCollector struct {
	*collector
	byFamily map[harness.TimerFamily]*bytes.Buffer
}

func newTimerCollector(t *testing.T) *timerCollector {
	return &timerCollector{collector: newCollector(t), byFamily: map[harness.TimerFamily]*bytes.Buffer{}}
}

func (c *timerCollector) emitTimers(transformID, familyID string, data []byte) error {
	c.mu.Lock()
	if c.busy {
		c.mu.Unlock()
		c.t.Errorf("timer emit called concurrently with another emit of the bundle")
		return nil
	}
	c.busy = true
	f := harness.TimerFamily{TransformID: transformID, FamilyID: familyID}
	buf := c.byFamily[f]
	if buf == nil {
		buf = &bytes.Buffer{}
		c.byFamily[f] = buf
	}
	buf.Write(data)
	c.busy = false
	c.mu.Unlock()
	return nil
}

func (c *timerCollector) timers(f harness.TimerFamily) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if buf := c.byFamily[f]; buf != nil {
		return slices.Clone(buf.Bytes())
	}
	return nil
}

func (c *timerCollector) raw(pcoll string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if buf := c.byColl[pcoll]; buf != nil {
		return slices.Clone(buf.Bytes())
	}
	return nil
}

// runTimerBundle runs one bundle of stage with input elements (may be nil)
// and fired timers (may be nil), bounded by a deadline so a missing is_last
// fails the test instead of hanging it.
func runTimerBundle(t *testing.T, stage *harness.Stage, ts timerStage, st *userState, input, fired []byte) *timerCollector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newTimerCollector(t)
	b, err := stage.StartBundle(ctx, c.emit, harness.WithStateHandler(st), harness.WithTimerOutput(c.emitTimers))
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if input != nil {
		if err := b.Process(input); err != nil {
			t.Fatalf("Process: %v", err)
		}
	}
	if fired != nil {
		if err := b.ProcessTimers(ts.family.TransformID, ts.family.FamilyID, fired); err != nil {
			t.Fatalf("ProcessTimers: %v", err)
		}
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return c
}

// TestEventTimeTimerRoundTrip runs a bundle whose DoFn sets an event-time
// timer, checks the timer reaches WithTimerOutput, then fires it in a
// second bundle with ProcessTimers and checks OnTimer's output, which reads
// the state the first bundle wrote.
func TestEventTimeTimerRoundTrip(t *testing.T) {
	h := startHarness(t, harness.Config{})
	ts := buildTimerStage(t)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", ts.desc, ts.input, ts.outputs, harness.WithTimerFamilies([]harness.TimerFamily{ts.family}))
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	st := &userState{}
	out := ts.order[0]

	first := runTimerBundle(t, stage, ts, st, ts.encodeKV(t, [2]string{"k", "v1"}), nil)
	if got := ts.decodeKV(t, first.raw(out)); !slices.Equal(got, []string{"k=processed:v1"}) {
		t.Errorf("first bundle output %q, want [k=processed:v1]", got)
	}
	timerData := first.timers(ts.family)
	set := ts.decodeTimers(t, timerData)
	if len(set) != 1 {
		t.Fatalf("first bundle set %d timers (%+v), want 1", len(set), set)
	}
	tm := set[0]
	// The family is the stream's, not part of the encoding.
	if tm.Key.Elm != "k" || tm.Tag != "" || tm.Clear ||
		tm.FireTimestamp != mtime.EndOfGlobalWindowTime || len(tm.Windows) != 1 || !tm.Windows[0].Equals(window.GlobalWindow{}) {
		t.Errorf("timer %+v (key %v), want key k firing at the end of the global window (%v)", tm, tm.Key.Elm, mtime.EndOfGlobalWindowTime)
	}
	if len(st.bags) == 0 {
		t.Errorf("the first bundle wrote no user state")
	}

	// The host fires the timer: the same bytes go back to the SDK.
	second := runTimerBundle(t, stage, ts, st, nil, timerData)
	if got := ts.decodeKV(t, second.raw(out)); !slices.Equal(got, []string{"k=fired:v1"}) {
		t.Errorf("second bundle output %q, want [k=fired:v1]", got)
	}
	if got := second.timers(ts.family); len(got) != 0 {
		t.Errorf("second bundle set timers %+v, want none", ts.decodeTimers(t, got))
	}

	// Bundles with timer families but neither input nor timers, and with
	// only input, still end: the harness sends is_last for every family.
	for range 3 {
		c := runTimerBundle(t, stage, ts, st, nil, nil)
		if got := c.raw(out); len(got) != 0 {
			t.Errorf("empty bundle output %q", ts.decodeKV(t, got))
		}
	}
	third := runTimerBundle(t, stage, ts, st, ts.encodeKV(t, [2]string{"a", "1"}, [2]string{"b", "2"}, [2]string{"a", "3"}), nil)
	if got := ts.decodeKV(t, third.raw(out)); !slices.Equal(got, []string{"a=processed:1", "b=processed:2", "a=processed:3"}) {
		t.Errorf("third bundle output %q", got)
	}
	var keys []string
	for _, tm := range ts.decodeTimers(t, third.timers(ts.family)) {
		keys = append(keys, fmt.Sprint(tm.Key.Elm))
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("third bundle set timers for keys %q, want [a b] (one per key and window)", keys)
	}
}

// TestTimerFamiliesChecked checks that a stage must list exactly the timer
// families its ParDos declare, and that ProcessTimers refuses other
// families.
func TestTimerFamiliesChecked(t *testing.T) {
	h := startHarness(t, harness.Config{})
	ts := buildTimerStage(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		families []harness.TimerFamily
		want     string
	}{
		{"none", nil, "does not list"},
		{"unknown", []harness.TimerFamily{ts.family, {TransformID: ts.family.TransformID, FamilyID: "nope"}}, "not declared"},
		{"twice", []harness.TimerFamily{ts.family, ts.family}, "twice"},
	} {
		_, err := h.Stage(ctx, "go", ts.desc, ts.input, ts.outputs, harness.WithTimerFamilies(tc.families))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Stage error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	stage, err := h.Stage(ctx, "go", ts.desc, ts.input, ts.outputs, harness.WithTimerFamilies([]harness.TimerFamily{ts.family}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := stage.StartBundle(ctx, newCollector(t).emit, harness.WithStateHandler(&userState{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ProcessTimers(ts.family.TransformID, "nope", []byte{1}); err == nil || !strings.Contains(err.Error(), "not a timer family") {
		t.Errorf("ProcessTimers of an unknown family: %v", err)
	}
	// Without WithTimerOutput, timers the SDK sets fail the bundle.
	if err := b.Process(ts.encodeKV(t, [2]string{"k", "v"})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Finish(); err == nil || !strings.Contains(err.Error(), "WithTimerOutput") {
		t.Errorf("Finish of a bundle setting timers without a timer output: %v", err)
	}
	// The worker is still usable.
	c := runTimerBundle(t, stage, ts, &userState{}, ts.encodeKV(t, [2]string{"k", "v"}), nil)
	if got := ts.decodeTimers(t, c.timers(ts.family)); len(got) != 1 {
		t.Errorf("after a failed bundle: %d timers, want 1", len(got))
	}
}
