package pythontest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
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
	log := &testkit.SyncBuffer{}
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
			// A job that fails at once can end the script before this
			// loop's next look at the file: the file decides.
			if _, rerr := os.Stat(jobIDFile); rerr != nil {
				t.Fatalf("%s exited before submitting the job: %v", script, err)
			}
			exited <- err // the caller's to read
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

// kafkaEnv is what a Python KafkaIO test runs against: the test broker, a
// job server with default options and ksrunner's expansion service.
type kafkaEnv struct{ py, bootstrap, endpoint, expansion string }

// newKafkaEnv starts a KafkaIO test's servers (skipping without Python)
// and returns them with a context the test has four minutes in.
func newKafkaEnv(t *testing.T) (context.Context, kafkaEnv) {
	t.Helper()
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	bootstrap := kafkatest.Broker(t)
	return ctx, kafkaEnv{py: py, bootstrap: bootstrap, endpoint: startJobServer(t, host.DefaultOptions()), expansion: startExpansionServer(t)}
}

// portableArgs are the options of a streaming Python pipeline run by the
// portable runner on e's job server, in application appID.
func (e kafkaEnv) portableArgs(appID string) []string {
	return []string{"--runner=PortableRunner", "--job_endpoint=" + e.endpoint, "--environment_type=LOOPBACK", "--streaming",
		"--application_id=" + appID, "--bootstrap_servers=" + e.bootstrap}
}

// pyJob is an unbounded Python job a test ends (end).
type pyJob struct {
	id, script string
	jobs       jobpb.JobServiceClient
	exited     <-chan error
}

// startKafkaScript runs testdata/script JOBID_FILE in out bootstrap
// expansion args... with e.portableArgs (and extra options) and waits for
// its job; the job is cancelled when the test ends unless it ended.
func (e kafkaEnv) startKafkaScript(ctx context.Context, t *testing.T, script, in, out, appID string, args []string, extra ...string) *pyJob {
	t.Helper()
	jobIDFile := filepath.Join(t.TempDir(), "jobid")
	argv := append([]string{filepath.Join("testdata", script), jobIDFile, in, out, e.bootstrap, e.expansion}, args...)
	argv = append(append(argv, e.portableArgs(appID)...), extra...)
	id, jobs, exited := startPythonJob(ctx, t, e.endpoint, jobIDFile, e.py, argv...)
	t.Cleanup(func() { jobs.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	return &pyJob{id: id, script: script, jobs: jobs, exited: exited}
}

// failIfExited fails the test at once if the script has ended (while its
// output is awaited), saying what was had.
func (j *pyJob) failIfExited(t *testing.T, had string) {
	t.Helper()
	select {
	case err := <-j.exited:
		t.Fatalf("%s ended (%v) with %s", j.script, err, had)
	default:
	}
}

// end cancels or drains the job through the Job API and waits for the
// script, which exits 0 when its PipelineResult ended as the script
// expects (the Python SDK's wait_until_finish), and for the job server to
// report want.
func (j *pyJob) end(ctx context.Context, t *testing.T, drain bool, want jobpb.JobState_Enum) {
	t.Helper()
	how := "Cancel"
	var err error
	if drain {
		how = "Drain"
		_, err = j.jobs.Drain(ctx, &jobpb.DrainJobRequest{JobId: j.id})
	} else {
		_, err = j.jobs.Cancel(ctx, &jobpb.CancelJobRequest{JobId: j.id})
	}
	if err != nil {
		t.Fatalf("%s %s: %v", how, j.id, err)
	}
	select {
	case err := <-j.exited:
		if err != nil {
			t.Errorf("%s: %v after %s (want the job %v, exit 0)", j.script, err, how, want)
		}
	case <-ctx.Done():
		t.Errorf("%s did not end after %s", j.script, how)
	}
	st, err := j.jobs.GetState(ctx, &jobpb.GetJobStateRequest{JobId: j.id})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != want {
		t.Errorf("job %s: state %v after %s, want %v", j.id, st.GetState(), how, want)
	}
}

// readDistinct reads topic (read_committed) until it holds want records,
// failing at once if j's script ends first, or (want < 0) to its end: value
// → record, failing on a value written twice.
func readDistinct(ctx context.Context, t *testing.T, bootstrap, topic string, want int, j *pyJob) map[string]*kgo.Record {
	t.Helper()
	got := map[string]*kgo.Record{}
	var until func() bool
	if want >= 0 {
		until = func() bool {
			j.failIfExited(t, fmt.Sprintf("%d of %d records in %s", len(got), want, topic))
			return len(got) >= want
		}
	}
	kafkatest.ReadTopic(ctx, t, bootstrap, topic, until, func(r *kgo.Record) {
		if _, dup := got[string(r.Value)]; dup {
			t.Errorf("topic %s: value %q written twice", topic, r.Value)
		}
		got[string(r.Value)] = r
	})
	return got
}
