// Package translate turns a Beam pipeline proto into a Plan: the pipeline laid
// out as Kafka sub-topologies joined by topics, with fused stages of user code
// and the executor that runs each stage.
//
// Translate works on a copy of the pipeline and is pure: no I/O, no
// goroutines, and the same input always gives the same Plan. In order:
//
//   - Walk: starting at the root transforms it descends into composites,
//     except Reshuffle/Redistribute (one leaf each, run by the host) and
//     liftable CombinePerKeys. Supported leaves are Impulse, TestStream (one
//     per pipeline, events inline), ParDo, GroupByKey, Flatten and
//     WindowInto (plus the combine and SDF component URNs this package
//     itself emits), and ksrunner's Kafka read and write primitives
//     (kafka.go, laid out by kafkaio.go: a read of several topics, with
//     metadata, bounded or from a start time, a write with headers or a
//     transactional.id, and key or value coders that do not encode the
//     formats fail, naming the transform). Any other leaf fails, naming the transform and its URN,
//     and so does a Flatten of no inputs.
//     A ParDo fails, naming the transform and the feature, when it has a
//     side input whose access pattern is neither iterable nor multimap, a
//     timer family in a time domain other than event or processing time, an
//     on-window-expiration timer, user state or timers on a non-KV input,
//     or requires time-sorted input without user state or timers, with side
//     inputs, or while splittable; a splittable DoFn fails with user state
//     or timers, or stable input. So do an on-window-expiration
//     or unknown pipeline requirement, a second TestStream and a TestStream
//     reading its events from an endpoint. A ParDo requiring stable input
//     gets a Redistribute of its main input (stableInput), so that it reads
//     committed records; a stateful ParDo or one with side inputs reads its
//     own topic already.
//   - Expand: a CombinePerKey over non-merging windows with END_OF_WINDOW
//     output times and a trigger that counts no elements (liftableStrategy)
//     is lifted into precombine → GroupByKey on KV<K, Accum> → merge
//     accumulators → extract outputs; any other combine runs its own
//     expansion. A splittable ParDo becomes pair with restriction → split
//     and size → a Redistribute of the sized restrictions → process sized
//     elements, which so heads a sub-topology of its own and reads a
//     source's splits in parallel. Each part keeps the ParDo's side inputs
//     (the SDKs build every part from its payload); only pair with
//     restriction gets a materialized main input to wait on them, as the
//     others read what it made. Replaced expansions are removed from the
//     pipeline and the original transform becomes the composite of its
//     replacement. A Flatten or Redistribute input (or a TestStream
//     output) whose coder differs from the output's (the events') gets a
//     one-input Flatten run in an SDK to re-encode it (transcodeFlattens);
//     with no SDK environment to run it in, it fails.
//   - Lay out: every Kafka read (its user topic, TopicKafka, unprefixed;
//     the plan is then unbounded), Impulse and TestStream ("impulse-<n>",
//     "teststream-<n>"), GroupByKey, lifted or not ("<name>-repartition"),
//     Reshuffle ("<name>-repartition"), stateful ParDo or ParDo with side
//     inputs ("<name>-main", its side inputs written to "<pcollection>-side"
//     topics read whole by every instance; but a ParDo with side inputs or
//     state that is the only reader of a fast-path GroupByKey's output
//     stays there, and the root waits for its side inputs:
//     Root.SideInputTopics) and every Flatten
//     whose inputs come from several sub-topologies ("<name>-flatten")
//     starts a sub-topology reading its own topic, names sanitized injectively to
//     Kafka's characters. A GroupByKey runs any windowing strategy that
//     translate/windowing compiles: triggers, allowed lateness, merging windows
//     and custom WindowFns (a custom merging one gets a merge stage in the
//     SDK environment its strategy names); it fails, naming the transform,
//     on a window coder other than the global or interval window's, a
//     trigger or window fn that package cannot compile (unknown or
//     malformed), RETRACTING accumulation or an unknown output time, a
//     custom merging WindowFn whose strategy names no defined environment,
//     or input and output coders that are not KV<K, V> and
//     KV<K, Iterable<V>>. A Kafka write is a Sink of its input (with
//     Sink.KafkaWrite), not a topic of the plan.
//   - Fuse: inside a sub-topology a transform joins the stage producing its
//     input when executor (WASM per Options.StageWASM, or harness) and
//     environment agree, else a sibling stage reading the same input, else
//     starts a stage. A flatten joins a stage holding all its inputs, else
//     runs as a runner-side Flatten. A stage fails when the environment of
//     its transforms is undefined, or unknown while several are defined.
//   - Coders: every PCollection crossing the host boundary gets a
//     windowed_value wire coder in which coders the host cannot parse are
//     length-prefixed (Plan.WireCoders); new coders go into the components.
//     A PCollection crossing the boundary in windows other than global or
//     interval windows fails.
//   - Descriptors: each stage gets a ProcessBundleDescriptor with a data
//     source and sinks using the wire coders and empty service descriptors.
package translate
