// Package translate turns a Beam pipeline proto into a Plan: the pipeline laid
// out as Kafka sub-topologies joined by topics, with fused stages of user code
// and the executor that runs each stage.
//
// It validates every transform URN (an unknown one fails the job at
// submission, naming transform and URN), applies runner-side expansions
// (Combine lifting), fuses ParDos greedily, length-prefixes coders the host
// cannot parse, and builds the Fn API ProcessBundleDescriptor of every harness
// stage. It is pure: no I/O, no goroutines.
package translate
