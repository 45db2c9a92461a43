package pythontest

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestKafkaStreamsRunner: the Python SDK's own runner for Kafka Streams,
// --runner=KafkaStreamsRunner with --job_endpoint, submits to ksrunner,
// LOOPBACK by default (no --environment_type), with its own options
// (--bootstrap_servers, --application_id) and ksrunner's (which the SDK
// learns from the job server's DescribePipelineOptions) as the job's: the
// wordcount's results match the DirectRunner's and the job runs with the
// given options. (A misspelt option never reaches the job server: the
// Python SDK drops it, warning on the console.)
func TestKafkaStreamsRunner(t *testing.T) {
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want := runPipeline(ctx, t, py, "wordcount.py")
	opts := host.DefaultOptions()
	logOut := &testkit.SyncBuffer{}
	endpoint := startJobServerLog(t, opts, logOut)
	appID := kafkatest.UniqueName(t, "pyks")

	out := filepath.Join(t.TempDir(), "results.txt")
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "wordcount.py"), out,
		"--runner=KafkaStreamsRunner", "--job_endpoint="+endpoint,
		"--bootstrap_servers="+kafkatest.Broker(t), "--application_id="+appID,
		"--internal_parallelism=3", "--internal_paralelism=8")
	cmd.Env = append(os.Environ(), "PYTHONFAULTHANDLER=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGABRT) }
	cmd.WaitDelay = 10 * time.Second
	var console bytes.Buffer
	cmd.Stdout, cmd.Stderr = &console, &console
	if err := cmd.Run(); err != nil {
		t.Fatalf("wordcount.py on KafkaStreamsRunner: %v\n%s", err, console.Bytes())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(got)
	if d := diff(want, got); d != "" {
		t.Errorf("results differ from the DirectRunner's (%d lines, want %d):\n%s", len(got), len(want), d)
	}
	log := logOut.String()
	if !regexp.MustCompile(`msg="job started" .*application_id=` + regexp.QuoteMeta(appID) + ` .*internal_parallelism=3 `).MatchString(log) {
		t.Errorf("the job did not run under application_id %s with internal_parallelism 3:\n%s", appID, log)
	}
	// LOOPBACK: the pipeline's SDK environment is EXTERNAL, the script's
	// own worker pool.
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := jobpb.NewJobServiceClient(conn)
	list, err := jobs.GetJobs(ctx, &jobpb.GetJobsRequest{})
	if err != nil || len(list.GetJobInfo()) != 1 {
		t.Fatalf("GetJobs: %v, %v", list, err)
	}
	pipe, err := jobs.GetPipeline(ctx, &jobpb.GetJobPipelineRequest{JobId: list.GetJobInfo()[0].GetJobId()})
	if err != nil {
		t.Fatal(err)
	}
	for id, env := range pipe.GetPipeline().GetComponents().GetEnvironments() {
		if urn := env.GetUrn(); urn != "beam:env:external:v1" && urn != "beam:env:default:v1" {
			t.Errorf("environment %s is %s, want LOOPBACK's beam:env:external:v1", id, urn)
		}
	}
	if w := "Discarding unparseable args: ['--internal_paralelism=8']"; !strings.Contains(console.String(), w) {
		t.Errorf("the submitter's console lacks the warning %q:\n%s", w, console.String())
	}
}

// serveForTest runs serve in the background until the test ends, then
// stop; what's log is logged if the test failed (or KSRUNNER_DEBUG is set).
func serveForTest(t *testing.T, what string, serve func() error, stop func(), log *testkit.SyncBuffer) {
	go serve()
	t.Cleanup(func() {
		stop()
		if t.Failed() || os.Getenv("KSRUNNER_DEBUG") != "" {
			t.Logf("%s log:\n%s", what, log.String())
		}
	})
}

// startJobServerLog starts a job server with the test broker, its log
// written to logOut (and to the test's log if it fails), and returns its
// endpoint.
func startJobServerLog(t *testing.T, opts host.Options, logOut *testkit.SyncBuffer) string {
	t.Helper()
	opts.BootstrapServers = kafkatest.Broker(t)
	srv, err := host.NewJobServer("127.0.0.1:0", opts, slog.New(slog.NewTextHandler(logOut, nil)))
	if err != nil {
		t.Fatal(err)
	}
	serveForTest(t, "job server", srv.Serve, srv.Stop, logOut)
	return srv.Endpoint()
}
