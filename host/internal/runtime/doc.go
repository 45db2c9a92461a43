// Package runtime runs a Plan as one member of the application's consumer
// group: it creates the internal topics, opens the Pebble store, restores
// assigned tasks from their changelogs, reads side inputs, and drives the
// commit loop (poll, hand records to tasks, close bundles, produce outputs,
// watermarks and changelogs, commit the Kafka transaction, then apply the
// state batches). It knows nothing of the Job API: the host facade calls Run
// and reports what it returns.
//
// A record's path: instance.run polls it (instance.go), instance.process
// hands it to the task of its partition (host/internal/task), the task
// routes it through its root and stages and produces outputs through the
// task.Env's producer, and instance.commit ends the cycle
// (commitTransaction or commitAtLeastOnce).
package runtime
