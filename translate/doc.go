// Package translate turns a Beam pipeline proto into a Plan: the pipeline laid
// out as Kafka sub-topologies joined by topics, with fused stages of user code
// and the executor that runs each stage.
//
// Translate works on a copy of the pipeline and is pure: no I/O, no
// goroutines, and the same input always gives the same Plan. In order:
//
//   - Walk: starting at the root transforms it descends into composites,
//     except Reshuffle/Redistribute (one leaf each, run by the host) and
//     liftable CombinePerKeys. Supported leaves are Impulse, ParDo,
//     GroupByKey, Flatten and WindowInto (plus the combine and SDF component
//     URNs this package itself emits). Any other leaf fails, naming the
//     transform and its URN. ParDos with time-sorted input, on-window-
//     expiration timers, or a splittable DoFn with side inputs, state or
//     stable input fail, naming the transform and the feature; so do unknown
//     or unsupported pipeline requirements. A ParDo requiring stable input
//     gets a Redistribute of its main input (stableInput), so that it reads
//     committed records.
//   - Expand: a CombinePerKey over non-merging windows is lifted into
//     precombine → GroupByKey on KV<K, Accum> → merge accumulators → extract
//     outputs; any other combine runs its own expansion. A splittable ParDo
//     becomes pair with restriction → split and size → a Redistribute of the
//     sized restrictions → process sized elements, which so heads a
//     sub-topology of its own and reads a source's splits in parallel. Replaced expansions are
//     removed from the pipeline and the original transform becomes the
//     composite of its replacement.
//   - Lay out: every Impulse, GroupByKey (lifted or not), Reshuffle and every
//     Flatten whose inputs come from several sub-topologies starts a
//     sub-topology reading its own topic ("impulse-<n>",
//     "<name>-repartition", "<name>-flatten", names sanitized injectively to
//     Kafka's characters). GroupByKeys must use the default trigger and
//     non-merging global or interval windows.
//   - Fuse: inside a sub-topology a transform joins the stage producing its
//     input when executor (WASM per Options.StageWASM, or harness) and
//     environment agree, else a sibling stage reading the same input, else
//     starts a stage. A flatten joins a stage holding all its inputs, else
//     runs as a runner-side Flatten.
//   - Coders: every PCollection crossing the host boundary gets a
//     windowed_value wire coder in which coders the host cannot parse are
//     length-prefixed (Plan.WireCoders); new coders go into the components.
//   - Descriptors: each stage gets a ProcessBundleDescriptor with a data
//     source and sinks using the wire coders and empty service descriptors.
package translate
