package windowing

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

func TestWindowCoders(t *testing.T) {
	gc, err := NewWindowCoder(URNGlobalWindowCoder)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := gc.Encode(GlobalWindow()); len(b) != 0 {
		t.Errorf("global window encodes to %x, want nothing", b)
	}
	if w, err := gc.Decode(nil); err != nil || w != GlobalWindow() {
		t.Errorf("Decode(global) = %v, %v", w, err)
	}
	ic, _ := NewWindowCoder(URNIntervalWindowCoder)
	// interval_window: end as a big-endian instant (millis with the sign bit
	// flipped), then the varint span end-start.
	w := IntervalWindow(0, 10000)
	want := []byte{0x80, 0, 0, 0, 0, 0, 0x27, 0x10, 0x90, 0x4e}
	b, err := ic.Encode(w)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("Encode(%v) = %x, %v; want %x", w, b, err, want)
	}
	for _, w := range []Window{w, IntervalWindow(-5000, -1), IntervalWindow(mtime.MinTimestamp, mtime.MaxTimestamp)} {
		b, _ := ic.Encode(w)
		if got, err := ic.Decode(b); err != nil || got != w {
			t.Errorf("round trip %v: %v, %v", w, got, err)
		}
	}
	if _, err := ic.Decode(append(want, 0)); err == nil {
		t.Error("trailing bytes accepted")
	}
	if _, err := ic.Encode(GlobalWindow()); err == nil {
		t.Error("global window encoded with the interval coder")
	}
	if _, err := NewWindowCoder("beam:coder:custom_window:v1"); !errors.Is(err, ErrUnsupportedWindowCoder) {
		t.Errorf("custom window coder: %v", err)
	}
}

func TestPaneEncoding(t *testing.T) {
	for _, p := range []PaneInfo{
		{IsFirst: true, IsLast: true, Timing: Unknown},
		{IsFirst: true, Timing: Early, Index: 0, NonSpeculativeIndex: -1},
		{Timing: Early, Index: 3, NonSpeculativeIndex: -1},
		{Timing: OnTime, Index: 4, NonSpeculativeIndex: 0},
		{IsLast: true, Timing: Late, Index: 7, NonSpeculativeIndex: 3},
		{IsFirst: true, IsLast: true, Timing: OnTime},
	} {
		b, err := EncodePane(p)
		if err != nil {
			t.Fatalf("EncodePane(%+v): %v", p, err)
		}
		if got, err := DecodePane(b); err != nil || got != p {
			t.Errorf("round trip %+v -> %x -> %+v, %v", p, b, got, err)
		}
	}
	// The no-firing pane is the single byte 0x0f.
	if b, _ := EncodePane(PaneInfo{IsFirst: true, IsLast: true, Timing: Unknown}); !bytes.Equal(b, []byte{0x0f}) {
		t.Errorf("no-firing pane encodes to %x", b)
	}
}

func TestAssignWindows(t *testing.T) {
	cases := []struct {
		name string
		fn   WindowFn
		ts   mtime.Time
		want []Window
	}{
		{"global", WindowFn{}, 123, []Window{GlobalWindow()}},
		{"fixed", Fixed(10 * time.Second), 12345, []Window{IntervalWindow(10000, 20000)}},
		{"fixed boundary", Fixed(10 * time.Second), 10000, []Window{IntervalWindow(10000, 20000)}},
		{"fixed negative", Fixed(10 * time.Second), -1, []Window{IntervalWindow(-10000, 0)}},
		{"fixed offset", WindowFn{Kind: FixedWindows, Size: 10, Offset: 3}, 12, []Window{IntervalWindow(3, 13)}},
		{"sliding", Sliding(3*time.Second, 9*time.Second), 990, []Window{
			IntervalWindow(0, 9000), IntervalWindow(-3000, 6000), IntervalWindow(-6000, 3000)}},
		{"sliding = fixed", Sliding(3*time.Second, 3*time.Second), 4000, []Window{IntervalWindow(3000, 6000)}},
		{"sessions", Sessions(time.Second), 500, []Window{IntervalWindow(500, 1500)}},
	}
	for _, c := range cases {
		if got := c.fn.AssignWindows(c.ts); !slices.Equal(got, c.want) {
			t.Errorf("%s: AssignWindows(%v) = %v, want %v", c.name, c.ts, got, c.want)
		}
	}
}

func TestMergeWindows(t *testing.T) {
	iw := IntervalWindow
	cases := []struct {
		name string
		in   []Window
		want []Merge
	}{
		{"disjoint do not merge", []Window{iw(0, 10), iw(20, 30)}, nil},
		{"adjacent do not merge (intervals are half-open)", []Window{iw(0, 10), iw(10, 20)}, nil},
		{"overlapping merge into the span", []Window{iw(5, 15), iw(0, 10)}, []Merge{{From: []Window{iw(0, 10), iw(5, 15)}, To: iw(0, 15)}}},
		{"chains merge transitively", []Window{iw(0, 10), iw(8, 18), iw(16, 26), iw(40, 50)},
			[]Merge{{From: []Window{iw(0, 10), iw(8, 18), iw(16, 26)}, To: iw(0, 26)}}},
		{"contained", []Window{iw(0, 100), iw(10, 20)}, []Merge{{From: []Window{iw(0, 100), iw(10, 20)}, To: iw(0, 100)}}},
		{"duplicates collapse", []Window{iw(0, 10), iw(0, 10)}, nil},
		{"two groups", []Window{iw(0, 10), iw(5, 12), iw(30, 40), iw(35, 45)}, []Merge{
			{From: []Window{iw(0, 10), iw(5, 12)}, To: iw(0, 12)}, {From: []Window{iw(30, 40), iw(35, 45)}, To: iw(30, 45)}}},
	}
	for _, c := range cases {
		got := MergeWindows(c.in)
		if len(got) != len(c.want) {
			t.Errorf("%s: MergeWindows(%v) = %v, want %v", c.name, c.in, got, c.want)
			continue
		}
		for i := range got {
			if got[i].To != c.want[i].To || !slices.Equal(got[i].From, c.want[i].From) {
				t.Errorf("%s: merge %d = %v, want %v", c.name, i, got[i], c.want[i])
			}
		}
	}
}

func TestWindowFnFromSpec(t *testing.T) {
	for _, fn := range []*window.Fn{window.NewGlobalWindows(), window.NewFixedWindows(time.Minute),
		window.NewSlidingWindows(time.Second, time.Minute), window.NewSessions(time.Hour)} {
		s := strategyOf(t, fn, trigger.Default())
		want := map[window.Kind]WindowFn{
			window.GlobalWindows:  {},
			window.FixedWindows:   Fixed(time.Minute),
			window.SlidingWindows: Sliding(time.Second, time.Minute),
			window.Sessions:       Sessions(time.Hour),
		}[fn.Kind]
		if s.WindowFn != want {
			t.Errorf("%v: parsed %+v, want %+v", fn, s.WindowFn, want)
		}
	}
	_, err := WindowFnFromSpec(&pipepb.FunctionSpec{Urn: "beam:window_fn:custom:v1"})
	if !errors.Is(err, ErrUnsupportedWindowFn) {
		t.Errorf("custom window fn: %v, want ErrUnsupportedWindowFn", err)
	}
}
