package task

// Draining a job (DESIGN.md §5): once Env.Draining is set, every source
// stops where it is and the watermarks go to +inf, which fires every
// window and event-time timer downstream; the job is done (DRAINED) once
// every task reported +inf, as a bounded job is.
//
//   - A Kafka read emits no record it polls after the drain began: as a
//     bounded read past its end (kafkabound.go), the first such record's
//     offset becomes its partition's committed offset and the partition is
//     no longer fetched, so a later job under the same application id goes
//     on from exactly there; its watermark is +inf from the next commit.
//   - A splittable DoFn's residuals (self-checkpoints) are dropped rather
//     than processed again, those its bundles return and those stored for
//     a later cycle (residuals.go): the restriction is truncated to what
//     was done, as Beam's drain does for an unbounded restriction (ksrunner
//     does not call the SDK's TruncateRestriction, so a bounded one is cut
//     short too).
//   - Impulses have emitted their element (or will, once), and their
//     watermark is +inf then anyway. A TestStream is not drained.

// draining reports whether the job drains.
func (t *Task) draining() bool { return t.env.Draining != nil && t.env.Draining.Load() }
