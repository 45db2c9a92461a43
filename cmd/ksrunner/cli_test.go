package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/periodic"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	beam.Init()
	os.Exit(m.Run())
}

// runCLI runs ksrunner with args and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// `ksrunner --help`, `ksrunner help` and `ksrunner help COMMAND` (or
// `COMMAND --help`) list the commands and their flags, say how
// configuration merges, and exit 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
		for _, want := range []string{"jobserver", "worker", "broker", "jobs", "cancel", "drain", "version", "KSRUNNER_*", "defaults < --config FILE", "< flags", "ksrunner-bench"} {
			if !strings.Contains(out, want) {
				t.Errorf("%q does not mention %q:\n%s", args, want, out)
			}
		}
	}
	for _, args := range [][]string{{"help", "jobserver"}, {"jobserver", "--help"}, {"--internal_parallelism=3", "-h"}} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "--internal_parallelism int") || !strings.Contains(out, "KSRUNNER_INTERNAL_PARALLELISM=8") {
			t.Errorf("%q: exit %d, output lacks the flags or the environment:\n%s", args, code, out)
		}
	}
	for _, c := range []struct{ cmd, flag string }{{"worker", "--sdk_worker_pool"}, {"drain", "--endpoint"}, {"broker", "--port"}, {"reset", "--delete_source_offsets"}, {"worker", "--leave_group_on_stop"}, {"jobserver", "--leave_group_on_stop"}} {
		if code, out, _ := runCLI(t, "help", c.cmd); code != 0 || !strings.Contains(out, c.flag) {
			t.Errorf("help %s: exit %d, lacks %s:\n%s", c.cmd, code, c.flag, out)
		}
	}
	if code, _, errOut := runCLI(t, "help", "jobz"); code == 0 || !strings.Contains(errOut, `did you mean jobs?`) {
		t.Errorf("help jobz: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "bench", "gbk"); code == 0 || !strings.Contains(errOut, "cmd/ksrunner-bench gbk") {
		t.Errorf("bench gbk: exit %d, %q, want a pointer to ksrunner-bench", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != 0 || !regexp.MustCompile(`(?m)^ksrunner \S+ \(github.com/ksrunner/ksrunner`).MatchString(out) || !strings.Contains(out, "go:") {
		t.Errorf("version: exit %d:\n%s", code, out)
	}
}

// Unknown names are errors naming where they are (the flag, the file, the
// variable) and what they may be a misspelling of; a bad value says where
// it came from; the tools' KSRUNNER_* variables are not options.
func TestConfigErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ksrunner.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KSRUNNER_DEBUG", "1")                     // a tool's variable
	t.Setenv("KSRUNNER_KAFKA_PORT", "19092")            // .ci's
	t.Setenv("KSRUNNER_SDK_WORKER_POOL", "go=host:123") // the worker's option
	for _, c := range []struct {
		name string
		env  map[string]string
		file string
		args []string
		want string
	}{
		{name: "misspelt variable", env: map[string]string{"KSRUNNER_INTERNAL_PARALELISM": "8"},
			want: "environment variable KSRUNNER_INTERNAL_PARALELISM: not a ksrunner option (did you mean KSRUNNER_INTERNAL_PARALLELISM?)"},
		{name: "unknown variable", env: map[string]string{"KSRUNNER_COLOUR": "blue"},
			want: "environment variable KSRUNNER_COLOUR: not a ksrunner option"},
		{name: "misspelt flag", args: []string{"--internal_paralelism=8"},
			want: "unknown flag --internal_paralelism (did you mean --internal_parallelism?)"},
		{name: "misspelt file key", file: "internal_paralelism: 8\n",
			want: `config file ` + file + `: unknown option "internal_paralelism" (did you mean internal_parallelism?)`},
		{name: "bad variable value", env: map[string]string{"KSRUNNER_INTERNAL_PARALLELISM": "many"},
			want: `environment variable KSRUNNER_INTERNAL_PARALLELISM="many": 'internal_parallelism' cannot parse value as 'int'`},
		{name: "bad file value", file: "commit_interval_ms: soon\n",
			want: "config file " + file + ": option commit_interval_ms:"},
		{name: "invalid variable value", env: map[string]string{"KSRUNNER_INTERNAL_PARALLELISM": "0"},
			want: "option internal_parallelism: 0, must be at least 1 (from environment variable KSRUNNER_INTERNAL_PARALLELISM)"},
		{name: "invalid file value", file: "processing_guarantee: twice\n",
			want: `option processing_guarantee: "twice", must be exactly_once or at_least_once (from config file ` + file + `)`},
		{name: "invalid flag value", args: []string{"--group_protocol=chatty"},
			want: `option group_protocol: "chatty", must be classic or consumer (from flag --group_protocol)`},
		{name: "invalid flag over a good file", file: "session_timeout_ms: 7000\n", args: []string{"--session_timeout_ms=-1"},
			want: "(from flag --session_timeout_ms)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := c.args
			if c.file != "" {
				write(c.file)
				args = append([]string{"--config", file}, args...)
			}
			_, err := loadServerConfig(args)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// The worker knows the same variables.
	t.Setenv("KSRUNNER_STATE_DRI", "/tmp/x")
	if _, err := parseWorkerFlags([]string{"--application_id=a", "--bootstrap_servers=b"}); err == nil || !strings.Contains(err.Error(), "KSRUNNER_STATE_DRI: not a ksrunner option (did you mean KSRUNNER_STATE_DIR?)") {
		t.Errorf("worker with KSRUNNER_STATE_DRI: %v", err)
	}
}

// startJobServer runs `ksrunner jobserver` in the test and returns its job
// endpoint and a func that waits until its output holds a line starting
// with prefix (at most 30 s), stops it and returns everything it printed.
func startJobServer(t *testing.T, args ...string) (endpoint string, stdout func(prefix string) string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runJobServer(ctx, append([]string{"--job_port=0", "--expansion_port=0", "--log_level=error"}, args...), w)
		w.Close()
	}()
	var out strings.Builder
	seen := make(chan string, 100)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for line := range lines {
		out.WriteString(line + "\n")
		if addr, ok := strings.CutPrefix(line, "job endpoint: "); ok {
			endpoint = addr
			break
		}
	}
	if endpoint == "" {
		t.Fatalf("no job endpoint (%v):\n%s", <-done, out.String())
	}
	collected := make(chan struct{})
	go func() {
		for line := range lines {
			out.WriteString(line + "\n")
			select {
			case seen <- line:
			default: // nobody waits for lines this far
			}
		}
		close(collected)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("jobserver: %v", err)
		}
	})
	return endpoint, func(prefix string) string {
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case line := <-seen:
				if strings.HasPrefix(line, prefix) {
					break wait
				}
			case <-deadline:
				break wait
			}
		}
		cancel()
		<-collected
		return out.String()
	}
}

// The client commands against a running job server: jobs lists the jobs,
// drain ends an unbounded job (a periodic impulse, a splittable DoFn that
// checkpoints) DONE with its windows fired, and jobs then shows it
// drained; cancel ends one CANCELLED; an unknown job is an error naming it.
func TestClientCommands(t *testing.T) {
	endpoint, _ := startJobServer(t, "--bootstrap_servers="+kafkatest.Broker(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	loopback, err := extworker.StartLoopback(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer loopback.Stop(ctx)
	bin := filepath.Join(t.TempDir(), "worker")
	os.WriteFile(bin, nil, 0o644)
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := jobpb.NewJobServiceClient(cc)
	submit := func(app string) string {
		p, s := beam.NewPipelineWithRoot()
		ticks := periodic.Impulse(s, time.Now(), time.Now().Add(time.Hour), 50*time.Millisecond, false)
		stats.Count(s, beam.WindowInto(s, window.NewFixedWindows(time.Second), ticks))
		id, err := jobtest.Submit(ctx, t, client, bin, jobtest.MarshalLoopback(t, p, loopback.EnvironmentConfig, bin),
			map[string]string{"application_id": kafkatest.UniqueName(t, app)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	waitRunning := func(id string) {
		for {
			st, err := client.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id})
			if err != nil {
				t.Fatal(err)
			}
			if st.GetState() == jobpb.JobState_RUNNING {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	drained, cancelled := submit("drained"), submit("cancelled")
	waitRunning(drained)
	waitRunning(cancelled)
	time.Sleep(time.Second) // a few ticks

	code, out, errOut := runCLI(t, "jobs", "--endpoint", endpoint)
	if code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(drained)+`\s+RUNNING\s+\S+\s+drained-TestClientCommands`).MatchString(out) {
		t.Errorf("jobs: exit %d (%s):\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "drain", drained, "--endpoint="+endpoint)
	if code != 0 || !strings.Contains(out, "job "+drained+": DRAINING") || !strings.Contains(out, "job "+drained+": DONE") {
		t.Errorf("drain: exit %d (%s):\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "cancel", "--endpoint="+endpoint, cancelled)
	if code != 0 || !strings.Contains(out, "job "+cancelled+": CANCELLED") {
		t.Errorf("cancel: exit %d (%s):\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "jobs", "--endpoint", endpoint)
	if code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(drained)+`\s+DONE \(drained\)\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(cancelled)+`\s+CANCELLED\s`).MatchString(out) {
		t.Errorf("jobs after the drain and the cancel: exit %d (%s):\n%s", code, errOut, out)
	}
	if code, _, errOut := runCLI(t, "cancel", "nosuchjob", "--endpoint="+endpoint); code == 0 || !strings.Contains(errOut, `unknown job id "nosuchjob"`) {
		t.Errorf("cancel nosuchjob: exit %d, %q", code, errOut)
	}
	res, err := client.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: drained})
	if err != nil || len(res.GetMetrics().GetCommitted()) == 0 {
		t.Errorf("the drained job has no committed metrics (%v): did its windows fire?", err)
	}
}

// With a real broker, the job server says at start-up that it reached it,
// naming it; with one it cannot reach, it warns and serves anyway.
func TestBrokerCheck(t *testing.T) {
	if !kafkatest.IsReal() {
		// The test broker is in this process: reachable all the same.
		t.Log("on the test's in-process broker")
	}
	broker := kafkatest.Broker(t)
	_, stdout := startJobServer(t, "--bootstrap_servers="+broker)
	if out := stdout("kafka: "); !strings.Contains(out, "kafka: reached "+broker+": cluster ") {
		t.Errorf("job server output lacks the broker check:\n%s", out)
	}
	var buf strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := reachBrokers(ctx, "127.0.0.1:1", host.KafkaSecurity{}, &buf); err == nil {
		t.Errorf("reaching 127.0.0.1:1: no error (%s)", buf.String())
	}
}

// `ksrunner reset` needs the application and its brokers, and resets one
// that never ran (no topics, no group) to nothing, saying so.
func TestResetCommand(t *testing.T) {
	if code, _, errOut := runCLI(t, "reset"); code == 0 || !strings.Contains(errOut, "--application_id and --bootstrap_servers are required") {
		t.Errorf("reset without flags: exit %d, %q", code, errOut)
	}
	code, out, errOut := runCLI(t, "reset", "--application_id=never-ran", "--bootstrap_servers="+kafkatest.Broker(t))
	if code != 0 || !strings.Contains(out, "deleted 0 internal topics") {
		t.Errorf("reset of an application that never ran: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
