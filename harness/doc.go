// Package harness is the runner side of the Beam Fn API and the environments
// that start SDK harnesses.
//
// A [Harness] belongs to one job. [Start] opens one gRPC server on a free
// loopback port that serves every Fn API service an SDK worker talks to:
// control, data, state, logging, provision and artifact retrieval. Workers
// identify themselves on every call with the gRPC metadata key "worker_id",
// which is how the one server multiplexes many workers.
//
// The package owns:
//
//   - environments: [Harness.StartEnvironment] starts one SDK worker per
//     environment id (beam:env:external:v1 through a BeamFnExternalWorkerPool,
//     which is what LOOPBACK uses; beam:env:process:v1 by running the boot
//     command; beam:env:anyof:v1 by choosing one of those) and waits until
//     it connects its control stream. Docker is not available here.
//   - stages: [Harness.Stage] registers a ProcessBundleDescriptor with the
//     environment's worker after pointing its data ports and state API at
//     this server.
//   - bundles: [Stage.StartBundle], [Bundle.Process] (or
//     [Bundle.ProcessElements]) and [Bundle.Finish] stream encoded windowed
//     values to the SDK in large batches, hand the SDK's outputs to the host
//     as they arrive, and collect residuals and monitoring infos. Many
//     bundles of many stages share one worker; the data stream is
//     multiplexed by instruction id and transform id. SDKs decode every data
//     message on its own, so input is only ever split between elements.
//   - timers: a stage with stateful ParDos that use timers lists their timer
//     families with [WithTimerFamilies]. Timers the SDK sets reach the host
//     through [WithTimerOutput] as encoded timers per family; the host fires
//     them later with [Bundle.ProcessTimers], which sends them as
//     Elements.Timers in order with the input. Finish ends the input and
//     the timer stream of every family in one message (SDKs wait for every
//     family's end, even with no timers sent) and waits for the end of
//     every family's timer output as well as of every data output.
//   - state: every state request of a bundle goes to a [StateHandler]; the
//     host implements it against its stores ([SideInputs] is an in-memory
//     one for iterable side inputs). Without one, requests fail with an
//     error naming the state key type.
//
// The package knows nothing about Kafka, coders or windowing: elements cross
// it as opaque bytes in Beam's windowed-value encoding.
//
// Lifetimes: every goroutine the package starts is owned by the [Harness] and
// has exited when [Harness.Close] returns. A worker whose control or data
// stream breaks, or whose process exits, is lost: its in-flight bundles fail
// with an error saying so, and a later StartEnvironment for the same
// environment id starts a replacement.
package harness
