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
	CancelUnavailable                  string `json:"cancel_unavailable"`
	CanDrain                           bool   `json:"can_drain"`
	DrainUnavailable                   string `json:"drain_unavailable"`
	Drained                            bool
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

// statusRun is a job running on a job server with a status page.
type statusRun struct {
	base, id, appID, bootstrap, in, out string
	client                              jobpb.JobServiceClient
	// read is the input the job was given (of data); n its size.
	data countData
	read []countRec
	n    int
}

// statusJobRunning submits the windowed Kafka count (a Kafka read of 4
// partitions, a GroupByKey over 2, a Kafka write) to a job server with a
// status page, with 100 records in its input, and waits until the output
// shows they were processed.
func statusJobRunning(ctx context.Context, t *testing.T, extra map[string]string) statusRun {
	t.Helper()
	r := statusRun{bootstrap: kafkatest.Broker(t), n: 100}
	const partitions = 4
	r.in, r.out = countTopics(t, r.bootstrap, "status", partitions)
	r.data = newCountData(2*r.n, partitions)
	data := r.data
	want1, _ := data.halves(t)
	r.appID = kafkatest.UniqueName(t, "status")
	srv, client := startServer(t, host.DefaultOptions(), host.WithStatus(host.StatusConfig{Addr: "127.0.0.1:0"}))
	r.read = data.recs[:r.n]
	data.produce(ctx, t, r.bootstrap, r.in, r.read)
	opts := map[string]string{"application_id": r.appID, "bootstrap_servers": r.bootstrap, "internal_parallelism": "2", "source_idle_timeout_ms": "3600000"}
	for k, v := range extra {
		opts[k] = v
	}
	id, err := submit(ctx, t, client, kafkaCountPipeline(t, r.in, r.out), opts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { client.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	kafkatest.ReadCounts(ctx, t, r.bootstrap, r.out, len(want1))
	r.base, r.id, r.client = srv.StatusURL(), id, client
	return r
}

// waitAllRead waits until the status page shows the job's 4 source tasks
// consumed and committed every input record and its 2 group-by-key tasks,
// all owned by this process.
func (r statusRun) waitAllRead(t *testing.T) statusJob {
	t.Helper()
	return waitStatus(t, r.base, r.id, time.Minute, fmt.Sprintf("4 source tasks that consumed %d records, committed, and 2 group-by-key tasks, all owned here", r.n), func(j statusJob) bool {
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
		return src == 4 && gbk == 2 && in == int64(r.n) && committed == int64(r.n) && j.ClusterError == ""
	})
}

// TestStatusAPI: the status page's JSON API and /metrics show a running
// job on its broker: its state, its topology (the Kafka topics it reads and
// writes around its sub-topologies), every task with this process as its
// owner, the records its source tasks consumed (every input record), their
// lag and watermarks; Cancel and Drain are offered, require the page's
// header, and once Cancel ended the job both are refused saying why (Drain
// of an ended job: 409).
func TestStatusAPI(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	run := statusJobRunning(ctx, t, nil)
	base, id, appID := run.base, run.id, run.appID

	code, b := httpGet(t, base+"api/jobs")
	var list []struct{ ID, State string }
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil || len(list) != 1 || list[0].ID != id || list[0].State != "RUNNING" {
		t.Fatalf("GET api/jobs: %d %s (%v), want job %s RUNNING", code, b, err, id)
	}
	if code, _ := httpGet(t, base+"api/jobs/nope"); code != http.StatusNotFound {
		t.Errorf("GET api/jobs/nope: %d, want 404", code)
	}

	// The source tasks have consumed every record and committed them.
	j := run.waitAllRead(t)
	if j.State != "RUNNING" || j.ApplicationID != appID || j.Process != "jobserver" || len(j.Instance) != 16 || j.Commits == 0 {
		t.Errorf("job: state %s, application %s, process %s, instance %q, commits %d; want RUNNING, %s, jobserver, an instance id, commits", j.State, j.ApplicationID, j.Process, j.Instance, j.Commits, appID)
	}
	if !j.CanCancel || !j.CanDrain || j.DrainUnavailable != "" {
		t.Errorf("actions: can_cancel %v, can_drain %v (%q); want both", j.CanCancel, j.CanDrain, j.DrainUnavailable)
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

	// The probes: alive, and ready with the job consuming.
	if code, b := httpGet(t, base+"readyz"); code != http.StatusOK || string(b) != "ready: 1 jobs running\n" {
		t.Errorf("GET readyz: %d %q, want 200 with the running job", code, b)
	}
	if code, b := httpGet(t, base+"healthz"); code != http.StatusOK || string(b) != "ok\n" {
		t.Errorf("GET healthz: %d %q, want 200 ok", code, b)
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

	// The actions: without the page's header, refused; Cancel ends the
	// job; Drain then is refused, and the page says why.
	post := func(action string, header bool) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"api/jobs/"+id+"/"+action, nil)
		if header {
			req.Header.Set("X-Ksrunner-Action", action)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", action, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("drain", false); code != http.StatusForbidden {
		t.Errorf("POST drain without the header: %d, want 403", code)
	}
	if j := getStatusJob(t, base, id); j.State != "RUNNING" {
		t.Errorf("after the refused action the job is %s, want RUNNING", j.State)
	}
	if code := post("cancel", true); code != http.StatusOK {
		t.Errorf("POST cancel: %d, want 200", code)
	}
	j = waitStatus(t, base, id, time.Minute, "CANCELLED", func(j statusJob) bool { return j.State == "CANCELLED" })
	if j.CanCancel || j.CanDrain || j.Drained || j.CancelUnavailable != "the job has ended" || j.DrainUnavailable != "the job has ended" {
		t.Errorf("actions of the cancelled job: can_cancel %v (%q), can_drain %v (%q), drained %v; want neither, saying the job has ended, not drained",
			j.CanCancel, j.CancelUnavailable, j.CanDrain, j.DrainUnavailable, j.Drained)
	}
	if code := post("drain", true); code != http.StatusConflict {
		t.Errorf("POST drain of the cancelled job: %d, want 409", code)
	}
}

// TestStatusShowsWorkerTasks (issue 12's acceptance): a worker on a second
// state_dir takes tasks, and the job server's status page shows them owned
// by the worker's instance, while the worker's own status page and
// /metrics show them as its local tasks.
func TestStatusShowsWorkerTasks(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	run := statusJobRunning(ctx, t, map[string]string{"state_dir": t.TempDir()})
	base, id, appID, bootstrap := run.base, run.id, run.appID, run.bootstrap
	w, _ := startWorkerInProcess(ctx, t, appID, bootstrap, host.WithStatus(host.StatusConfig{Addr: "127.0.0.1:0"}))

	server := waitStatus(t, base, id, 90*time.Second, "tasks owned by this process and by another instance", func(j statusJob) bool {
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
	if wj.Process != "worker" || wj.Instance != workerInstance || wj.CanCancel || wj.CanDrain || !strings.Contains(wj.DrainUnavailable, "job server") {
		t.Errorf("worker's job: process %s, instance %s, can_cancel %v, can_drain %v (%q); want worker, %s (the owner the job server shows), neither (drain on the job server)",
			wj.Process, wj.Instance, wj.CanCancel, wj.CanDrain, wj.DrainUnavailable, workerInstance)
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

// TestStatusPageBrowser opens the status page of a running streaming job
// in Chromium: the job list links to the job, whose page draws the topology
// (its graph nodes) and lists the tasks; pressing Drain drains the job: it
// ends DONE, the page says "DONE (drained)" with Cancel and Drain disabled,
// and the output holds every window of the input, the ones no data had
// closed too, each once (issue 14).
func TestStatusPageBrowser(t *testing.T) {
	bin := browserPath(t)
	ctx := testContext(t, 3*time.Minute)
	run := statusJobRunning(ctx, t, nil)
	base, id, client := run.base, run.id, run.client

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
	if drainDisabled || drainTitle != "" {
		t.Errorf("Drain: disabled %v, title %q; want enabled", drainDisabled, drainTitle)
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
	// Drained once every input record is read, so every window is there
	// to fire.
	run.waitAllRead(t)
	all := run.data.windows(run.read)
	if closed := run.data.fired(run.read); len(closed) >= len(all) {
		t.Fatalf("test data: the input closes %d windows of %d: nothing left for the drain to fire", len(closed), len(all))
	}
	var cancelDisabled bool
	if err := chromedp.Run(bctx,
		chromedp.Click(`#drain`, chromedp.ByID),
		chromedp.WaitVisible(`#job-state.DONE`, chromedp.ByQuery),
		chromedp.Text(`#job-state`, &state, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById("cancel").disabled`, &cancelDisabled),
		chromedp.Evaluate(`document.getElementById("drain").disabled`, &drainDisabled),
		chromedp.AttributeValue(`#drain`, "title", &drainTitle, nil, chromedp.ByID),
	); err != nil {
		t.Fatalf("pressing Drain: %v", err)
	}
	if state != "DONE (drained)" || !cancelDisabled || !drainDisabled || drainTitle != "the job has ended" {
		t.Errorf("after Drain the page shows %q, Cancel disabled %v, Drain disabled %v (%q); want DONE (drained), both disabled, saying the job has ended",
			state, cancelDisabled, drainDisabled, drainTitle)
	}
	st, err := client.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id})
	if err != nil || st.GetState() != jobpb.JobState_DONE {
		t.Errorf("after Drain on the page the Job API says %v (%v), want DONE", st.GetState(), err)
	}
	kafkatest.CheckCounts(t, "after the drain", kafkatest.ReadCounts(ctx, t, run.bootstrap, run.out, -1), all)
}
