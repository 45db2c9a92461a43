package pythontest

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// streamingScript is the Python twin of examples/streaming.
var streamingScript = filepath.Join("..", "..", "examples", "streaming", "streaming.py")

// TestStreamingExamplePython runs examples/streaming/streaming.py for real
// against a job server and its KafkaIO expansion service, as the Go
// example's test runs the Go pipeline: the input (4 partitions) holds
// KSRUNNER_STREAMING_RECORDS records (default 2,000) over 20 keys with
// event timestamps over three minutes; once a line has arrived for every
// key and 10-second window, the job is cancelled and the output topic,
// read whole read_committed, must hold each key and window once with its
// exact count. The job server's log must show one source task per input
// partition.
func TestStreamingExamplePython(t *testing.T) {
	py := beamPython(t)
	records := 2000
	if s := os.Getenv("KSRUNNER_STREAMING_RECORDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KSRUNNER_STREAMING_RECORDS=%q: want a positive count", s)
		}
		records = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	endpoint, serverLog := startDebugJobServer(t, bootstrap)
	expansion := startExpansionServer(t)
	in, out := kafkatest.UniqueName(t, "pywords"), kafkatest.UniqueName(t, "pycounts")
	kafkatest.CreateTopic(t, bootstrap, in, 4)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	want := fillWords(ctx, t, bootstrap, in, records, 20)

	start := time.Now()
	jobIDFile := filepath.Join(t.TempDir(), "jobid")
	jobID, jobs, exited := startPythonJob(ctx, t, endpoint, jobIDFile, py, streamingScript,
		"--job_endpoint="+endpoint, "--expansion_service="+expansion, "--bootstrap_servers="+bootstrap,
		"--input_topic="+in, "--output_topic="+out, "--job_id_file="+jobIDFile,
		"--application_id="+kafkatest.UniqueName(t, "pystreaming"))
	cancelled := false
	defer func() {
		if !cancelled {
			jobs.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: jobID})
		}
	}()

	// Every window once, while the job runs.
	seen := map[string]bool{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("streaming.py ended (%v) with %d of %d windows in %s", err, len(seen), len(want), out)
		default:
		}
		return len(seen) >= len(want)
	}, func(r *kgo.Record) {
		l := string(r.Value)
		if i := strings.LastIndexByte(l, ','); i >= 0 {
			if _, ok := want[l[:i]]; ok {
				seen[l[:i]] = true
			}
		}
	})
	t.Logf("%d records: every window arrived %v after the script started", records, time.Since(start).Round(time.Millisecond))
	if _, err := jobs.Cancel(ctx, &jobpb.CancelJobRequest{JobId: jobID}); err != nil {
		t.Fatalf("cancel %s: %v", jobID, err)
	}
	cancelled = true
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("streaming.py: %v (want the job CANCELLED, exit 0)", err)
		}
	case <-ctx.Done():
		t.Errorf("streaming.py did not end after Cancel")
	}

	// The output, whole, after the job: each key and window once, with its
	// count, and the record key the line's key.
	got := map[string]int64{}
	var bad []string
	kafkatest.ReadTopic(ctx, t, bootstrap, out, nil, func(r *kgo.Record) {
		l := string(r.Value)
		i := strings.LastIndexByte(l, ',')
		if i < 0 {
			bad = append(bad, fmt.Sprintf("offset %d: %q is not key,windowStart,count", r.Offset, l))
			return
		}
		n, err := strconv.ParseInt(l[i+1:], 10, 64)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("offset %d: %q is not key,windowStart,count", r.Offset, l))
		case string(r.Key) != l[:strings.IndexByte(l, ',')]:
			bad = append(bad, fmt.Sprintf("offset %d: record key %q, line %q", r.Offset, r.Key, l))
		}
		if _, dup := got[l[:i]]; dup {
			bad = append(bad, fmt.Sprintf("offset %d: %s written twice", r.Offset, l[:i]))
		}
		got[l[:i]] = n
	})
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: missing, want %d", k, want[k]))
		} else if g != want[k] {
			bad = append(bad, fmt.Sprintf("%s: count %d, want %d", k, g, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: count %d, no such key and window in the input", k, got[k]))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s, %d windows expected:\n%s", out, len(want), strings.Join(bad, "\n"))
	}

	// One source task per input partition: the tasks (SUBTOPOLOGY/PARTITION)
	// of the sub-topology reading the input report watermarks.
	tasks := map[string]bool{}
	sl := serverLog.String()
	st := regexp.MustCompile(`plan: sub-topology (\d+) reads topic ` + regexp.QuoteMeta(in) + `;`).FindStringSubmatch(sl)
	if st == nil {
		t.Fatalf("the job server's log names no sub-topology reading %s", in)
	}
	for _, m := range regexp.MustCompile(`msg=watermark job=\S+ task=`+st[1]+`/(\d+) `).FindAllStringSubmatch(sl, -1) {
		tasks[m[1]] = true
	}
	if len(tasks) != 4 {
		t.Errorf("source tasks of %s: partitions %v, want 0-3", in, slices.Sorted(maps.Keys(tasks)))
	}
	t.Logf("%d lines over %d keys and windows, each once with its count; %d source tasks; job %s cancelled", len(got), len(want), len(tasks), jobID)
}

// startDebugJobServer starts a job server on bootstrap that logs at debug
// level (task assignments) into the returned buffer.
func startDebugJobServer(t *testing.T, bootstrap string) (string, *testkit.SyncBuffer) {
	t.Helper()
	opts := host.DefaultOptions()
	opts.BootstrapServers = bootstrap
	logOut := &testkit.SyncBuffer{}
	srv, err := host.NewJobServer("127.0.0.1:0", opts, slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() && os.Getenv("KSRUNNER_DEBUG") != "" {
			t.Logf("job server log:\n%s", logOut.String())
		}
	})
	return srv.Endpoint(), logOut
}

// fillWords produces n records over keys keys to topic as the Go example
// does (String key, Long value 1, event timestamps evenly over three
// minutes ending 20 s ago, in timestamp order) and returns the count per
// "key,windowStart" (RFC 3339, UTC) of 10-second windows.
func fillWords(ctx context.Context, t *testing.T, bootstrap, topic string, n, keys int) map[string]int64 {
	t.Helper()
	const window, span = 10 * time.Second, 3 * time.Minute
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Truncate(window).Add(-span - 20*time.Second)
	one := binary.BigEndian.AppendUint64(nil, 1)
	want := map[string]int64{}
	cl := kafkatest.Client(t, bootstrap)
	for i := range n {
		ts := base.Add(time.Duration(int64(span) * int64(i) / int64(n))).Truncate(time.Millisecond)
		key := fmt.Sprintf("key%02d", r.IntN(keys))
		want[key+","+ts.Truncate(window).UTC().Format(time.RFC3339)]++
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: one, Timestamp: ts}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("producing to %s: %v", topic, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return want
}
