package watermark

import (
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Aggregator computes the input watermark of one input from per-producer
// reports. The zero value is not usable: use [NewAggregator].
//
// Invariants (checked by the property tests):
//   - len(latest) <= expected, unless more producers than expected report
//     (then every report still counts, and the count of expected producers
//     only delays the first non-minimal watermark);
//   - latest[p] never decreases;
//   - wm == MinTimestamp while fewer than expected producers have reported,
//     else wm == min(latest).
type Aggregator struct {
	expected int
	latest   map[string]mtime.Time
	wm       mtime.Time
}

// NewAggregator returns an aggregator for an input fed by expected producers.
// expected must be at least 1.
func NewAggregator(expected int) (*Aggregator, error) {
	if expected < 1 {
		return nil, fmt.Errorf("watermark: aggregator needs at least one expected producer, got %d", expected)
	}
	return &Aggregator{
		expected: expected,
		latest:   make(map[string]mtime.Time, expected),
		wm:       mtime.MinTimestamp,
	}, nil
}

// Report records producer's output watermark wm and reports whether the
// aggregate watermark changed. A report lower than the producer's latest is
// stale and ignored. wm is clamped to [MinTimestamp, MaxTimestamp].
func (a *Aggregator) Report(producer string, wm mtime.Time) (changed bool) {
	wm = clamp(wm)
	prev, seen := a.latest[producer]
	if seen && wm <= prev {
		return false
	}
	a.latest[producer] = wm
	old := a.wm
	// compute is monotone while producers are the expected ones: every
	// latest[p] only grows. A producer beyond the expected count (a Plan
	// mismatch) that first reports below the aggregate would pull it back;
	// the max keeps the watermark from ever going backwards, at the price of
	// the aggregate exceeding that one producer's report.
	a.wm = max(old, a.compute())
	return a.wm != old
}

// ReportMillis is Report with the watermark given in milliseconds since the
// epoch, as carried by WATERMARK records.
func (a *Aggregator) ReportMillis(producer string, millis int64) (changed bool) {
	return a.Report(producer, mtime.Time(millis))
}

// Watermark returns the current input watermark.
func (a *Aggregator) Watermark() mtime.Time { return a.wm }

// Expected returns the number of producers the aggregator waits for.
func (a *Aggregator) Expected() int { return a.expected }

// Reported returns how many distinct producers have reported.
func (a *Aggregator) Reported() int { return len(a.latest) }

// Latest returns the latest report of producer, if it reported.
func (a *Aggregator) Latest(producer string) (mtime.Time, bool) {
	wm, ok := a.latest[producer]
	return wm, ok
}

func (a *Aggregator) compute() mtime.Time {
	if len(a.latest) < a.expected {
		return mtime.MinTimestamp
	}
	m := mtime.MaxTimestamp
	for _, wm := range a.latest {
		m = min(m, wm)
	}
	return m
}

// Output combines an input watermark with holds: the result is
// min(input, holds...). Holds at or beyond MaxTimestamp do not hold anything.
func Output(input mtime.Time, holds ...mtime.Time) mtime.Time {
	out := clamp(input)
	for _, h := range holds {
		out = min(out, clamp(h))
	}
	return out
}

// Min returns the minimum of several input watermarks (a task with several
// inputs), or MaxTimestamp for none.
func Min(wms ...mtime.Time) mtime.Time {
	out := mtime.MaxTimestamp
	for _, wm := range wms {
		out = min(out, clamp(wm))
	}
	return out
}

func clamp(t mtime.Time) mtime.Time {
	return min(max(t, mtime.MinTimestamp), mtime.MaxTimestamp)
}
