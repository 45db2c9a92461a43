// Package application keeps an application's job where every process of the
// application can find it, and decides what a process does with it.
//
// An application is one application_id: one consumer group, one set of
// internal topics, and any number of processes (the job server that received
// the pipeline, a restarted job server, `ksrunner worker`s) that each run the
// same translated job as one member of the group. The job lives on the
// application's pipeline topic (`__beam_<application_id>_pipeline`,
// compacted, one partition; DESIGN.md §3): a Spec (the pipeline, the raw and
// resolved options, the WASM modules and the environments' staged artifacts)
// encoded once and cut into pieces below Kafka's record limit, then a
// Manifest that names the pieces, the pipeline's fingerprint and the
// application's state (running, cancelled, done).
//
// What a process does with it:
//   - Publish (a job server's Run): a new application writes its Spec; the
//     same pipeline under a running application joins it; a different one is
//     refused while the application is live (running, and its consumer group
//     has members), naming the application id and the job that runs it.
//   - Load (a worker, a restarted job server): read the Manifest and the
//     pieces it names, checked against its checksum.
//   - Follow (a worker): watch the Manifest, starting the job when the
//     application runs and stopping it when it is cancelled, done or
//     replaced.
//   - SetState (the end of a job on purpose): record cancelled or done, so
//     that workers stop and a restarted job server does not resume it.
//   - Reset (`ksrunner reset`): delete an application's internal topics and
//     its group's offsets of them, keeping its Kafka reads' (reset.go).
//
// Invariants:
//   - Pieces are written before the Manifest that names them, on one
//     partition, by one producer: a reader that sees a Manifest sees its
//     pieces (unless a later Manifest replaced them; Load then fails and the
//     reader reads again).
//   - Pieces are keyed by the fingerprint and their index, the Manifest by a
//     fixed key: compaction keeps exactly the latest Manifest and the pieces
//     of every pipeline written, until a replacement tombstones the old
//     pieces.
//   - The fingerprint covers what decides the topology and the data on the
//     wire (transforms, PCollections, coders, windowing, and the job options
//     that shape topics), not where the submitting SDK happens to run (its
//     environments' addresses and staged file paths), so a resubmission of
//     the same program from another process joins rather than conflicts.
//   - The fingerprint covers the version of the layout rules the plan
//     depends on (Spec.Layout) only above the first, so that applications a
//     rule change does not touch keep their fingerprint across the upgrade;
//     the same pipeline at another layout is refused, never joined or
//     replaced (Topic.sameLayout), since the application's state and topics
//     belong to the other layout's sub-topologies.
package application
