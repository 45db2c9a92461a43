// Package watermark aggregates the watermark reports of the producers that
// feed one input of a task (DESIGN.md §5).
//
// Every producer (a sub-topology id + partition upstream) writes WATERMARK
// records carrying its output watermark to every partition of every
// downstream topic. A task knows from the Plan how many producers feed each
// of its input topics; an [Aggregator] per input turns the reports into the
// input watermark:
//
//   - the input watermark is the minimum over the latest report of every
//     producer;
//   - it is held at [mtime.MinTimestamp] until every expected producer has
//     reported at least once;
//   - a report never moves its producer backwards: a stale lower report
//     (a replay, or one overtaken by a later record) is ignored.
//
// Hence the aggregate never decreases and never exceeds the latest report of
// any producer. The output watermark of a task is then
// min(input watermarks, holds) ([Output]), holds being buffered elements,
// panes not yet emitted, pending timers, in-flight bundles and source
// positions.
//
// Aggregator is a plain value without locking: a task owns its aggregators
// and calls them from its own goroutine.
package watermark
