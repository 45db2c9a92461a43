package status

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/host/internal/metrics"
)

// fakeSource is one job whose Cancel is recorded.
type fakeSource struct {
	mu        sync.Mutex
	job       Job
	cancelled []string
}

func (f *fakeSource) Jobs(context.Context) []*Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.job
	return []*Job{&j}
}

func (f *fakeSource) Cancel(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != f.job.ID {
		return fmt.Errorf("cancel %s: %w", id, ErrNotFound)
	}
	f.cancelled = append(f.cancelled, id)
	f.job.State = "CANCELLED"
	return nil
}

func (f *fakeSource) Drain(id string) error { return fmt.Errorf("drain %s: %w", id, ErrUnsupported) }

func (f *fakeSource) Summaries() []JobSummary {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.job.ID == "" {
		return nil
	}
	return []JobSummary{f.job.summary()}
}

func varint(vs ...int64) []byte {
	var b bytes.Buffer
	for _, v := range vs {
		coder.EncodeVarInt(v, &b)
	}
	return b.Bytes()
}

func userInfo(urn, name string, payload []byte) *pipepb.MonitoringInfo {
	return &pipepb.MonitoringInfo{Urn: urn, Payload: payload, Labels: map[string]string{"NAMESPACE": "ns", "NAME": name, "PTRANSFORM": "t1"}}
}

func testJob() Job {
	attempted := []*pipepb.MonitoringInfo{
		userInfo(urnCounter, "seen", varint(7)),
		userInfo(urnDistribution, "sizes", varint(2, 10, 3, 7)),
		userInfo(urnGauge, "last", varint(1700000000000, 42)),
		{Urn: "beam:metric:element_count:v1", Payload: varint(5), Labels: map[string]string{"PCOLLECTION": "p"}},
	}
	committed := []*pipepb.MonitoringInfo{userInfo(urnCounter, "seen", varint(5))}
	local := metrics.NewInstance()
	local.SetID("00000000000000aa")
	local.Assigned(metrics.TaskRef{SubTopology: 0, Partition: 1}, "in")
	local.Consumed(metrics.TaskRef{SubTopology: 0, Partition: 1}, 12, 3)
	local.Cycle(true)
	local.Cycle(false)
	local.Bounds(1500*time.Millisecond, 375, 1000)
	snap := local.Snapshot()
	cluster := []Task{
		{SubTopology: 0, Partition: 0, Topic: "in", Source: true, Owner: "00000000000000bb", Committed: 4, End: 9, Lag: 5, RatePerSec: -1},
		{SubTopology: 0, Partition: 1, Topic: "in", Source: true, Owner: "00000000000000aa", Committed: 12, End: 12, Lag: 0, RatePerSec: 2, Watermark: 1_700_000_000_000, HasWatermark: true},
	}
	return Job{ID: "job-1", Name: "job", State: "RUNNING", ApplicationID: "app", Process: "jobserver", Instance: snap.ID,
		Commits: snap.Commits, Aborts: snap.Aborts, CanCancel: true, DrainUnavailable: "the job is draining",
		LastCycleSeconds: snap.LastCycle.Seconds(), CycleBound: snap.CycleBound, FireBound: snap.FireBound,
		Tasks:   MergeTasks(cluster, snap, map[int]string{0: "in"}, map[int]bool{0: true}),
		Metrics: UserMetrics(attempted, committed)}
}

func serve(t *testing.T, src Source) *httptest.Server {
	t.Helper()
	s := &Server{src: src}
	ts := httptest.NewServer(s.routes())
	t.Cleanup(ts.Close)
	return ts
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAPI(t *testing.T) {
	src := &fakeSource{job: testJob()}
	ts := serve(t, src)
	code, body := get(t, ts.URL+"/api/jobs/job-1")
	var j Job
	if err := json.Unmarshal([]byte(body), &j); code != 200 || err != nil {
		t.Fatalf("GET /api/jobs/job-1: %d %v %s", code, err, body)
	}
	if len(j.Tasks) != 2 || j.Tasks[0].Local || !j.Tasks[1].Local || j.Tasks[1].Instance == nil || j.Tasks[1].Instance.RecordsIn != 12 || j.Tasks[1].Instance.Lag != 3 || j.Tasks[0].Instance != nil {
		t.Errorf("tasks %+v: want task 0/0 another instance's, 0/1 this one's with 12 records in and lag 3", j.Tasks)
	}
	if j.Commits != 1 || j.Aborts != 1 {
		t.Errorf("commits %d aborts %d, want 1 and 1", j.Commits, j.Aborts)
	}
	if len(j.Metrics) != 3 {
		t.Fatalf("metrics %+v: want the 3 user metrics, not the system one", j.Metrics)
	}
	for _, m := range j.Metrics {
		switch m.Name {
		case "seen":
			if m.Kind != "counter" || m.Attempted[0] != 7 || m.Committed[0] != 5 {
				t.Errorf("counter %+v: want attempted 7, committed 5", m)
			}
		case "sizes":
			if m.Kind != "distribution" || fmt.Sprint(m.Attempted) != "[2 10 3 7]" || m.Committed != nil {
				t.Errorf("distribution %+v: want attempted [2 10 3 7], no committed", m)
			}
		case "last":
			if m.Kind != "gauge" || m.Attempted[0] != 42 {
				t.Errorf("gauge %+v: want 42", m)
			}
		}
	}
	if code, body := get(t, ts.URL+"/api/jobs"); code != 200 || !strings.Contains(body, `"id":"job-1"`) {
		t.Errorf("GET /api/jobs: %d %s", code, body)
	}
	if code, _ := get(t, ts.URL+"/api/jobs/other"); code != 404 {
		t.Errorf("GET /api/jobs/other: %d, want 404", code)
	}

	post := func(path string, header bool) int {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+path, nil)
		if header {
			req.Header.Set(actionHeader, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post("/api/jobs/job-1/cancel", false); c != http.StatusForbidden || len(src.cancelled) != 0 {
		t.Errorf("cancel without %s: %d, cancelled %v; want 403 and nothing cancelled", actionHeader, c, src.cancelled)
	}
	if c := post("/api/jobs/other/cancel", true); c != http.StatusNotFound {
		t.Errorf("cancel of an unknown job: %d, want 404", c)
	}
	if c := post("/api/jobs/job-1/drain", true); c != http.StatusNotImplemented {
		t.Errorf("drain: %d, want 501", c)
	}
	if c := post("/api/jobs/job-1/cancel", true); c != http.StatusOK || len(src.cancelled) != 1 {
		t.Errorf("cancel: %d, cancelled %v; want 200 and job-1 cancelled", c, src.cancelled)
	}
	if c := post("/api/jobs/job-1", true); c != http.StatusMethodNotAllowed {
		t.Errorf("POST to a job: %d, want 405", c)
	}
}

func TestMetrics(t *testing.T) {
	ts := serve(t, &fakeSource{job: testJob()})
	code, body := get(t, ts.URL+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	for _, want := range []string{
		`ksrunner_job_info{application_id="app",instance="00000000000000aa",job="job-1",name="job",process="jobserver",state="RUNNING"} 1`,
		`ksrunner_job_commits_total{application_id="app",job="job-1"} 1`,
		`ksrunner_job_aborts_total{application_id="app",job="job-1"} 1`,
		`ksrunner_job_last_cycle_seconds{application_id="app",job="job-1"} 1.5`,
		`ksrunner_job_cycle_bound_elements{application_id="app",job="job-1"} 375`,
		`ksrunner_job_fire_bound_groups{application_id="app",job="job-1"} 1000`,
		`ksrunner_task_owner_info{application_id="app",job="job-1",local="false",owner="00000000000000bb",partition="0",source="true",sub_topology="0",topic="in"} 1`,
		`ksrunner_task_owner_info{application_id="app",job="job-1",local="true",owner="00000000000000aa",partition="1",source="true",sub_topology="0",topic="in"} 1`,
		`ksrunner_task_lag_records{application_id="app",job="job-1",partition="0",source="true",sub_topology="0",topic="in"} 5`,
		`ksrunner_task_watermark_seconds{application_id="app",job="job-1",partition="1",source="true",sub_topology="0",topic="in"} 1.7e+09`,
		`ksrunner_task_records_in_total{application_id="app",job="job-1",partition="1",source="true",sub_topology="0",topic="in"} 12`,
		`ksrunner_user_counter{application_id="app",job="job-1",name="seen",namespace="ns",result="attempted",transform="t1"} 7`,
		`ksrunner_user_counter{application_id="app",job="job-1",name="seen",namespace="ns",result="committed",transform="t1"} 5`,
		`ksrunner_user_distribution_max{application_id="app",job="job-1",name="sizes",namespace="ns",result="attempted",transform="t1"} 7`,
		`ksrunner_user_gauge{application_id="app",job="job-1",name="last",namespace="ns",result="attempted",transform="t1"} 42`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("no %s in /metrics", want)
		}
	}
	// The other instance's task has no local figures.
	if strings.Contains(body, `ksrunner_task_records_in_total{application_id="app",job="job-1",partition="0"`) {
		t.Error("/metrics counts records of a task this instance never ran")
	}
}

func TestPageAssets(t *testing.T) {
	ts := serve(t, &fakeSource{job: testJob()})
	for path, want := range map[string]string{
		"/":                              `<script src="app.js">`,
		"/app.js":                        "api/jobs",
		"/vendor/cytoscape.min.js":       "cytoscape",
		"/vendor/cytoscape-dagre.min.js": "dagre",
	} {
		if code, body := get(t, ts.URL+path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q", path, code, want)
		}
	}
}

func TestStartClose(t *testing.T) {
	wrapped := 0
	s, err := Start(&fakeSource{job: testJob()}, Options{Addr: "127.0.0.1:0", Middleware: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wrapped++
			if r.Header.Get("Authorization") != "Bearer t" {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, s.URL()+"api/jobs"); code != http.StatusUnauthorized || wrapped != 1 {
		t.Errorf("without the token: %d (middleware ran %d times), want 401 from the middleware", code, wrapped)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"api/jobs", nil)
	req.Header.Set("Authorization", "Bearer t")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("with the token: %v %v, want 200", resp, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := http.Get(s.URL() + "api/jobs"); err == nil {
		t.Error("the server still answers after Close")
	}
	if _, err := Start(&fakeSource{}, Options{Addr: "127.0.0.1:-1"}); err == nil || !strings.Contains(err.Error(), "status page") {
		t.Errorf("a bad address: %v, want an error naming the status page", err)
	}
}

// The probes: /healthz answers; /readyz is 503 naming a job that has not
// started consuming, 200 once it runs, for a process without jobs and for
// one whose jobs ended.
func TestProbes(t *testing.T) {
	src := &fakeSource{}
	ts := serve(t, src)
	if code, body := get(t, ts.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("GET /healthz: %d %q", code, body)
	}
	for _, c := range []struct {
		state string // "": no job
		code  int
		body  string
	}{
		{"", 200, "ready: 0 jobs running\n"},
		{"STOPPED", 503, "not ready: job job-1 (count) of application app is STOPPED\n"},
		{"STARTING", 503, "not ready: job job-1 (count) of application app is STARTING\n"},
		{"RUNNING", 200, "ready: 1 jobs running\n"},
		{"DRAINING", 200, "ready: 1 jobs running\n"},
		{"FAILED", 200, "ready: 0 jobs running\n"},
		{"CANCELLED", 200, "ready: 0 jobs running\n"},
	} {
		src.mu.Lock()
		src.job = Job{}
		if c.state != "" {
			src.job = Job{ID: "job-1", Name: "count", ApplicationID: "app", State: c.state}
		}
		src.mu.Unlock()
		if code, body := get(t, ts.URL+"/readyz"); code != c.code || body != c.body {
			t.Errorf("job %q: GET /readyz %d %q, want %d %q", c.state, code, body, c.code, c.body)
		}
	}
}
