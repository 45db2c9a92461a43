package host

import (
	"github.com/ksrunner/ksrunner/host/endpoint"
	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/runtime"
)

// A ServerOption configures a JobServer (or a Worker) beyond the job
// defaults (Options).
type ServerOption func(*serverConfig)

type serverConfig struct {
	onStuckBundle func(msg string)
	hooks         *runtime.Hooks
	// stageDir holds the artifacts staged for the jobs (a worker's: those
	// read from pipeline topics).
	stageDir string
	// status: serve the status page and /metrics (WithStatus); nil: none.
	status *StatusConfig
	// messagesOnly: lines sent as job messages are not logged too
	// (WithMessagesOnly).
	messagesOnly bool

	// endpoint admits the Job API's clients (WithEndpointSecurity).
	endpoint endpoint.Security
	// kafkaConfig is the runner's own Kafka security (WithKafkaSecurity);
	// kafka is it loaded (nil: PLAINTEXT).
	kafkaConfig KafkaSecurity
	kafka       *kafkaconn.Security
	// allowProcess says whether jobs may use PROCESS environments; nil:
	// a job server allows them when it listens on loopback only, a worker
	// always.
	allowProcess *bool
	// allowedBootstrap limits a job's bootstrap_servers
	// (WithAllowedBootstrapServers).
	allowedBootstrap []string
	// loopback: the job server listens on loopback only.
	loopback bool
	// leaveOnStop: the process's jobs leave their consumer groups when it
	// stops (WithLeaveGroupOnStop).
	leaveOnStop bool
	// jobHistory is how many ended jobs a job server keeps
	// (WithJobHistory); 0: DefaultJobHistory.
	jobHistory int
}

// DefaultJobHistory is how many ended jobs a job server keeps unless
// WithJobHistory says otherwise: as many as Beam's Java job server keeps
// (its --history-size).
const DefaultJobHistory = 10

// WithJobHistory sets how many ended jobs the job server keeps for the Job
// API (state, messages, metrics, pipeline) and the status page (0:
// DefaultJobHistory). When one more job ends, the one that ended
// first is forgotten (the Job API answers NOT_FOUND for its id), so a job
// server that runs jobs for months keeps its memory flat. A running job is
// always kept. A job's staged artifacts are deleted when it ends, whatever
// n is.
func WithJobHistory(n int) ServerOption {
	return func(c *serverConfig) { c.jobHistory = n }
}

// WithStuckBundlePolicy sets what happens when a bundle of a
// non-interruptible WASM guest is still running at wasm_bundle_deadline.
// Nothing can stop such a guest in-process. By default the job is marked
// FAILED with a message naming the stage and module, and the task stays
// blocked in the guest until the process exits. `ksrunner jobserver` passes
// a policy that exits the process, so that Kafka moves the task's partitions
// to another instance and aborts its open transaction.
func WithStuckBundlePolicy(f func(msg string)) ServerOption {
	return func(c *serverConfig) { c.onStuckBundle = f }
}

// WithTestHooks installs fault-injection and observation hooks in every job
// the server runs (see TestHooks).
func WithTestHooks(h TestHooks) ServerOption {
	return func(c *serverConfig) { c.hooks = &h }
}

// WithMessagesOnly makes the server's jobs send what they tell their
// clients (job messages, SDK lines of bundles, warnings and errors) only to
// the message stream, not also to the server's log: for a job server whose
// one client shows the message stream on the terminal the log goes to (the
// in-process server of host/kafkastreams), so that each line shows once.
func WithMessagesOnly() ServerOption {
	return func(c *serverConfig) { c.messagesOnly = true }
}

// WithEndpointSecurity sets how the job server's endpoint (the Job API and
// artifact staging) admits clients: TLS, mutual TLS, a bearer token. A job
// server without it listens on loopback only (see endpoint.Listen).
func WithEndpointSecurity(s endpoint.Security) ServerOption {
	return func(c *serverConfig) { c.endpoint = s }
}

// KafkaSecurity is how the runner's own Kafka clients connect: the options
// security_protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL),
// sasl_mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), sasl_username,
// sasl_password_file, ssl_ca_file, ssl_cert_file and ssl_key_file (PEM).
// They apply to every client of every job (pipeline topic, internal
// topics, Kafka reads and writes), except on the embedded broker.
type KafkaSecurity = kafkaconn.Config

// WithKafkaSecurity sets how the runner's Kafka clients connect and
// authenticate. NewJobServer and NewWorker read its files.
func WithKafkaSecurity(s KafkaSecurity) ServerOption {
	return func(c *serverConfig) { c.kafkaConfig = s }
}

// WithProcessEnvironments allows or refuses jobs whose stages run in
// PROCESS environments (a command the pipeline names, run by the runner).
// Without it a job server allows them only when it listens on loopback
// only; a worker allows them.
func WithProcessEnvironments(allow bool) ServerOption {
	return func(c *serverConfig) { c.allowProcess = &allow }
}

// WithAllowedBootstrapServers limits the brokers a job's bootstrap_servers
// pipeline option may name: each address must match an entry (HOST:PORT,
// "*" globs as in path.Match, or "embedded"). The job server's own
// bootstrap_servers are always allowed. Without it, a job server on
// loopback without Kafka credentials allows any brokers, and any other
// allows only its own.
func WithAllowedBootstrapServers(entries []string) ServerOption {
	return func(c *serverConfig) { c.allowedBootstrap = entries }
}

// WithLeaveGroupOnStop makes the process leave its applications' consumer
// groups when it stops (JobServer.Stop, a worker's Run ending), so that
// the other processes take its tasks at once: for a process stopped for
// good, as when an application is scaled down. Without it a process with a
// state_dir keeps its static membership for its restart, which takes its
// tasks back without a rebalance, and the others wait up to
// session_timeout_ms for them. (A process without a state_dir always
// leaves: its restart is another member.)
func WithLeaveGroupOnStop(leave bool) ServerOption {
	return func(c *serverConfig) { c.leaveOnStop = leave }
}

// processAllowed says whether jobs may use PROCESS environments.
func (c *serverConfig) processAllowed(def bool) bool {
	if c.allowProcess != nil {
		return *c.allowProcess
	}
	return def
}
