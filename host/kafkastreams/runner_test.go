package kafkastreams

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	beam.Init()
	os.Exit(m.Run())
}

func init() {
	register.DoFn3x0[context.Context, string, func(string)](&logFn{})
	register.Emitter1[string]()
	register.DoFn3x0[context.Context, string, int](&checkFn{})
}

// logFn logs each element with the SDK's logger, inside its bundle.
type logFn struct{ Marker string }

func (f *logFn) ProcessElement(ctx context.Context, s string, emit func(string)) {
	log.Infof(ctx, "%s %s", f.Marker, s)
	emit(s)
}

// checkFn counts the words in the "words" counter.
type checkFn struct{}

func (checkFn) ProcessElement(ctx context.Context, _ string, n int) {
	beam.NewCounter("kafkastreams_test", "words").Inc(ctx, int64(n))
}

// pipeline logs "MARKER word" for each of words and counts them.
func pipeline(marker string, words ...string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	logged := beam.ParDo(s, &logFn{Marker: marker}, beam.Create(s, anySlice(words)...))
	beam.ParDo0(s, checkFn{}, stats.Count(s, logged))
	return p
}

func anySlice(words []string) []any {
	out := make([]any, len(words))
	for i, w := range words {
		out[i] = w
	}
	return out
}

// captureConsole makes the runner's console (and an in-process server's
// log) write to buffers for the test.
func captureConsole(t *testing.T) (consoleOut, serverOut *testkit.SyncBuffer) {
	consoleOut, serverOut = &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	oldConsole, oldLog := console, serverLog
	console = func() *slog.Logger {
		return slog.New(slog.NewTextHandler(consoleOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	serverLog = serverOut
	t.Cleanup(func() {
		console, serverLog = oldConsole, oldLog
		if t.Failed() || os.Getenv("KSRUNNER_DEBUG") != "" {
			t.Logf("console:\n%s\nin-process server log:\n%s", consoleOut, serverOut)
		}
	})
	return consoleOut, serverOut
}

// checkConsole checks that the console shows the job's states and each of
// its SDK lines once.
func checkConsole(t *testing.T, console, jobID, marker string, words ...string) {
	t.Helper()
	out := console
	for _, state := range []string{"STARTING", "RUNNING", "DONE"} {
		if n := strings.Count(out, "job "+jobID+": "+state+"\""); n != 1 {
			t.Errorf("console shows state %s %d times, want once", state, n)
		}
	}
	for _, w := range words {
		if n := strings.Count(out, marker+" "+w); n != 1 {
			t.Errorf("console shows the SDK line %q %d times, want once", marker+" "+w, n)
		}
	}
}

func checkWords(t *testing.T, r beam.PipelineResult, want int64) {
	t.Helper()
	var got int64
	for _, c := range r.Metrics().AllMetrics().Counters() {
		if c.Key.Namespace == "kafkastreams_test" && c.Key.Name == "words" {
			got += c.Committed
		}
	}
	if got != want {
		t.Errorf("counter words: %d committed, want %d", got, want)
	}
}

// TestBeamxInProcess: beamx.Run with --runner=kafkastreams and no
// --endpoint runs the pipeline on an in-process job server (embedded
// broker), LOOPBACK, and the program's console shows the job's states and
// its SDK lines once each, not the server's copy of them.
func TestBeamxInProcess(t *testing.T) {
	consoleOut, serverOut := captureConsole(t)
	holdStatusPort(t)
	setFlag(t, "runner", "kafkastreams")
	setFlag(t, "endpoint", "")
	setFlag(t, "environment_type", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := beamx.RunWithMetrics(ctx, pipeline("inprocess-marker", "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	checkWords(t, r, 3)
	checkConsole(t, consoleOut.String(), r.JobID(), "inprocess-marker", "a", "b", "c")
	if !strings.Contains(consoleOut.String(), "in-process job server") {
		t.Errorf("the console does not say where the in-process job server is")
	}
	if n := strings.Count(consoleOut.String(), "status_page=\"http://"); n != 1 {
		t.Errorf("the console shows the status page's URL %d times, want once", n)
	}
	if s := serverOut.String(); strings.Contains(s, "inprocess-marker") {
		t.Errorf("the in-process server's log repeats the job's SDK lines:\n%s", s)
	}
	if *jobopts.EnvironmentType != "LOOPBACK" {
		t.Errorf("environment type %q, want LOOPBACK by default", *jobopts.EnvironmentType)
	}
}

// holdStatusPort makes the in-process status page's default port one this
// test holds (in use, as 8074 may be on a shared machine), so the page
// falls back to a free port; it returns the port.
func holdStatusPort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	old := defaultStatusPort
	defaultStatusPort = lis.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { defaultStatusPort = old })
	t.Setenv("KSRUNNER_STATUS_PORT", "")
	return defaultStatusPort
}

// TestInProcessStatusPage: the in-process job server serves its status
// page and says where, once, in its console line: on the default port, or
// on a free one when that is in use (saying so); KSRUNNER_STATUS_PORT=0
// turns it off; an explicit port in use, or not a port, is an error naming
// the variable.
func TestInProcessStatusPage(t *testing.T) {
	consoleOut, _ := captureConsole(t)
	held := holdStatusPort(t)
	srv, err := startInProcess()
	if err != nil {
		t.Fatal(err)
	}
	u := srv.StatusURL()
	code, body := 0, ""
	if resp, err := http.Get(u + "api/jobs"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
	}
	srv.Stop()
	if code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("GET %sapi/jobs: %d %q, want 200 and no jobs", u, code, body)
	}
	want := fmt.Sprintf("status_page=\"%s (port %d is in use;", u, held)
	if n := strings.Count(consoleOut.String(), "status_page="); n != 1 || !strings.Contains(consoleOut.String(), want) {
		t.Errorf("console: want one line with %s...:\n%s", want, consoleOut)
	}

	t.Setenv("KSRUNNER_STATUS_PORT", "0")
	srv, err = startInProcess()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if srv.StatusURL() != "" || strings.Count(consoleOut.String(), "status_page=") != 1 {
		t.Errorf("KSRUNNER_STATUS_PORT=0: status page %q, console:\n%s; want none", srv.StatusURL(), consoleOut)
	}
	for _, v := range []string{strconv.Itoa(held), "80x", "70000"} {
		t.Setenv("KSRUNNER_STATUS_PORT", v)
		if srv, err := startInProcess(); err == nil {
			srv.Stop()
			t.Errorf("KSRUNNER_STATUS_PORT=%s: no error", v)
		} else if !strings.Contains(err.Error(), "KSRUNNER_STATUS_PORT") {
			t.Errorf("KSRUNNER_STATUS_PORT=%s: error %q does not name the variable", v, err)
		}
	}
}

// TestEndpoint: beam.Run with the Python name of the runner and --endpoint
// submits to that job server, LOOPBACK by default; the flags of ksrunner's
// options travel as the job's pipeline options; a pipeline option one
// edit away from a ksrunner option gets a warning; the console shows the
// states and SDK lines once each, and the server's log has each SDK line
// once (no echo of the message stream).
func TestEndpoint(t *testing.T) {
	consoleOut, _ := captureConsole(t)
	logOut := startServer(t)
	setFlag(t, "environment_type", "")
	setFlag(t, "internal_parallelism", "3")
	setFlag(t, "application_id", kafkatest.UniqueName(t, "ks"))
	beam.PipelineOptions.Set("internal_paralelism", "8")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := beam.Run(ctx, PythonName, pipeline("endpoint-marker", "x", "y"))
	if err != nil {
		t.Fatalf("%v\njob server log:\n%s", err, logOut)
	}
	if os.Getenv("KSRUNNER_DEBUG") != "" {
		t.Logf("job server log:\n%s", logOut)
	}
	checkWords(t, r, 2)
	checkConsole(t, consoleOut.String(), r.JobID(), "endpoint-marker", "x", "y")
	if want := "pipeline option internal_paralelism is not a ksrunner option and is ignored: did you mean internal_parallelism?"; !strings.Contains(consoleOut.String(), want) {
		t.Errorf("the console lacks the warning %q", want)
	}
	log := logOut.String()
	for _, w := range []string{"x", "y"} {
		if n := strings.Count(log, "sdk: endpoint-marker "+w); n != 1 {
			t.Errorf("the job server's log has the SDK line of %q %d times, want once:\n%s", w, n, log)
		}
	}
	if regexp.MustCompile(`sdk: (\(time=|Job\[)`).MatchString(log) {
		t.Errorf("the job server's log has the client's echo of the message stream:\n%s", log)
	}
	start := regexp.MustCompile(`msg="job started" job=` + regexp.QuoteMeta(r.JobID()) + ` .*application_id=ks.*internal_parallelism=3 `)
	if !start.MatchString(log) {
		t.Errorf("the job server's log lacks the job's start line with its options:\n%s", log)
	}
	if !regexp.MustCompile(`msg="job done" job=` + regexp.QuoteMeta(r.JobID()) + ` took=`).MatchString(log) {
		t.Errorf("the job server's log lacks the job's end line with its duration:\n%s", log)
	}
}

// TestUniversalRunnerEcho: the SDK's universal runner logs the job's
// message stream with the SDK's logger, which in a LOOPBACK program is the
// harness's and sends the lines back to the job server: the server's log
// still has each SDK line once, and none of the echoes.
func TestUniversalRunnerEcho(t *testing.T) {
	logOut := startServer(t)
	setFlag(t, "environment_type", "LOOPBACK")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := universal.Execute(ctx, pipeline("universal-marker", "u", "v", "w")); err != nil {
		t.Fatalf("%v\njob server log:\n%s", err, logOut)
	}
	log := logOut.String()
	for _, w := range []string{"u", "v", "w"} {
		if n := strings.Count(log, "universal-marker "+w); n != 1 {
			t.Errorf("the job server's log has the SDK line of %q %d times, want once:\n%s", w, n, log)
		}
	}
	if regexp.MustCompile(`sdk: (\(time=|\(id=|Job\[)`).MatchString(log) {
		t.Errorf("the job server's log has the client's echo of the message stream:\n%s", log)
	}
}

// startServer starts a job server on the test broker, makes it the
// --endpoint for the test, and returns its log.
func startServer(t *testing.T) *testkit.SyncBuffer {
	t.Helper()
	opts := host.DefaultOptions()
	opts.BootstrapServers = kafkatest.Broker(t)
	logOut := &testkit.SyncBuffer{}
	srv, err := host.NewJobServer("127.0.0.1:0", opts, slog.New(slog.NewTextHandler(logOut, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(srv.Stop)
	setFlag(t, "endpoint", srv.Endpoint())
	return logOut
}

// setFlag sets a command-line flag for the test.
func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if name == "runner" {
			*runners.Runner = old
			return
		}
		if of, ok := f.Value.(*optionFlag); ok {
			of.value = old
			return
		}
		flag.Set(name, old)
	})
}
