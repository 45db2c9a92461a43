package pythontest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startPythonJob runs py with args (args[0] the script), a Python pipeline
// that submits one job to the job server at endpoint and writes its id to
// jobIDFile, and waits for that id. It returns the id, a client of the job
// service and the script's exit (its output is logged if the test fails).
// The script is killed (SIGABRT, for its tracebacks) when ctx ends.
func startPythonJob(ctx context.Context, t *testing.T, endpoint, jobIDFile, py string, args ...string) (string, jobpb.JobServiceClient, <-chan error) {
	t.Helper()
	script := filepath.Base(args[0])
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = append(os.Environ(), "PYTHONFAULTHANDLER=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGABRT) }
	cmd.WaitDelay = 10 * time.Second
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s output:\n%s", script, log.String())
		}
	})
	var jobID string
	for jobID == "" {
		select {
		case err := <-exited:
			t.Fatalf("%s exited before submitting the job: %v", script, err)
		case <-ctx.Done():
			t.Fatalf("%s: no job submitted by the deadline", script)
		case <-time.After(200 * time.Millisecond):
		}
		if b, err := os.ReadFile(jobIDFile); err == nil {
			jobID = strings.TrimSpace(string(b))
		}
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return jobID, jobpb.NewJobServiceClient(conn), exited
}
