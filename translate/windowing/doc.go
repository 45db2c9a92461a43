// Package windowing is the Beam windowing model for the host's GroupByKey
// processor: windows and their coders, the standard window fns (with session
// merging), a trigger state machine interpreter, pane bookkeeping, and a
// driver, Strategy, that ties them together. It knows nothing of Kafka or
// storage: every per key+window state is a value the host marshals to bytes
// and stores (in Pebble), passes back in, and replaces with what comes out.
//
// # Using the driver
//
// Build a Strategy from the GroupByKey input's pipepb.WindowingStrategy with
// NewStrategy. Errors wrapping ErrUnsupportedWindowFn, ErrUnsupportedTrigger,
// ErrUnsupportedWindowCoder or ErrUnsupportedStrategy mean the host cannot run
// the strategy itself (fall back to the SDK harness, or fail at submission).
//
// For each element (key, value, timestamp, windows):
//
//  1. for each window w: if Strategy.IsDroppable(w, inputWM), count the
//     element in dropped_late_elements and skip the window;
//  2. merging window fns (sessions): MergeWindows over the key's active
//     windows plus w; for each Merge, Strategy.Merge the sources' states
//     into the target, move their buffered values, delete their state and
//     timers; w becomes the window it merged into;
//  3. Strategy.OnElement(state, timestamp, Context{Window: w, ...}); unless
//     the result says Dropped, buffer the value; then apply the Result
//     (emit panes, clear, store state, set timers).
//
// When a window's event-time timer fires (input watermark > timer) or its
// processing-time timer fires (processing time >= timer), call
// Strategy.OnTimer and apply the Result the same way. Timers are idempotent:
// a spurious evaluation emits nothing.
//
// The host's output watermark is min(input watermark, OutputHold of every
// buffered window, ...) — see shuffle/watermark.
//
// # Model rules
//
// Triggers follow Beam Java's runners-core TriggerStateMachine semantics;
// panes follow PaneInfoTracker; emission, closing, on-time behaviour and
// garbage collection follow ReduceFnRunner; holds follow WatermarkHold
// (simplified to one hold per window). Each rule is cited next to its code.
// In particular a window whose trigger finished is closed: later elements
// for it are dropped (DroppedClosed) until it expires.
package windowing
