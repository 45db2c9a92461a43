package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ksrunner/ksrunner/host"
)

// The job server serves the expansion service on expansion_port, says
// where once it listens, and stops it with itself.
func TestJobServerServesExpansion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runJobServer(ctx, []string{"--job_port=0", "--expansion_port=0", "--status_port=0", "--log_level=error"}, w)
		w.Close()
	}()
	endpoints := map[string]string{}
	lines := bufio.NewScanner(r)
	for len(endpoints) < 2 && lines.Scan() {
		if name, addr, ok := strings.Cut(lines.Text(), " endpoint: "); ok {
			endpoints[name] = addr
		}
	}
	go io.Copy(io.Discard, r)
	addr := endpoints["expansion"]
	if addr == "" || endpoints["job"] == "" || addr == endpoints["job"] {
		t.Fatalf("endpoints %v, want a job and an expansion endpoint (and %v)", endpoints, <-done)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") && !strings.HasPrefix(addr, "[::1]:") {
		t.Errorf("expansion endpoint %s is not on job_host (localhost)", addr)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := jobpb.NewExpansionServiceClient(conn).Expand(ctx, &jobpb.ExpansionRequest{
		Transform: &pipepb.PTransform{UniqueName: "X", Spec: &pipepb.FunctionSpec{Urn: "beam:transform:org.apache.beam:kafka_write:v1"}}})
	if err != nil {
		t.Fatal(err)
	}
	// An empty configuration: the service answered, refusing it.
	if !strings.Contains(res.GetError(), "kafka_write") {
		t.Errorf("expansion error %q, want one naming the transform's URN", res.GetError())
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("jobserver: %v", err)
	}
	if _, err := jobpb.NewExpansionServiceClient(conn).Expand(context.Background(), &jobpb.ExpansionRequest{}); err == nil {
		t.Error("the expansion service still answers after the job server stopped")
	}
}

func TestExpansionPortConfig(t *testing.T) {
	cfg, err := loadServerConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ExpansionPort != 8097 {
		t.Errorf("default expansion_port %d, want 8097", cfg.ExpansionPort)
	}
	t.Setenv("KSRUNNER_EXPANSION_PORT", "9001")
	if cfg, err = loadServerConfig(nil); err != nil || cfg.ExpansionPort != 9001 {
		t.Errorf("env: expansion_port %d (%v), want 9001", cfg.ExpansionPort, err)
	}
	if cfg, err = loadServerConfig([]string{"--expansion_port=0"}); err != nil || cfg.ExpansionPort != 0 {
		t.Errorf("flag over env: expansion_port %d (%v), want 0", cfg.ExpansionPort, err)
	}
	if _, err := loadServerConfig([]string{"--expansion_prot=1"}); err == nil {
		t.Error("a misspelt flag: no error")
	}
}

func TestStatusPortConfig(t *testing.T) {
	cfg, err := loadServerConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StatusPort != 8074 {
		t.Errorf("default status_port %d, want 8074", cfg.StatusPort)
	}
	t.Setenv("KSRUNNER_STATUS_PORT", "9074")
	if cfg, err = loadServerConfig(nil); err != nil || cfg.StatusPort != 9074 {
		t.Errorf("env: status_port %d (%v), want 9074", cfg.StatusPort, err)
	}
	if cfg, err = loadServerConfig([]string{"--status_port=0"}); err != nil || cfg.StatusPort != 0 {
		t.Errorf("flag over env: status_port %d (%v), want 0", cfg.StatusPort, err)
	}
	if _, err := loadServerConfig([]string{"--status_port=70000"}); err == nil || !strings.Contains(err.Error(), "status_port") {
		t.Errorf("status_port 70000: error %v, want one naming status_port", err)
	}
	f, err := parseWorkerFlags([]string{"--application_id=a", "--bootstrap_servers=b"})
	if err != nil || f.statusPort != 9074 {
		t.Errorf("worker: status_port %d (%v), want 9074 from KSRUNNER_STATUS_PORT", f.statusPort, err)
	}
	t.Setenv("KSRUNNER_STATUS_PORT", "x")
	if _, err := parseWorkerFlags(nil); err == nil || !strings.Contains(err.Error(), "KSRUNNER_STATUS_PORT") {
		t.Errorf("worker: KSRUNNER_STATUS_PORT=x: error %v, want one naming the variable", err)
	}
}

// TestJobHistoryConfig: job_history defaults to Beam's Java job server's
// history size, comes from the usual sources, and below 1 is an error naming
// the option and where its value came from.
func TestJobHistoryConfig(t *testing.T) {
	cfg, err := loadServerConfig(nil)
	if err != nil || cfg.JobHistory != host.DefaultJobHistory {
		t.Fatalf("default job_history %d (%v), want %d", cfg.JobHistory, err, host.DefaultJobHistory)
	}
	t.Setenv("KSRUNNER_JOB_HISTORY", "50")
	if cfg, err = loadServerConfig(nil); err != nil || cfg.JobHistory != 50 {
		t.Errorf("env: job_history %d (%v), want 50", cfg.JobHistory, err)
	}
	_, err = loadServerConfig([]string{"--job_history=0"})
	if err == nil || !strings.Contains(err.Error(), "option job_history: 0") || !strings.Contains(err.Error(), "flag --job_history") {
		t.Errorf("job_history 0: error %v, want one naming the option and the flag", err)
	}
}
