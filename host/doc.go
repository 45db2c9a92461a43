// Package host runs Plans on Kafka: the job service, instances (consumer-group
// members), tasks (one per assigned input partition), processors (impulse,
// group-by-key, stages, flattens, sinks), watermarks, state stores, the commit
// loop, metrics and the job lifecycle.
package host
