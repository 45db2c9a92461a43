package eostest

import (
	"bytes"
	"context"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// runDone runs pipe as an application of its own on the test broker, with a
// state_dir of its own and opts besides, and fails the test unless the job
// ends DONE. It returns the job id.
func runDone(t *testing.T, pipe *pipepb.Pipeline, opts map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	all := map[string]string{
		"bootstrap_servers": kafkatest.Broker(t),
		"application_id":    kafkatest.UniqueName(t, "app"),
		"state_dir":         filepath.Join(t.TempDir(), "state"),
	}
	maps.Copy(all, opts)
	id, r := env.Run(ctx, t, pipe, all)
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	return id
}

// jobCounters returns the committed and the attempted sum_int64 counters of
// job id, by "namespace/name" (summed over transforms).
func jobCounters(t *testing.T, id string) (committed, attempted map[string]int64) {
	t.Helper()
	mr, err := env.Client.GetJobMetrics(context.Background(), &jobpb.GetJobMetricsRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	sums := func(infos []*pipepb.MonitoringInfo) map[string]int64 {
		out := map[string]int64{}
		for _, m := range infos {
			if m.GetUrn() != "beam:metric:user:sum_int64:v1" {
				continue
			}
			v, err := coder.DecodeVarInt(bytes.NewReader(m.GetPayload()))
			if err != nil {
				t.Fatalf("counter %v: %v", m.GetLabels(), err)
			}
			out[m.GetLabels()["NAMESPACE"]+"/"+m.GetLabels()["NAME"]] += v
		}
		return out
	}
	return sums(mr.GetMetrics().GetCommitted()), sums(mr.GetMetrics().GetAttempted())
}
