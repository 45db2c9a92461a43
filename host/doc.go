// Package host runs Beam pipelines on Kafka. It is the public facade: the
// JobServer (Beam's Job API and artifact staging), Options (the job-scoped
// settings and how pipeline options override them), the embedded broker, and
// the job lifecycle. Everything that runs a job lives below it, in
// host/internal, and imports nothing of this package.
//
// # A job's life
//
// Prepare stages the pipeline and its artifacts; Run resolves the options
// (server defaults < the job's pipeline options), then startJob translates
// the pipeline (translate.Translate: every unsupported construct fails here,
// at submission, naming the transform), compiles and checks the WASM
// modules of option stage_wasm, and starts the job's goroutine. The job is
// STARTING while executor.Start starts the SDK harness environments and
// registers the harness stages; runtime.Run then creates the internal
// topics, opens the store and joins the application's consumer group
// (RUNNING). The job is DONE when every task has reported the maximum
// watermark on the status topic, CANCELLED on Cancel, FAILED when the
// instance or a stage fails. Stop refuses further Runs, cancels every job
// and waits for them. The cause of the cancellation tells the runtime
// whether the job ends on purpose (Cancel, or DONE: the instance leaves
// its consumer group, a static member too) or the server stops for a
// restart (Stop: a static member keeps its membership).
//
// # Packages
//
//   - host/internal/runtime: the instance (one consumer-group member), the
//     commit loop, changelog restore, standby replicas, the side-input
//     reader, the purge of shuffle topics, the start offsets of Kafka
//     reads, and Run.
//   - host/internal/task: a task (one sub-topology, one input partition)
//     and its roots, one type per root kind behind one interface (impulse,
//     passthrough, group-by-key fast path, windowed group-by-key, TestStream,
//     Kafka source, with its bounds and bad-record policy), the Kafka sink,
//     the side-input gate and time-sorted input, event time, user timers,
//     and the changelog producer. A task reaches the rest of the instance
//     only through task.Env.
//   - host/internal/state: the store layout: the one registry of store-key
//     kinds, key encodings, user state and timers, side-input reads.
//   - host/internal/executor: the executor seam between tasks and user code,
//     the Fn API harness and WASM wiring; the stuck-bundle policy is passed
//     in (WithStuckBundlePolicy).
//   - host/internal/topics: a Plan's topic layout (internal topics, and the
//     user's topics of Kafka reads and writes, discovered at Run), creation,
//     impulses and deletion.
//   - host/internal/expansion: Beam's ExpansionService for KafkaIO, expanding
//     the SDKs' KafkaIO transforms into translate's Kafka primitives;
//     host/kafkaio (public) serves it and registers it in-process for Go.
//   - host/internal/kafkaio: the conversion between user records and
//     elements: the Kafka formats in the SDKs' coders, the with-metadata
//     record row, the write-with-headers row and the schema transforms'
//     payload rows.
//   - host/internal/metrics: attempted and committed metrics, and an
//     instance's live per-task figures.
//   - host/internal/status: the status page and /metrics (WithStatus).
//
// A record's path from poll to commit: runtime/instance.go (run, process)
// → task/task.go (Handle, route, flushStages; task/pack.go unpacks
// DATA_PACKED records) → task/root.go (the root of its kind) → executor
// (the stage's bundle) → task/task.go (emit, sinkTo, through
// task.Env.Produce, or into a pack, task/pack.go) → runtime/instance.go
// (commit: commitTransaction or commitAtLeastOnce) → task/task.go
// (CommitState, Finalize).
//
// # Invariants, and where they are written
//
//   - The commit cycle (what a transaction holds, when state is applied):
//     commitTransaction in runtime/instance.go; the at_least_once order in
//     commitAtLeastOnce.
//   - The changelog (one writer per partition, the stored position, replay):
//     task/changelog.go; restore in runtime/changelog.go; standby copies
//     (one writer per task key range: the task or the standby) in
//     runtime/standby.go.
//   - A task's concurrency (who calls what, what mu guards) and output
//     before its watermark report: Task in task/task.go; packs produced
//     within their cycle, before the report: packs in task/pack.go.
//   - Store keys never collide: state/keys.go, checked by its tests.
//   - The Plan's guarantees the host relies on: translate/plan.go.
//   - Watermark aggregation: shuffle/watermark/watermark.go.
//   - Window state and holds: translate/windowing/strategy.go.
//   - Shuffle topics are purged only below committed offsets:
//     runtime/purge.go.
//   - What a client may make the runner do (endpoints on loopback or
//     behind TLS and a token; PROCESS environments; a job's brokers; only
//     a job's own staged artifacts served): host/endpoint, security.go,
//     harness/artifacts.go. Every Kafka client starts from
//     kafkaconn.Opts (internal/kafkaconn).
//
// Test hooks (TestHooks, WithTestHooks) are options of a server, never
// process-wide.
package host
