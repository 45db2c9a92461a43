package host

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"

	"github.com/ksrunner/ksrunner/host/endpoint"
	"github.com/ksrunner/ksrunner/host/internal/status"
)

// StatusConfig is where and how a process serves its status page and
// /metrics (see WithStatus). The status endpoint is admitted like the job
// endpoint (WithEndpointSecurity): on loopback only, unless it has TLS and
// a bearer token, or insecure_bind.
type StatusConfig struct {
	// Addr is "host:port" (port 0 picks a free one).
	Addr string
	// Middleware, if set, wraps every handler of the status server, inside
	// the bearer token check.
	Middleware func(http.Handler) http.Handler
}

// WithStatus serves the status page, its JSON API and /metrics
// (Prometheus) on cfg.Addr: a JobServer from NewJobServer until Stop, a
// Worker from NewWorker until Run returns. Without it there is none.
func WithStatus(cfg StatusConfig) ServerOption {
	return func(c *serverConfig) { c.status = &cfg }
}

func startStatus(src status.Source, c *serverConfig, logger *slog.Logger) (*status.Server, error) {
	lis, guard, err := endpoint.Listen("status", c.status.Addr, c.endpoint, logger)
	if err != nil {
		return nil, err
	}
	mw := guard.HTTPHandler
	if inner := c.status.Middleware; inner != nil {
		mw = func(h http.Handler) http.Handler { return guard.HTTPHandler(inner(h)) }
	}
	return status.Start(src, status.Options{Listener: guard.HTTPListener(lis), HTTPS: guard.TLS(), Middleware: mw, Logger: logger})
}

// statusView is the job as the status page shows it.
// statusSummary is the job for a probe: nothing asked of Kafka.
func (j *job) statusSummary(process string) status.JobSummary {
	return status.JobSummary{ID: j.spec.ID, Name: j.spec.Name, State: j.State().String(), Drained: j.drained(),
		ApplicationID: j.spec.Options.ApplicationID, StartedAt: j.started, Process: process}
}

func (j *job) statusView(ctx context.Context, process string) *status.Job {
	local := j.observer.Snapshot()
	v := &status.Job{
		ID: j.spec.ID, Name: j.spec.Name, State: j.State().String(), ApplicationID: j.spec.Options.ApplicationID,
		StartedAt: j.started, Process: process, Instance: local.ID, Commits: local.Commits, Aborts: local.Aborts,
		LastCycleSeconds: local.LastCycle.Seconds(), CycleBound: local.CycleBound, FireBound: local.FireBound,
		CanCancel: !isClosed(j.done), Drained: j.drained(),
		Topology: status.TopologyOf(j.plan),
		Metrics:  status.UserMetrics(j.metrics.Attempted.Results(), j.metrics.Committed.Results()),
	}
	if process == "worker" {
		v.CanCancel = false
		v.CancelUnavailable = "cancel the job on its job server (the Job API's Cancel, or its status page): it stops every process of the application"
	} else if !v.CanCancel {
		v.CancelUnavailable = "the job has ended"
	}
	// The button offers what job.Drain accepts: a job server's job that has
	// not ended, once.
	switch {
	case process == "worker":
		v.DrainUnavailable = workerDrains
	case isTerminal(j.State()) || isClosed(j.done):
		v.DrainUnavailable = "the job has ended"
	case j.draining.Load():
		v.DrainUnavailable = "the job is draining"
	default:
		v.CanDrain = true
	}
	inputs, source := status.InputTopics(j.plan, j.spec.Options.ApplicationID)
	var cluster []status.Task
	if c, err := j.clusterView(); err != nil {
		v.ClusterError = err.Error()
	} else if c != nil {
		var err error
		if cluster, err = c.Tasks(ctx); err != nil {
			v.ClusterError = err.Error()
		}
	}
	v.Tasks = status.MergeTasks(cluster, local, inputs, source)
	for _, e := range j.events.snapshot() {
		m := status.Message{Time: e.at, Importance: importanceName(e.importance), Text: e.text}
		if e.state != jobpb.JobState_UNSPECIFIED {
			m.Importance, m.Text = "STATE", "job "+e.state.String()
		}
		v.Messages = append(v.Messages, m)
	}
	return v
}

func importanceName(i jobpb.JobMessage_MessageImportance) string {
	switch i {
	case jobpb.JobMessage_JOB_MESSAGE_ERROR:
		return "ERROR"
	case jobpb.JobMessage_JOB_MESSAGE_WARNING:
		return "WARNING"
	case jobpb.JobMessage_JOB_MESSAGE_DEBUG, jobpb.JobMessage_JOB_MESSAGE_DETAILED:
		return "DETAILED"
	}
	return "INFO"
}

// clusterView is the job's application as Kafka shows it, made on first
// use; nil once the job has ended (closeCluster).
func (j *job) clusterView() (*status.Cluster, error) {
	j.clusterMu.Lock()
	defer j.clusterMu.Unlock()
	if j.clusterClosed {
		return nil, nil
	}
	if j.cluster == nil {
		inputs, source := status.InputTopics(j.plan, j.spec.Options.ApplicationID)
		c, err := status.NewCluster(status.ClusterConfig{BootstrapServers: j.spec.Options.BootstrapServers, Security: j.security,
			ApplicationID: j.spec.Options.ApplicationID, Inputs: inputs, Source: source})
		if err != nil {
			return nil, err
		}
		j.cluster = c
	}
	return j.cluster, nil
}

// closeCluster closes the job's cluster view for good.
func (j *job) closeCluster() {
	j.clusterMu.Lock()
	defer j.clusterMu.Unlock()
	j.clusterClosed = true
	if j.cluster != nil {
		j.cluster.Close()
		j.cluster = nil
	}
}

// serverStatus is a JobServer as the status page's Source.
type serverStatus struct{ s *JobServer }

// inOrder is the server's jobs, oldest first, as of now.
func (v serverStatus) inOrder() []*job {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	jobs := make([]*job, 0, len(v.s.order))
	for _, id := range v.s.order {
		jobs = append(jobs, v.s.jobs[id])
	}
	return jobs
}

func (v serverStatus) Jobs(ctx context.Context) []*status.Job {
	jobs := v.inOrder()
	out := make([]*status.Job, len(jobs))
	for i, j := range jobs {
		out[i] = j.statusView(ctx, "jobserver")
	}
	return out
}

func (v serverStatus) Summaries() []status.JobSummary {
	jobs := v.inOrder()
	out := make([]status.JobSummary, len(jobs))
	for i, j := range jobs {
		out[i] = j.statusSummary("jobserver")
	}
	return out
}

func (v serverStatus) Cancel(id string) error {
	j, err := v.s.job(id)
	if err != nil {
		return fmt.Errorf("cancel %q: %w", id, status.ErrNotFound)
	}
	j.Cancel()
	return nil
}

func (v serverStatus) Drain(id string) error {
	j, err := v.s.job(id)
	if err != nil {
		return fmt.Errorf("drain %q: %w", id, status.ErrNotFound)
	}
	if !j.Drain() {
		return fmt.Errorf("drain %q: the job has ended (%s): %w", id, j.State(), status.ErrConflict)
	}
	return nil
}

// workerStatus is a Worker as the status page's Source: its current job.
type workerStatus struct{ w *Worker }

func (v workerStatus) Jobs(ctx context.Context) []*status.Job {
	j := v.w.current()
	if j == nil {
		return nil
	}
	return []*status.Job{j.statusView(ctx, "worker")}
}

func (v workerStatus) Summaries() []status.JobSummary {
	j := v.w.current()
	if j == nil {
		return nil
	}
	return []status.JobSummary{j.statusSummary("worker")}
}

func (v workerStatus) Cancel(id string) error {
	return fmt.Errorf("cancel %q: a worker does not cancel jobs: cancel it on its job server: %w", id, status.ErrUnsupported)
}

// workerDrains is why a worker's page has no Drain.
const workerDrains = "drain the job on its job server (the Job API's Drain, `ksrunner drain` or its status page): the worker then stops and hands its tasks to the draining job server"

func (v workerStatus) Drain(id string) error {
	return fmt.Errorf("drain %q: a worker does not drain jobs: %s: %w", id, workerDrains, status.ErrUnsupported)
}
