// Package status serves a process's status page and its /metrics: an HTTP
// server the job server (status_port) and `ksrunner worker` own and stop.
//
// It renders what a Source gives it: the jobs of the process, each with its
// state, messages, topology (TopologyOf, from the translated Plan), user
// metrics (attempted and committed, from the job's MonitoringInfos) and its
// tasks. A task's figures come from two places:
//   - this process's instance (metrics.Instance, written by the runtime's
//     loop): records in and out, output watermark, input lag, state size,
//     restores, and the instance's commits and aborts;
//   - the application as Kafka sees it (Cluster): the consumer group says
//     which instance owns each task, its committed offsets and the end
//     offsets give every task's lag and input rate, and the status topic
//     each task's last reported watermark — for the tasks of every process
//     of the application, not only this one's.
//
// /metrics is Prometheus' text format from a registry of the server's own
// (never the global one). The page is static HTML and JavaScript embedded
// with go:embed (no build step) that polls the JSON API (/api/jobs,
// /api/jobs/{id}) and draws the topology with the vendored cytoscape.js and
// cytoscape-dagre (assets/vendor/README.md). Cancel and Drain are POSTs to
// /api/jobs/{id}/cancel and /drain.
//
// Options.Middleware wraps every handler and Options.TLS serves HTTPS: the
// seams for authentication and transport security.
package status
