package windowing

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Standard window fn URNs (standard_window_fns.proto).
const (
	URNGlobalWindows  = "beam:window_fn:global_windows:v1"
	URNFixedWindows   = "beam:window_fn:fixed_windows:v1"
	URNSlidingWindows = "beam:window_fn:sliding_windows:v1"
	URNSessionWindows = "beam:window_fn:session_windows:v1"
)

// ErrUnsupportedWindowFn is returned (wrapped) for a window fn URN the host
// does not implement (a custom WindowFn). The host detects it with
// errors.Is and leaves windowing to the SDK harness.
var ErrUnsupportedWindowFn = errors.New("unsupported window fn")

// WindowFnKind names the standard window fns.
type WindowFnKind int

// The standard window fns.
const (
	GlobalWindows WindowFnKind = iota
	FixedWindows
	SlidingWindows
	SessionWindows
	// CustomWindows is a WindowFn the host does not implement (its URN is
	// in WindowFn.URN): the SDK assigns its windows (WindowInto runs in the
	// SDK harness) and, if it merges, merges them (the host runs the Fn
	// API's merge_windows transform). The host only needs to read its
	// windows, so their coder must be the global or interval window coder.
	CustomWindows
)

// WindowFn is one of the standard window fns with its parameters, in
// milliseconds, or a custom one. The zero value is GlobalWindows.
type WindowFn struct {
	Kind   WindowFnKind
	Size   int64 // fixed, sliding
	Period int64 // sliding
	Offset int64 // fixed, sliding
	Gap    int64 // sessions

	URN     string // custom
	Merging bool   // custom: the windowing strategy's merge status is not NON_MERGING
}

// WindowFnFromSpec parses a window fn FunctionSpec.
func WindowFnFromSpec(spec *pipepb.FunctionSpec) (WindowFn, error) {
	if spec == nil {
		return WindowFn{}, fmt.Errorf("windowing: missing window fn: %w", ErrUnsupportedWindowFn)
	}
	payload := spec.GetPayload()
	switch urn := spec.GetUrn(); urn {
	case URNGlobalWindows:
		return WindowFn{Kind: GlobalWindows}, nil
	case URNFixedWindows:
		var p pipepb.FixedWindowsPayload
		if err := proto.Unmarshal(payload, &p); err != nil {
			return WindowFn{}, fmt.Errorf("windowing: decoding %s payload: %w", urn, err)
		}
		fn := WindowFn{Kind: FixedWindows, Size: p.GetSize().AsDuration().Milliseconds(), Offset: p.GetOffset().AsTime().UnixMilli()}
		if fn.Size <= 0 {
			return WindowFn{}, fmt.Errorf("windowing: %s: size %dms must be positive", urn, fn.Size)
		}
		return fn, nil
	case URNSlidingWindows:
		var p pipepb.SlidingWindowsPayload
		if err := proto.Unmarshal(payload, &p); err != nil {
			return WindowFn{}, fmt.Errorf("windowing: decoding %s payload: %w", urn, err)
		}
		fn := WindowFn{Kind: SlidingWindows, Size: p.GetSize().AsDuration().Milliseconds(),
			Period: p.GetPeriod().AsDuration().Milliseconds(), Offset: p.GetOffset().AsTime().UnixMilli()}
		if fn.Size <= 0 || fn.Period <= 0 {
			return WindowFn{}, fmt.Errorf("windowing: %s: size %dms and period %dms must be positive", urn, fn.Size, fn.Period)
		}
		return fn, nil
	case URNSessionWindows:
		var p pipepb.SessionWindowsPayload
		if err := proto.Unmarshal(payload, &p); err != nil {
			return WindowFn{}, fmt.Errorf("windowing: decoding %s payload: %w", urn, err)
		}
		fn := WindowFn{Kind: SessionWindows, Gap: p.GetGapSize().AsDuration().Milliseconds()}
		if fn.Gap <= 0 {
			return WindowFn{}, fmt.Errorf("windowing: %s: gap %dms must be positive", urn, fn.Gap)
		}
		return fn, nil
	default:
		return WindowFn{}, fmt.Errorf("windowing: window fn %q: %w", urn, ErrUnsupportedWindowFn)
	}
}

// Fixed, Sliding and Sessions build window fns directly (tests, runner-side
// expansions).
func Fixed(size time.Duration) WindowFn {
	return WindowFn{Kind: FixedWindows, Size: size.Milliseconds()}
}

// Sliding returns sliding windows of size starting every period.
func Sliding(period, size time.Duration) WindowFn {
	return WindowFn{Kind: SlidingWindows, Size: size.Milliseconds(), Period: period.Milliseconds()}
}

// Sessions returns session windows with the given gap.
func Sessions(gap time.Duration) WindowFn {
	return WindowFn{Kind: SessionWindows, Gap: gap.Milliseconds()}
}

// IsMerging reports whether windows of this fn must be merged (sessions).
func (f WindowFn) IsMerging() bool {
	return f.Kind == SessionWindows || f.Kind == CustomWindows && f.Merging
}

// mod is the non-negative remainder, as Beam's window fns compute it.
func mod(a, b int64) int64 { return ((a % b) + b) % b }

// AssignWindows returns the windows of an element at timestamp ts, in the
// order Beam's window fns produce them (sliding: latest start first). It
// must not be called for CustomWindows, which only the SDK can assign.
func (f WindowFn) AssignWindows(ts mtime.Time) []Window {
	t := int64(ts)
	switch f.Kind {
	case FixedWindows:
		start := t - mod(t-f.Offset, f.Size)
		return []Window{IntervalWindow(mtime.Time(start), mtime.Time(start+f.Size))}
	case SlidingWindows:
		// SlidingWindows.assignWindows: every start s = lastStart - k*period
		// with s > t - size.
		ws := make([]Window, 0, (f.Size+f.Period-1)/f.Period)
		for start := t - mod(t-f.Offset, f.Period); start > t-f.Size; start -= f.Period {
			ws = append(ws, IntervalWindow(mtime.Time(start), mtime.Time(start+f.Size)))
		}
		return ws
	case SessionWindows:
		return []Window{IntervalWindow(ts, ts+mtime.Time(f.Gap))}
	case CustomWindows:
		panic("windowing: AssignWindows on the custom window fn " + f.URN)
	default:
		return []Window{GlobalWindow()}
	}
}

// Merge is one merge of a MergeWindows result: the windows in From are
// replaced by To. From has at least two windows and may contain To.
type Merge struct {
	From []Window
	To   Window
}

// MergeWindows merges overlapping interval windows, as Beam's
// MergeOverlappingIntervalWindows (used by Sessions): windows sorted by start
// are grouped while each one intersects the span of the group so far; every
// group of two or more windows merges into its span. Windows that merge with
// nothing are not mentioned. Duplicates are merged away. Global windows never
// merge.
func MergeWindows(ws []Window) []Merge {
	sorted := make([]Window, 0, len(ws))
	for _, w := range ws {
		if !w.global && !slices.Contains(sorted, w) {
			sorted = append(sorted, w)
		}
	}
	slices.SortFunc(sorted, func(a, b Window) int {
		if a.Start != b.Start {
			return cmpTime(a.Start, b.Start)
		}
		return cmpTime(a.End, b.End)
	})
	var merges []Merge
	flush := func(group []Window, span Window) {
		if len(group) > 1 {
			merges = append(merges, Merge{From: group, To: span})
		}
	}
	var group []Window
	var span Window
	for _, w := range sorted {
		if len(group) > 0 && span.Intersects(w) {
			group = append(group, w)
			span = span.Span(w)
			continue
		}
		flush(group, span)
		group, span = []Window{w}, w
	}
	flush(group, span)
	return merges
}

func cmpTime(a, b mtime.Time) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
