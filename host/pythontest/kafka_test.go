package pythontest

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/host/kafkaio"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestKafkaIOPython: a Python pipeline of ReadFromKafka (String keys, Long
// values, CreateTime timestamps) → sums per key in fixed one-minute windows
// → WriteToKafka, expanded by ksrunner's expansion service (host/kafkaio, no
// Java), runs unbounded on ksrunner: the output topic holds each key and
// window's sum exactly once (read_committed), and Cancel ends the job.
func TestKafkaIOPython(t *testing.T) {
	ctx, env := newKafkaEnv(t)
	in, out := kafkatest.UniqueName(t, "pykin"), kafkatest.UniqueName(t, "pykout")
	want := kafkatest.FillCountTopics(ctx, t, env.bootstrap, in, out)
	// --streaming (portableArgs): the pipeline is unbounded, and without it
	// the Python SDK's PortableRunner pre-optimizes the pipeline
	// (pack_combiners, lift_combiners, sort_stages), which drops the
	// WriteToKafka leaf (a runner transform with no outputs) from what it
	// submits.
	job := env.startKafkaScript(ctx, t, "kafka_count.py", in, out, kafkatest.UniqueName(t, "pykafka"), nil)
	readCommitted(ctx, t, env.bootstrap, out, len(want), job.exited)
	job.end(ctx, t, false, jobpb.JobState_CANCELLED)
	// Nothing more once cancelled: the topic holds exactly want, each once.
	checkSums(t, readCommitted(ctx, t, env.bootstrap, out, -1, nil), want)
	t.Logf("%d sums over keys and windows, job %s cancelled", len(want), job.id)
}

// TestKafkaIOPythonDrain (issue 14): Drain of the Python KafkaIO pipeline
// above, whose watermark only its data moves (source_idle_timeout_ms an
// hour), once it has read its whole input: the job fires every window, the
// last ones that no data closed too, and ends DONE, so the Python SDK's
// wait_until_finish returns (it raises for DRAINED: see host.drainedState)
// and the script exits 0; the output holds every window's sum once.
func TestKafkaIOPythonDrain(t *testing.T) {
	t.Setenv("KSRUNNER_EXPECT_END", "DONE") // read by kafka_count.py
	ctx, env := newKafkaEnv(t)
	in, out := kafkatest.UniqueName(t, "pydin"), kafkatest.UniqueName(t, "pydout")
	want := kafkatest.FillCountTopics(ctx, t, env.bootstrap, in, out)
	appID := kafkatest.UniqueName(t, "pydrain")
	job := env.startKafkaScript(ctx, t, "kafka_count.py", in, out, appID, nil, "--source_idle_timeout_ms=3600000")
	// Drained once it has read (and committed) every input record, so the
	// drain has every window to fire.
	adm := kadm.NewClient(kafkatest.Client(t, env.bootstrap))
	ends, err := adm.ListEndOffsets(ctx, in)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", in, err)
	}
	for {
		job.failIfExited(t, "the input not all read")
		committed, err := adm.FetchOffsets(ctx, appID)
		if err == nil && allCommitted(ends, committed) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the job did not commit its whole input %s (ends %v) by the deadline: committed %v (%v)", in, ends, committed, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	job.end(ctx, t, true, jobpb.JobState_DONE)
	checkSums(t, readCommitted(ctx, t, env.bootstrap, out, -1, nil), want)
}

// allCommitted reports whether committed holds the end of every partition
// that has records (an empty one has nothing to commit).
func allCommitted(ends kadm.ListedOffsets, committed kadm.OffsetResponses) bool {
	ok := true
	ends.Each(func(e kadm.ListedOffset) {
		if c, found := committed.Lookup(e.Topic, e.Partition); e.Offset > 0 && (!found || c.At != e.Offset) {
			ok = false
		}
	})
	return ok
}

// checkSums compares a count pipeline's output with want.
func checkSums(t *testing.T, got, want map[string]int64) {
	t.Helper()
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: sum %d, want %d", k, got[k], n)
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: sum %d, not expected", k, n)
		}
	}
}

// startExpansionServer serves ksrunner's KafkaIO expansion service on a free
// loopback port and returns its address.
func startExpansionServer(t *testing.T) string {
	t.Helper()
	var logOut testkit.SyncBuffer
	srv, err := kafkaio.NewExpansionServer("127.0.0.1:0", slog.New(slog.NewTextHandler(&logOut, nil)))
	if err != nil {
		t.Fatal(err)
	}
	serveForTest(t, "expansion server", srv.Serve, srv.Stop, &logOut)
	return srv.Endpoint()
}

// readCommitted reads a count topic (kafkatest.ReadCounts) until it holds
// want records, or (want < 0, when nothing writes it any more) to its end,
// and fails at once if exited (the writing process) ends first.
func readCommitted(ctx context.Context, t *testing.T, bootstrap, topic string, want int, exited <-chan error) map[string]int64 {
	t.Helper()
	if want < 0 {
		return kafkatest.ReadCounts(ctx, t, bootstrap, topic, -1)
	}
	got := map[string]int64{}
	kafkatest.ReadTopic(ctx, t, bootstrap, topic, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("kafka_count.py ended (%v) with %d of %d records in %s", err, len(got), want, topic)
		default:
		}
		return len(got) >= want
	}, func(r *kgo.Record) { kafkatest.AddCount(t, got, r) })
	return got
}

// TestKafkaIOPythonNeedsStreaming: without --streaming the Python SDK
// optimizes the pipeline for batch and drops WriteToKafka; the job server
// refuses such a pipeline at submission, naming the read and the option,
// rather than run a job that writes nothing.
func TestKafkaIOPythonNeedsStreaming(t *testing.T) {
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	endpoint := startJobServer(t, host.DefaultOptions())
	expansion := startExpansionServer(t)
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "kafka_count.py"), filepath.Join(t.TempDir(), "jobid"),
		"in", "out", bootstrap, expansion,
		"--runner=PortableRunner", "--job_endpoint="+endpoint, "--environment_type=LOOPBACK",
		"--application_id="+kafkatest.UniqueName(t, "pykafka"), "--bootstrap_servers="+bootstrap)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("kafka_count.py without --streaming succeeded; want the job refused:\n%s", out)
	}
	if !strings.Contains(string(out), "pass --streaming") || !strings.Contains(string(out), "ReadFromKafka") {
		t.Fatalf("kafka_count.py without --streaming failed without naming the read and --streaming:\n%s", out)
	}
}
