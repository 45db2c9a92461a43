package host

import (
	"context"
	"errors"
	"fmt"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrNoSuchJob: CancelNamed found no job of that name.
var ErrNoSuchJob = errors.New("no job of that name")

// CancelNamed cancels the job named name (the last of that name GetJobs
// lists) on the job server at endpoint through the Job API, and returns
// its id. It is for a program that runs its pipeline's Run in a goroutine
// (so has no job id) and stops it (the benchmarks, examples/streaming);
// the caller then waits for its Run to return.
func CancelNamed(ctx context.Context, endpoint, name string) (string, error) {
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("cancel job %s: job server %s: %w", name, endpoint, err)
	}
	defer cc.Close()
	js := jobpb.NewJobServiceClient(cc)
	jobs, err := js.GetJobs(ctx, &jobpb.GetJobsRequest{})
	if err != nil {
		return "", fmt.Errorf("listing jobs to cancel %s: %w", name, err)
	}
	id := ""
	for _, j := range jobs.GetJobInfo() {
		if j.GetJobName() == name {
			id = j.GetJobId()
		}
	}
	if id == "" {
		return "", fmt.Errorf("job %s on %s: %w", name, endpoint, ErrNoSuchJob)
	}
	if _, err := js.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		return id, fmt.Errorf("cancelling job %s: %w", id, err)
	}
	return id, nil
}
