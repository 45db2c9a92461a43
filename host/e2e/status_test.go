package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// statusJob is what the status page's JSON API says of a job (the fields
// the tests read).
type statusJob struct {
	ID, Name, State, Process, Instance string
	ApplicationID                      string `json:"application_id"`
	Commits                            int64
	CanCancel                          bool   `json:"can_cancel"`
	CanDrain                           bool   `json:"can_drain"`
	DrainUnavailable                   string `json:"drain_unavailable"`
	ClusterError                       string `json:"cluster_error"`
	Topology                           struct {
		Nodes []struct{ ID, Kind, Label, Root string }
		Edges []struct{ From, To, Topic string }
	}
	Tasks []struct {
		SubTopology  int `json:"sub_topology"`
		Partition    int32
		Topic, Owner string
		Source       bool
		Local        bool
		HasWatermark bool `json:"has_watermark"`
		Committed    int64
		End, Lag     int64
		Instance     *struct {
			Owned     bool
			RecordsIn int64 `json:"records_in"`
			Restores  int64
		}
	}
	Messages []struct{ Importance, Text string }
}

// startStatusServer starts a job server whose status page listens on a
// free loopback port.
func startStatusServer(t *testing.T, opts host.Options) (*host.JobServer, jobpb.JobServiceClient) {
	t.Helper()
	srv, err := host.NewJobServer("127.0.0.1:0", opts, testLogger(), host.WithStatus(host.StatusConfig{Addr: "127.0.0.1:0"}))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return srv, jobpb.NewJobServiceClient(cc)
}

func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, b
}

func getStatusJob(t *testing.T, base, id string) statusJob {
	t.Helper()
	code, b := httpGet(t, base+"api/jobs/"+id)
	if code != http.StatusOK {
		t.Fatalf("GET api/jobs/%s: %d %s", id, code, b)
	}
	var j statusJob
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("api/jobs/%s: %v: %s", id, err, b)
	}
	return j
}

// waitStatus polls the job's status until ok accepts it.
func waitStatus(t *testing.T, base, id string, within time.Duration, what string, ok func(statusJob) bool) statusJob {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j := getStatusJob(t, base, id)
		if ok(j) {
			return j
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(j, "", " ")
			t.Fatalf("status of job %s after %v: want %s; got %s", id, within, what, b)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// statusJobRunning submits the windowed Kafka count (a Kafka read of 4
// partitions, a GroupByKey over 2, a Kafka write) to a job server with a
// status page, with n records in its input, and waits until the output
// shows they were processed. It returns the status page's address and
// the job id.
func statusJobRunning(ctx context.Context, t *testing.T, extra map[string]string) (base, id, appID, bootstrap string, client jobpb.JobServiceClient) {
	t.Helper()
	bootstrap = kafkatest.Broker(t)
	const partitions, n = 4, 200
	in, out := countTopics(t, bootstrap, "status", partitions)
	data := newCountData(n, partitions)
	want1, _ := data.halves(t)
	appID = kafkatest.UniqueName(t, "status")
	srv, client := startStatusServer(t, host.DefaultOptions())
	data.produce(ctx, t, bootstrap, in, data.recs[:n/2])
	opts := map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2", "source_idle_timeout_ms": "3600000"}
	for k, v := range extra {
		opts[k] = v
	}
	id, err := submit(ctx, t, client, kafkaCountPipeline(t, in, out), opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { client.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	readCommitted(ctx, t, bootstrap, out, len(want1))
	return srv.StatusURL(), id, appID, bootstrap, client
}

// TestStatusAPI: the status page's JSON API and /metrics show a running
// job on its broker: its state, its topology (the Kafka topics it reads and
// writes around its sub-topologies), every task with this process as its
// owner, the records its source tasks consumed (every input record), their
// lag and watermarks; Drain is refused as not built, and the actions
// require the page's header.
func TestStatusAPI(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	base, id, appID, _, _ := statusJobRunning(ctx, t, nil)

	code, b := httpGet(t, base+"api/jobs")
	var list []struct{ ID, State string }
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil || len(list) != 1 || list[0].ID != id || list[0].State != "RUNNING" {
		t.Fatalf("GET api/jobs: %d %s (%v), want job %s RUNNING", code, b, err, id)
	}
	if code, _ := httpGet(t, base+"api/jobs/nope"); code != http.StatusNotFound {
		t.Errorf("GET api/jobs/nope: %d, want 404", code)
	}

	// The source tasks have consumed every record and committed them.
	j := waitStatus(t, base, id, time.Minute, "4 source tasks that consumed 100 records, committed, and 2 group-by-key tasks, all owned here", func(j statusJob) bool {
		in, committed, src, gbk := int64(0), int64(0), 0, 0
		for _, tk := range j.Tasks {
			if tk.Owner == "" || tk.Owner != j.Instance || !tk.Local || tk.Instance == nil || !tk.Instance.Owned {
				return false
			}
			if tk.Source {
				src++
				in += tk.Instance.RecordsIn
				committed += tk.Committed
			} else {
				gbk++
			}
		}
		return src == 4 && gbk == 2 && in == 100 && committed == 100 && j.ClusterError == ""
	})
	if j.State != "RUNNING" || j.ApplicationID != appID || j.Process != "jobserver" || len(j.Instance) != 16 || j.Commits == 0 {
		t.Errorf("job: state %s, application %s, process %s, instance %q, commits %d; want RUNNING, %s, jobserver, an instance id, commits", j.State, j.ApplicationID, j.Process, j.Instance, j.Commits, appID)
	}
	if !j.CanCancel || j.CanDrain || !strings.Contains(j.DrainUnavailable, "not built") {
		t.Errorf("actions: can_cancel %v, can_drain %v (%q); want cancel only, drain unavailable saying why", j.CanCancel, j.CanDrain, j.DrainUnavailable)
	}
	kinds := map[string]int{}
	roots := map[string]bool{}
	for _, n := range j.Topology.Nodes {
		kinds[n.Kind]++
		roots[n.Root] = true
	}
	if kinds["kafka"] != 2 || kinds["subtopology"] < 2 || !roots["kafka-read"] || !roots["group-by-key"] {
		t.Errorf("topology nodes %+v: want the 2 Kafka topics, a kafka-read and a group-by-key sub-topology", j.Topology.Nodes)
	}
	if len(j.Topology.Edges) < 3 {
		t.Errorf("topology edges %+v: want topic → read → group-by-key → topic", j.Topology.Edges)
	}
	wm := 0
	for _, tk := range j.Tasks {
		if tk.HasWatermark {
			wm++
		}
		if tk.Source && tk.Lag != 0 {
			t.Errorf("source task %d/%d: lag %d after every record was committed, want 0", tk.SubTopology, tk.Partition, tk.Lag)
		}
	}
	if wm == 0 {
		t.Error("no task has a watermark")
	}
	if len(j.Messages) == 0 {
		t.Error("no messages")
	}

	code, b = httpGet(t, base+"metrics")
	metrics := string(b)
	for _, want := range []string{
		fmt.Sprintf(`ksrunner_job_info{application_id=%q,instance=%q,job=%q,name=`, appID, j.Instance, id),
		`state="RUNNING"`,
		fmt.Sprintf(`ksrunner_task_owner_info{application_id=%q,job=%q,local="true",owner=%q,partition="0",source="true",sub_topology=`, appID, id, j.Instance),
		"ksrunner_task_records_in_total{", "ksrunner_task_lag_records{", "ksrunner_task_watermark_seconds{",
		"ksrunner_job_commits_total{", "ksrunner_task_state_bytes{", "go_goroutines",
	} {
		if code != http.StatusOK || !strings.Contains(metrics, want) {
			t.Errorf("GET metrics (%d): no %q in\n%s", code, want, metrics)
			break
		}
	}

	// The actions: without the page's header, refused; Drain not built.
	resp, err := http.Post(base+"api/jobs/"+id+"/cancel", "", nil)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST cancel without the header: %v %v, want 403", resp.StatusCode, err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"api/jobs/"+id+"/drain", nil)
	req.Header.Set("X-Ksrunner-Action", "drain")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("POST drain: %v %v, want 501", resp.StatusCode, err)
	}
	if j := getStatusJob(t, base, id); j.State != "RUNNING" {
		t.Errorf("after the refused actions the job is %s, want RUNNING", j.State)
	}
}

// TestStatusShowsWorkerTasks (issue 12's acceptance): a worker on a second
// state_dir takes tasks, and the job server's status page shows them owned
// by the worker's instance, while the worker's own status page and
// /metrics show them as its local tasks.
func TestStatusShowsWorkerTasks(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	base, id, appID, bootstrap, _ := statusJobRunning(ctx, t, map[string]string{"state_dir": t.TempDir()})
	w, err := host.NewWorker(host.WorkerConfig{ApplicationID: appID, BootstrapServers: bootstrap, StateDir: t.TempDir(), Logger: testLogger()},
		host.WithStatus(host.StatusConfig{Addr: "127.0.0.1:0"}))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-workerDone })

	var server statusJob
	server = waitStatus(t, base, id, 90*time.Second, "tasks owned by this process and by another instance", func(j statusJob) bool {
		here, there := 0, 0
		for _, tk := range j.Tasks {
			switch {
			case tk.Owner == j.Instance && tk.Local:
				here++
			case tk.Owner != "" && !tk.Local:
				there++
			}
		}
		return here > 0 && there > 0
	})
	var workerInstance string
	for _, tk := range server.Tasks {
		if !tk.Local && tk.Owner != "" {
			workerInstance = tk.Owner
		}
	}
	// The worker's page says the same from its side.
	code, b := httpGet(t, w.StatusURL()+"api/jobs")
	var list []struct{ ID string }
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil || len(list) != 1 {
		t.Fatalf("worker GET api/jobs: %d %s (%v), want its one job", code, b, err)
	}
	wj := waitStatus(t, w.StatusURL(), list[0].ID, 30*time.Second, "the worker's tasks owned locally", func(j statusJob) bool {
		for _, tk := range j.Tasks {
			if tk.Local && tk.Instance != nil && tk.Instance.Owned {
				return true
			}
		}
		return false
	})
	if wj.Process != "worker" || wj.Instance != workerInstance || wj.CanCancel {
		t.Errorf("worker's job: process %s, instance %s, can_cancel %v; want worker, %s (the owner the job server shows), false", wj.Process, wj.Instance, wj.CanCancel, workerInstance)
	}
	_, b = httpGet(t, w.StatusURL()+"metrics")
	if want := fmt.Sprintf(`local="true",owner=%q`, workerInstance); !strings.Contains(string(b), want) {
		t.Errorf("worker /metrics: no %s in\n%s", want, b)
	}
}

// browserPath finds Chromium: under CI=true a missing browser fails the
// test (.ci/run installs it), elsewhere it skips.
func browserPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium (chromium, chromium-browser or google-chrome) on PATH: .ci/run installs it with apt-get")
	}
	t.Skip("no Chromium on PATH (apt-get install chromium)")
	return ""
}

// TestStatusPageBrowser opens the status page of a running job in
// Chromium: the job list links to the job, whose page draws the topology
// (its graph nodes) and lists the tasks; Drain is disabled, saying why;
// pressing Cancel cancels the job, which the page then shows.
func TestStatusPageBrowser(t *testing.T) {
	bin := browserPath(t)
	ctx := testContext(t, 3*time.Minute)
	base, id, _, _, client := statusJobRunning(ctx, t, nil)

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Flag("headless", true))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	var link string
	if err := chromedp.Run(bctx,
		chromedp.Navigate(base),
		chromedp.WaitVisible(fmt.Sprintf(`#jobs tr[data-job=%q] a`, id), chromedp.ByQuery),
		chromedp.AttributeValue(fmt.Sprintf(`#jobs tr[data-job=%q] a`, id), "href", &link, nil, chromedp.ByQuery),
		chromedp.Click(fmt.Sprintf(`#jobs tr[data-job=%q] a`, id), chromedp.ByQuery),
		chromedp.WaitVisible(`#job-view`, chromedp.ByID),
	); err != nil {
		t.Fatalf("the job list: %v", err)
	}
	if link != "#job="+id {
		t.Errorf("the job's link is %q, want #job=%s", link, id)
	}
	var nodes, rows int
	var state, drainTitle string
	var drainDisabled bool
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := chromedp.Run(bctx,
			chromedp.Evaluate(`window.ksGraph ? window.ksGraph.nodes().length : 0`, &nodes),
			chromedp.Evaluate(`document.querySelectorAll("#tasks tbody tr[data-task]").length`, &rows),
			chromedp.Text(`#job-state`, &state, chromedp.ByID),
			chromedp.Evaluate(`document.getElementById("drain").disabled`, &drainDisabled),
			chromedp.AttributeValue(`#drain`, "title", &drainTitle, nil, chromedp.ByID),
		); err != nil {
			t.Fatalf("reading the job's page: %v", err)
		}
		if nodes >= 4 && rows == 6 && state == "RUNNING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's page shows %d graph nodes, %d task rows, state %q; want at least 4 nodes (2 Kafka topics, 2 sub-topologies), 6 tasks, RUNNING", nodes, rows, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !drainDisabled || !strings.Contains(drainTitle, "not built") {
		t.Errorf("Drain: disabled %v, title %q; want disabled, saying it is not built", drainDisabled, drainTitle)
	}
	var graphText string
	if err := chromedp.Run(bctx, chromedp.Evaluate(`window.ksGraph.nodes().map(n => n.data("label")).join("|")`, &graphText)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(graphText, "kafka-read") || !strings.Contains(graphText, "group-by-key") {
		t.Errorf("graph labels %q: want the kafka-read and group-by-key sub-topologies", graphText)
	}

	if path := os.Getenv("KSRUNNER_STATUS_SCREENSHOT"); path != "" { // to look at the page
		var png []byte
		if err := chromedp.Run(bctx, chromedp.EmulateViewport(1300, 1000), chromedp.Sleep(time.Second), chromedp.FullScreenshot(&png, 100)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Run(bctx,
		chromedp.Click(`#cancel`, chromedp.ByID),
		chromedp.WaitVisible(`#job-state.CANCELLED`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("pressing Cancel: %v", err)
	}
	st, err := client.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id})
	if err != nil || st.GetState() != jobpb.JobState_CANCELLED {
		t.Errorf("after Cancel on the page the Job API says %v (%v), want CANCELLED", st.GetState(), err)
	}
}
