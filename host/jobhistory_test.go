package host_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/jobtest"
)

// TestJobHistory: a job server keeps the ended jobs job_history says (2
// here) and forgets the ones that ended first, so that one running jobs for
// months keeps its memory flat; it deletes a job's staged artifacts when the
// job ends, and those of a submission it refuses at once.
func TestJobHistory(t *testing.T) {
	// The job server stages artifacts in a directory of its own under
	// TMPDIR: this test's.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	opts := host.DefaultOptions()
	opts.BootstrapServers = broker.Bootstrap()
	e, err := jobtest.Start(opts, host.WithJobHistory(2))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := testContext(t, time.Minute)
	staged := func() []string {
		t.Helper()
		dirs, _ := filepath.Glob(filepath.Join(tmp, "ksrunner-artifacts-*", "*"))
		return dirs
	}
	listed := func() []string {
		t.Helper()
		resp, err := e.Client.GetJobs(ctx, &jobpb.GetJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range resp.GetJobInfo() {
			ids = append(ids, j.GetJobId())
		}
		return ids
	}
	// eventually polls cond: a job's end reaches its client a moment before
	// the server has released and forgotten it.
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within the test's time", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	var ids []string
	for range 4 {
		id, res := e.Run(ctx, t, e.Marshal(t, faultPipeline(t, "a", "b")), nil)
		if res.State != jobpb.JobState_DONE {
			t.Fatalf("job %s ended %v: %q", id, res.State, res.Errors)
		}
		ids = append(ids, id)
		eventually("the ended job's staged artifacts deleted", func() bool { return len(staged()) == 0 })
	}
	eventually("GetJobs listing the last 2 ended jobs only", func() bool { return slices.Equal(listed(), ids[2:]) })
	for _, id := range ids[:2] {
		if _, err := e.Client.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id}); status.Code(err) != codes.NotFound {
			t.Errorf("GetState of job %s, forgotten: %v, want NotFound", id, err)
		}
	}
	for _, id := range ids[2:] {
		st, err := e.Client.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id})
		if err != nil || st.GetState() != jobpb.JobState_DONE {
			t.Errorf("GetState of job %s, kept: %v, %v", id, st.GetState(), err)
		}
		if _, err := e.Client.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: id}); err != nil {
			t.Errorf("GetJobMetrics of job %s, kept: %v", id, err)
		}
	}

	// A submission refused at Run, after its artifacts were staged.
	if _, err := e.Submit(ctx, t, e.Marshal(t, faultPipeline(t, "a")), map[string]string{"commit_interval_ms": "-1"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a job with commit_interval_ms -1: %v, want InvalidArgument", err)
	}
	if dirs := staged(); len(dirs) != 0 {
		t.Errorf("a refused submission's staged artifacts are kept: %q", dirs)
	}
}

// TestJobHistoryRefusesNegative: a negative job_history is an error naming
// the option.
func TestJobHistoryRefusesNegative(t *testing.T) {
	_, err := host.NewJobServer("127.0.0.1:0", host.DefaultOptions(), nil, host.WithJobHistory(-1))
	if err == nil || !strings.Contains(err.Error(), "option job_history") {
		t.Fatalf("job_history -1: %v, want an error naming the option", err)
	}
}
