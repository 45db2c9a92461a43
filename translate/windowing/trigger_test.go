package windowing

import (
	"errors"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

func tCountP(n int32) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_ElementCount_{ElementCount: &pipepb.Trigger_ElementCount{ElementCount: n}}}
}
func tRepeatP(t *pipepb.Trigger) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_Repeat_{Repeat: &pipepb.Trigger_Repeat{Subtrigger: t}}}
}
func tEOWP(early, late *pipepb.Trigger) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEndOfWindow_{AfterEndOfWindow: &pipepb.Trigger_AfterEndOfWindow{EarlyFirings: early, LateFirings: late}}}
}
func tAllP(ts ...*pipepb.Trigger) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterAll_{AfterAll: &pipepb.Trigger_AfterAll{Subtriggers: ts}}}
}
func tAnyP(ts ...*pipepb.Trigger) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterAny_{AfterAny: &pipepb.Trigger_AfterAny{Subtriggers: ts}}}
}
func tEachP(ts ...*pipepb.Trigger) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEach_{AfterEach: &pipepb.Trigger_AfterEach{Subtriggers: ts}}}
}
func tOrFinallyP(m, f *pipepb.Trigger) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_OrFinally_{OrFinally: &pipepb.Trigger_OrFinally{Main: m, Finally: f}}}
}
func tProcP(tts ...*pipepb.TimestampTransform) *pipepb.Trigger {
	return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterProcessingTime_{AfterProcessingTime: &pipepb.Trigger_AfterProcessingTime{TimestampTransforms: tts}}}
}
func delayP(ms int64) *pipepb.TimestampTransform {
	return &pipepb.TimestampTransform{TimestampTransform: &pipepb.TimestampTransform_Delay_{Delay: &pipepb.TimestampTransform_Delay{DelayMillis: ms}}}
}
func alignP(period, offset int64) *pipepb.TimestampTransform {
	return &pipepb.TimestampTransform{TimestampTransform: &pipepb.TimestampTransform_AlignTo_{AlignTo: &pipepb.TimestampTransform_AlignTo{Period: period, Offset: offset}}}
}

var (
	tDefaultP = &pipepb.Trigger{Trigger: &pipepb.Trigger_Default_{Default: &pipepb.Trigger_Default{}}}
	tNeverP   = &pipepb.Trigger{Trigger: &pipepb.Trigger_Never_{Never: &pipepb.Trigger_Never{}}}
	tAlwaysP  = &pipepb.Trigger{Trigger: &pipepb.Trigger_Always_{Always: &pipepb.Trigger_Always{}}}
)

// step is one event of a trigger table test: "el" an element; "wm" and "pt"
// move the input watermark / processing time to at; "fire?" checks
// ShouldFire == want; "fire" calls OnFire and checks finished == want;
// "timers" checks NextTimers' event (at) and processing (pt) instants, 0
// meaning none.
type step struct {
	op   string
	at   mtime.Time
	want bool
	pt   mtime.Time
}

func runSteps(t *testing.T, tr *Trigger, c Context, steps []step) TriggerState {
	t.Helper()
	var s TriggerState
	for i, st := range steps {
		// Every step goes through the serialized form.
		var err error
		if s, err = tr.UnmarshalState(s.Marshal()); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		switch st.op {
		case "el":
			s = tr.OnElement(s, c)
		case "wm":
			c.InputWatermark = st.at
		case "pt":
			c.ProcessingTime = st.at
		case "fire?":
			if got := tr.ShouldFire(s, c); got != st.want {
				t.Fatalf("step %d: ShouldFire = %v, want %v", i, got, st.want)
			}
		case "fire":
			if !tr.ShouldFire(s, c) {
				t.Fatalf("step %d: OnFire without ShouldFire", i)
			}
			var fin bool
			s, fin = tr.OnFire(s, c)
			if fin != st.want {
				t.Fatalf("step %d: OnFire finished = %v, want %v", i, fin, st.want)
			}
		case "timers":
			tm := tr.NextTimers(s, c)
			if tm.HasEventTime != (st.at != 0) || (tm.HasEventTime && tm.EventTime != st.at) ||
				tm.HasProcessingTime != (st.pt != 0) || (tm.HasProcessingTime && tm.ProcessingTime != st.pt) {
				t.Fatalf("step %d: NextTimers = %+v, want event %v processing %v", i, tm, st.at, st.pt)
			}
		}
	}
	return s
}

func TestTriggerStateMachines(t *testing.T) {
	w := IntervalWindow(0, 100) // max timestamp 99
	el := step{op: "el"}
	fire := func(want bool) step { return step{op: "fire?", want: want} }
	onFire := func(finished bool) step { return step{op: "fire", want: finished} }
	wm := func(at mtime.Time) step { return step{op: "wm", at: at} }
	pt := func(at mtime.Time) step { return step{op: "pt", at: at} }
	timers := func(ev, proc mtime.Time) step { return step{op: "timers", at: ev, pt: proc} }
	cases := []struct {
		name  string
		rule  string
		tr    *pipepb.Trigger
		steps []step
	}{
		{"default", "Default fires when the watermark passes the end of the window, then on every late element; never finishes",
			tDefaultP, []step{timers(99, 0), el, fire(false), wm(99), fire(false), wm(100), fire(true), onFire(false), timers(0, 0), el, fire(true)}},
		{"count", "AfterPane.elementCountAtLeast(n) fires once n elements arrived, and is a once trigger",
			tCountP(2), []step{el, fire(false), el, fire(true), onFire(true), el, fire(false)}},
		{"repeat count", "Repeatedly resets its subtrigger when it finishes",
			tRepeatP(tCountP(2)), []step{el, el, onFire(false), el, fire(false), el, fire(true), onFire(false)}},
		{"never", "Never never fires", tNeverP, []step{el, wm(1000), fire(false), timers(0, 0)}},
		{"always", "Always is always ready and never finishes", tAlwaysP, []step{fire(true), el, onFire(false), fire(true)}},
		{"end of window", "AfterWatermark.pastEndOfWindow fires once when the input watermark passes the window's max timestamp",
			tEOWP(nil, nil), []step{el, timers(99, 0), fire(false), wm(100), fire(true), onFire(true), timers(0, 0)}},
		{"early and late", "early firings repeat before the end of window; the ON_TIME firing ends them; late firings repeat after",
			tEOWP(tCountP(2), tCountP(1)), []step{el, fire(false), el, fire(true), onFire(false), el, fire(false),
				wm(100), fire(true), onFire(false), fire(false), el, fire(true), onFire(false), el, fire(true)}},
		{"early only", "without late firings the trigger finishes at the end of the window",
			tEOWP(tCountP(1), nil), []step{el, onFire(false), wm(100), fire(true), onFire(true)}},
		{"late only", "with only late firings, the ON_TIME pane fires then every late trigger",
			tEOWP(nil, tCountP(1)), []step{el, fire(false), wm(100), fire(true), onFire(false), fire(false), el, onFire(false)}},
		{"processing time delay", "AfterProcessingTime fires once processing time reaches first element's time + delay",
			tProcP(delayP(1000)), []step{pt(500), timers(0, 0), el, pt(900), el, timers(0, 1500), fire(false), pt(1500), fire(true), onFire(true), timers(0, 0)}},
		{"processing time aligned", "alignTo(period, offset) rounds up to the next offset + k*period",
			tProcP(delayP(1000), alignP(1000, 100)), []step{pt(1234), el, timers(0, 3100), pt(3099), fire(false), pt(3100), fire(true)}},
		{"processing time already aligned", "an aligned instant stays as it is",
			tProcP(alignP(1000, 0)), []step{pt(3000), el, timers(0, 3000)}},
		{"after all", "AfterAll fires when every subtrigger is ready, once",
			tAllP(tCountP(2), tEOWP(nil, nil)), []step{el, el, fire(false), wm(100), fire(true), onFire(true)}},
		{"after any", "AfterAny fires when any subtrigger is ready, once",
			tAnyP(tCountP(5), tEOWP(nil, nil)), []step{el, fire(false), wm(100), fire(true), onFire(true), el, fire(false)}},
		{"after each", "AfterEach runs its subtriggers in sequence and finishes after the last",
			tEachP(tCountP(1), tCountP(2)), []step{el, fire(true), onFire(false), el, fire(false), el, fire(true), onFire(true)}},
		{"or finally main", "OrFinally fires with its main trigger and finishes when the finally trigger fires",
			tOrFinallyP(tRepeatP(tCountP(1)), tEOWP(nil, nil)), []step{el, fire(true), onFire(false), el, onFire(false), wm(100), fire(true), onFire(true)}},
		{"or finally once main", "OrFinally also finishes when its main trigger finishes",
			tOrFinallyP(tCountP(1), tNeverP), []step{el, fire(true), onFire(true)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Log(c.rule)
			tr, err := NewTrigger(c.tr, false)
			if err != nil {
				t.Fatal(err)
			}
			runSteps(t, tr, Context{Window: w, InputWatermark: mtime.MinTimestamp}, c.steps)
		})
	}
}

func TestTriggerSynchronizedProcessingTime(t *testing.T) {
	// AfterSynchronizedProcessingTime fires once the synchronized processing
	// time is after the one seen by the first element.
	tr, _ := NewTrigger(&pipepb.Trigger{Trigger: &pipepb.Trigger_AfterSynchronizedProcessingTime_{
		AfterSynchronizedProcessingTime: &pipepb.Trigger_AfterSynchronizedProcessingTime{}}}, false)
	c := Context{Window: GlobalWindow(), SynchronizedProcessingTime: 10}
	s := tr.OnElement(TriggerState{}, c)
	if tr.ShouldFire(s, c) {
		t.Fatal("fired within the element's bundle")
	}
	if tm := tr.NextTimers(s, c); !tm.HasProcessingTime || tm.ProcessingTime != 11 {
		t.Fatalf("timers %+v, want processing 11", tm)
	}
	c.SynchronizedProcessingTime = 11
	if !tr.ShouldFire(s, c) {
		t.Fatal("not fired after the bundle")
	}
}

func TestTriggerMerge(t *testing.T) {
	merged := Context{Window: IntervalWindow(0, 200), InputWatermark: mtime.MinTimestamp}
	small := Context{Window: IntervalWindow(0, 100), InputWatermark: mtime.MinTimestamp}

	t.Run("counts add up", func(t *testing.T) {
		// AfterPane.onMerge: the element counts of the merging windows sum.
		tr, _ := NewTrigger(tCountP(3), true)
		a := tr.OnElement(tr.OnElement(TriggerState{}, small), small)
		b := tr.OnElement(TriggerState{}, small)
		if tr.ShouldFire(a, small) || tr.ShouldFire(b, small) {
			t.Fatal("fired before merging")
		}
		if m := tr.OnMerge([]TriggerState{a, b}, merged); !tr.ShouldFire(m, merged) {
			t.Fatal("merged count of 3 does not fire")
		}
	})
	t.Run("finished in any", func(t *testing.T) {
		// Once triggers finished in any merging window are finished.
		tr, _ := NewTrigger(tCountP(1), true)
		a, _ := tr.OnFire(tr.OnElement(TriggerState{}, small), small)
		if m := tr.OnMerge([]TriggerState{a, {}}, merged); !tr.IsFinished(m) {
			t.Fatal("merged trigger not finished")
		}
	})
	t.Run("end of window revived", func(t *testing.T) {
		// AfterWatermark.onMerge: finished in all windows but the merged
		// window's end not reached: active again.
		tr, _ := NewTrigger(tEOWP(nil, nil), true)
		c := small
		c.InputWatermark = 150
		a, _ := tr.OnFire(TriggerState{}, c)
		mc := merged
		mc.InputWatermark = 150
		m := tr.OnMerge([]TriggerState{a}, mc)
		if tr.IsFinished(m) {
			t.Fatal("merged trigger finished before the merged window's end")
		}
		mc.InputWatermark = 200
		if !tr.ShouldFire(m, mc) {
			t.Fatal("merged trigger does not fire at the merged window's end")
		}
	})
	t.Run("processing time earliest deadline", func(t *testing.T) {
		tr, _ := NewTrigger(tProcP(delayP(100)), true)
		a := tr.OnElement(TriggerState{}, Context{Window: small.Window, ProcessingTime: 50})
		b := tr.OnElement(TriggerState{}, Context{Window: small.Window, ProcessingTime: 10})
		m := tr.OnMerge([]TriggerState{a, b}, merged)
		if tm := tr.NextTimers(m, merged); tm.ProcessingTime != 110 {
			t.Fatalf("merged deadline %v, want 110", tm.ProcessingTime)
		}
	})
}

func TestTriggerStateSerialization(t *testing.T) {
	tr, _ := NewTrigger(tOrFinallyP(tRepeatP(tProcP(delayP(5))), tCountP(4)), false)
	c := Context{Window: GlobalWindow(), ProcessingTime: -7}
	s := tr.OnElement(tr.OnElement(TriggerState{}, c), c)
	b := s.Marshal()
	got, err := tr.UnmarshalState(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Marshal()) != string(b) {
		t.Fatalf("round trip changed the state: %x -> %x", b, got.Marshal())
	}
	if (TriggerState{}).Marshal() != nil {
		t.Error("initial state does not marshal to nil")
	}
	other, _ := NewTrigger(tCountP(1), false)
	if _, err := other.UnmarshalState(b); err == nil {
		t.Error("state of another trigger accepted")
	}
	if _, err := tr.UnmarshalState(b[:len(b)-1]); err == nil {
		t.Error("truncated state accepted")
	}
}

func TestUnsupportedTrigger(t *testing.T) {
	_, err := NewTrigger(tAllP(), false)
	if !errors.Is(err, ErrUnsupportedTrigger) {
		t.Fatalf("AfterAll without subtriggers: %v, want ErrUnsupportedTrigger", err)
	}
}
