package windowing

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
)

// PaneInfo is the Go SDK's pane info (is_first, is_last, timing, index,
// on-time index), so panes pass to exec's windowed value coders unchanged.
type PaneInfo = typex.PaneInfo

// PaneTiming is EARLY, ON_TIME, LATE or UNKNOWN.
type PaneTiming = typex.PaneTiming

// Pane timings.
const (
	Early   = typex.PaneEarly
	OnTime  = typex.PaneOnTime
	Late    = typex.PaneLate
	Unknown = typex.PaneUnknown
)

// nextPane describes the pane about to be emitted, as Beam's
// PaneInfoTracker.describePane:
//
//   - index counts the panes emitted before in this window; the first pane
//     has index 0 and is_first;
//   - a pane is LATE once a non-EARLY pane has been emitted or the output
//     watermark has passed the window's max timestamp;
//   - otherwise EARLY while the input watermark has not passed the window's
//     max timestamp, with on-time index -1;
//   - otherwise it is the unique ON_TIME pane;
//   - the on-time (non-speculative) index counts the non-EARLY panes
//     (previous on-time index + 1, the one after EARLY panes being 0).
func nextPane(prev PaneInfo, hasPrev bool, w Window, inputWM, outputWM mtime.Time, isLast bool) PaneInfo {
	p := PaneInfo{IsFirst: !hasPrev, IsLast: isLast}
	var prevNonSpec int64 = -1
	if hasPrev {
		p.Index = prev.Index + 1
		prevNonSpec = prev.NonSpeculativeIndex
	}
	p.NonSpeculativeIndex = prevNonSpec + 1
	onlyEarlySoFar := !hasPrev || prev.Timing == Early
	switch {
	case w.MaxTimestamp() < outputWM || !onlyEarlySoFar:
		p.Timing = Late
	case inputWM <= w.MaxTimestamp():
		p.Timing = Early
		p.NonSpeculativeIndex = -1
	default:
		p.Timing = OnTime
	}
	return p
}
