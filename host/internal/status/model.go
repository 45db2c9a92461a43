package status

import (
	"context"
	"errors"
	"time"
)

// Source is what the server shows: the jobs of one process.
type Source interface {
	// Jobs are the process's jobs, newest last, as of now.
	Jobs(ctx context.Context) []*Job
	// Summaries are the jobs without what Jobs asks Kafka for: cheap
	// enough for a probe's every call.
	Summaries() []JobSummary
	// Cancel cancels a job; ErrNotFound for an unknown id.
	Cancel(id string) error
	// Drain drains a job; ErrNotFound for an unknown id, ErrConflict for a
	// job that has ended, or an error wrapping ErrUnsupported when this
	// process cannot.
	Drain(id string) error
}

var (
	// ErrNotFound: no job of that id.
	ErrNotFound = errors.New("no such job")
	// ErrUnsupported: the process cannot do what was asked (its message
	// says why).
	ErrUnsupported = errors.New("not supported")
	// ErrConflict: the job's state does not allow it (it has ended).
	ErrConflict = errors.New("not possible in the job's state")
)

// Job is one job as the page and /metrics show it.
type Job struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"`
	// Drained: the job ended DONE because it was drained (the Job API says
	// DONE, which every SDK client takes as success; see host.job.Drain).
	Drained       bool      `json:"drained,omitempty"`
	ApplicationID string    `json:"application_id"`
	StartedAt     time.Time `json:"started_at"`
	// Process is "jobserver" or "worker"; Instance this process's instance
	// id in the application ("" before its instance started).
	Process  string `json:"process"`
	Instance string `json:"instance"`
	// Commits and Aborts count this instance's commit cycles.
	Commits int64 `json:"commits"`
	Aborts  int64 `json:"aborts"`
	// LastCycleSeconds is how long this instance's last committed cycle
	// took; CycleBound and FireBound the elements its next cycle takes and
	// the stored groups a task fires in it at most, which it lowers when
	// cycles run long (a slow DoFn); 0: no cycle committed yet.
	LastCycleSeconds float64 `json:"last_cycle_seconds,omitempty"`
	CycleBound       int64   `json:"cycle_bound,omitempty"`
	FireBound        int64   `json:"fire_bound,omitempty"`
	// Cancel and Drain are what the buttons do; when not possible, the
	// reason says why (the page shows the button disabled with it).
	CanCancel         bool      `json:"can_cancel"`
	CancelUnavailable string    `json:"cancel_unavailable,omitempty"`
	CanDrain          bool      `json:"can_drain"`
	DrainUnavailable  string    `json:"drain_unavailable,omitempty"`
	Topology          *Topology `json:"topology,omitempty"`
	Tasks             []Task    `json:"tasks"`
	// ClusterError says why the application's view from Kafka (owners,
	// committed lag, other instances' watermarks) is missing, if it is.
	ClusterError string       `json:"cluster_error,omitempty"`
	Metrics      []UserMetric `json:"metrics"`
	Messages     []Message    `json:"messages"`
}

// Task is one task (a sub-topology on one partition of its input topic)
// of the application, whichever process runs it.
type Task struct {
	SubTopology int    `json:"sub_topology"`
	Partition   int32  `json:"partition"`
	Topic       string `json:"topic"`
	// Source: the input is a user's topic (a Kafka read), whose lag is the
	// source consumer lag.
	Source bool `json:"source"`
	// Owner is the instance id of the process that runs it ("" while the
	// group rebalances or if unknown); Local says it is this process.
	Owner string `json:"owner"`
	Local bool   `json:"local"`
	// Watermark is the task's last reported output watermark (Unix ms),
	// valid when HasWatermark.
	Watermark    int64 `json:"watermark"`
	HasWatermark bool  `json:"has_watermark"`
	// Committed is the group's committed offset on the input partition,
	// End its end offset and Lag their difference (-1 unknown).
	Committed int64 `json:"committed"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
	// RatePerSec is the committed input offsets per second since the
	// previous look (records plus transaction markers); -1 unknown.
	RatePerSec float64 `json:"rate_per_sec"`
	// Local figures (this process's instance), nil for others' tasks.
	Instance *InstanceTask `json:"instance,omitempty"`
}

// InstanceTask are a task's figures in this process's instance.
type InstanceTask struct {
	Owned           bool  `json:"owned"`
	RecordsIn       int64 `json:"records_in"`
	RecordsOut      int64 `json:"records_out"`
	Lag             int64 `json:"lag"`
	StateBytes      int64 `json:"state_bytes"`
	Restores        int64 `json:"restores"`
	RestoredRecords int64 `json:"restored_records"`
}

// Message is a job message or state change.
type Message struct {
	Time       time.Time `json:"time"`
	Importance string    `json:"importance"`
	Text       string    `json:"text"`
}

// JobSummary is a job in the list of jobs.
type JobSummary struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	State         string    `json:"state"`
	Drained       bool      `json:"drained,omitempty"`
	ApplicationID string    `json:"application_id"`
	StartedAt     time.Time `json:"started_at"`
	Process       string    `json:"process"`
}

func (j *Job) summary() JobSummary {
	return JobSummary{ID: j.ID, Name: j.Name, State: j.State, Drained: j.Drained, ApplicationID: j.ApplicationID, StartedAt: j.StartedAt, Process: j.Process}
}
