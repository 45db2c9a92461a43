package host_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/container/tools"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/endpoint"
	"github.com/ksrunner/ksrunner/host/endpoint/testcerts"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/host/jobtest"
)

// guardedFiles writes a CA, a server certificate for 127.0.0.1 and a
// token: the endpoint security of a job server reachable beyond loopback.
func guardedFiles(t *testing.T) (endpoint.Security, *testcerts.CA, string) {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	srv := ca.Issue(t, "job server", "127.0.0.1", "localhost")
	return endpoint.Security{
		TLSCertFile:   testcerts.Write(t, dir, "server.pem", srv.CertPEM),
		TLSKeyFile:    testcerts.Write(t, dir, "server-key.pem", srv.KeyPEM),
		AuthTokenFile: testcerts.Write(t, dir, "token", []byte("s3cret-token\n")),
	}, ca, "s3cret-token"
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// dialTLS dials a guarded endpoint at addr over TLS (roots: ca), sending
// token if not empty.
func dialTLS(t *testing.T, addr string, ca *testcerts.CA, token string) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool}))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// portOf is the port of a listener's address.
func portOf(t *testing.T, endpoint string) string {
	_, p, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJobEndpointBeyondLoopback: a job server asked to listen beyond
// loopback refuses without TLS and a token (naming the address and what is
// missing), listens with them, and then every service (Job API, artifact
// staging; unary and streaming calls) refuses a call without the right
// token; insecure_bind listens anyway and warns.
func TestJobEndpointBeyondLoopback(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := host.NewJobServer("0.0.0.0:0", host.DefaultOptions(), quiet)
	for _, want := range []string{"0.0.0.0:0 is not a loopback address", "TLS (tls_cert_file, tls_key_file)", "a bearer token (auth_token_file)", "insecure_bind"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("NewJobServer on 0.0.0.0 without security: %v, want an error containing %q", err, want)
		}
	}
	sec, ca, token := guardedFiles(t)
	tlsOnly := sec
	tlsOnly.AuthTokenFile = ""
	if _, err := host.NewJobServer("0.0.0.0:0", host.DefaultOptions(), quiet, host.WithEndpointSecurity(tlsOnly)); err == nil || !strings.Contains(err.Error(), "auth_token_file") || strings.Contains(err.Error(), "tls_cert_file") {
		t.Fatalf("NewJobServer on 0.0.0.0 with TLS, no token: %v, want an error naming auth_token_file only", err)
	}

	var logs testkit.SyncBuffer
	insecure, err := host.NewJobServer("0.0.0.0:0", host.DefaultOptions(), slog.New(slog.NewTextHandler(&logs, nil)), host.WithEndpointSecurity(endpoint.Security{InsecureBind: true}))
	if err != nil {
		t.Fatalf("insecure_bind: %v", err)
	}
	insecure.Stop()
	if l := logs.String(); !strings.Contains(l, "INSECURE BIND") || !strings.Contains(l, "WITHOUT TLS") {
		t.Errorf("insecure_bind logged no warning: %s", l)
	}

	srv, err := host.NewJobServer("0.0.0.0:0", host.DefaultOptions(), quiet, host.WithEndpointSecurity(sec))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(srv.Stop)
	addr := "127.0.0.1:" + portOf(t, srv.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, c := range []struct{ name, token, want string }{
		{"no token", "", "no bearer token"},
		{"wrong token", "guess", "wrong bearer token"},
	} {
		cc := dialTLS(t, addr, ca, c.token)
		jobs := jobpb.NewJobServiceClient(cc)
		_, err := jobs.GetJobs(ctx, &jobpb.GetJobsRequest{})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: GetJobs: %v, want Unauthenticated: %s", c.name, err, c.want)
		}
		if _, err := jobs.Prepare(ctx, &jobpb.PrepareJobRequest{Pipeline: &pipepb.Pipeline{}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: Prepare: %v, want Unauthenticated", c.name, err)
		}
		if st, err := jobs.GetStateStream(ctx, &jobpb.GetJobStateRequest{JobId: "x"}); err == nil {
			if _, err = st.Recv(); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: GetStateStream: %v, want Unauthenticated", c.name, err)
			}
		}
		st, err := jobpb.NewArtifactStagingServiceClient(cc).ReverseArtifactRetrievalService(ctx)
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: artifact staging: %v, want Unauthenticated", c.name, err)
		}
	}
	// Plaintext to a TLS endpoint: no answer.
	if _, err := jobpb.NewJobServiceClient(dialPlain(t, addr)).GetJobs(ctx, &jobpb.GetJobsRequest{}); err == nil {
		t.Error("GetJobs in plaintext: no error")
	}

	jobs := jobpb.NewJobServiceClient(dialTLS(t, addr, ca, token))
	if _, err := jobs.GetJobs(ctx, &jobpb.GetJobsRequest{}); err != nil {
		t.Fatalf("GetJobs with the token: %v", err)
	}
	prep, err := jobs.Prepare(ctx, &jobpb.PrepareJobRequest{Pipeline: &pipepb.Pipeline{}, JobName: "p"})
	if err != nil {
		t.Fatalf("Prepare with the token: %v", err)
	}
	// The artifact staging endpoint is the address the client dialed, not
	// the wildcard the server listens on.
	if got := prep.GetArtifactStagingEndpoint().GetUrl(); got != addr {
		t.Errorf("artifact staging endpoint %q, want %q (the address dialed)", got, addr)
	}
}

func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentialsInsecure()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// processPipeline is a one-ParDo pipeline whose SDK environment is the
// PROCESS environment running command.
func processPipeline(t *testing.T, command string) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo0(s, drop, beam.ParDo(s, passThrough, beam.CreateList(s, []string{"a"})))
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	env, err := graphx.CreateEnvironment(context.Background(), graphx.URNEnvProcess, func(context.Context) string { return `{"command": "` + command + `"}` })
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	return pipe
}

// prepareAndRun submits pipe without staging (the refusals come first).
func prepareAndRun(ctx context.Context, t *testing.T, jobs jobpb.JobServiceClient, pipe *pipepb.Pipeline) error {
	t.Helper()
	st, err := tools.OptionsToProto(runtime.RawOptionsWrapper{Options: runtime.RawOptions{Options: map[string]string{}}, AppName: "process"})
	if err != nil {
		t.Fatal(err)
	}
	prep, err := jobs.Prepare(ctx, &jobpb.PrepareJobRequest{Pipeline: pipe, PipelineOptions: st, JobName: "process"})
	if err != nil {
		return err
	}
	_, err = jobs.Run(ctx, &jobpb.RunJobRequest{PreparationId: prep.GetPreparationId()})
	return err
}

// TestProcessEnvironmentRefused: a job server refuses, at submission and
// naming the environment, a pipeline whose stage runs in a PROCESS
// environment when allow_process_environments is off: by default when it
// listens beyond loopback, or when set off.
func TestProcessEnvironmentRefused(t *testing.T) {
	ctx := testContext(t, time.Minute)
	pipe := processPipeline(t, "/bin/sh")
	var envID string
	for id := range pipe.GetComponents().GetEnvironments() {
		envID = id
	}
	check := func(name string, err error) {
		t.Helper()
		for _, want := range []string{`environment "` + envID + `" is a PROCESS environment (command "/bin/sh")`, "allow_process_environments"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want a refusal containing %q", name, err, want)
			}
		}
	}
	// Off on loopback.
	off, err := jobtest.Start(host.DefaultOptions(), host.WithProcessEnvironments(false))
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	check("allow_process_environments=false", prepareAndRun(ctx, t, off.Client, pipe))

	// Off by default beyond loopback.
	sec, ca, token := guardedFiles(t)
	srv, err := host.NewJobServer("0.0.0.0:0", host.DefaultOptions(), slog.New(slog.NewTextHandler(io.Discard, nil)), host.WithEndpointSecurity(sec))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Stop()
	jobs := jobpb.NewJobServiceClient(dialTLS(t, "127.0.0.1:"+portOf(t, srv.Endpoint()), ca, token))
	check("beyond loopback, default", prepareAndRun(ctx, t, jobs, pipe))
}

// TestBootstrapServersRefused: a job whose bootstrap_servers pipeline
// option names brokers allowed_bootstrap_servers does not allow is refused
// at submission, naming the option and the address.
func TestBootstrapServersRefused(t *testing.T) {
	ctx := testContext(t, time.Minute)
	e, err := jobtest.Start(host.DefaultOptions(), host.WithAllowedBootstrapServers([]string{"kafka-*.internal:9093"}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Submit(ctx, t, e.Marshal(t, faultPipeline(t, "a")), map[string]string{"bootstrap_servers": "kafka-1.internal:9093,attacker.example:9092"})
	want := `pipeline option bootstrap_servers: address "attacker.example:9092" is not allowed by the job server's option allowed_bootstrap_servers`
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), want) {
		t.Fatalf("submit: %v, want PermissionDenied: %s", err, want)
	}
}

// TestStateDirRefused: a job whose state_dir's parent does not exist is
// refused at submission, naming the option.
func TestStateDirRefused(t *testing.T) {
	ctx := testContext(t, time.Minute)
	_, err := env.Submit(ctx, t, env.Marshal(t, faultPipeline(t, "a")), map[string]string{"state_dir": "/nonexistent-ksrunner/state"})
	if err == nil || !strings.Contains(err.Error(), `pipeline option state_dir: "/nonexistent-ksrunner/state": its parent directory /nonexistent-ksrunner does not exist`) {
		t.Fatalf("submit: %v, want a refusal naming pipeline option state_dir", err)
	}
}

func credentialsInsecure() credentials.TransportCredentials { return insecure.NewCredentials() }

// fakePool is an SDK worker pool that, asked to start a worker, fetches a
// file from the runner's artifact service, as a worker would, and reports
// what it got; it starts no worker.
type fakePool struct {
	fnpb.UnimplementedBeamFnExternalWorkerPoolServer
	path string
	got  chan error
}

func (p *fakePool) StartWorker(ctx context.Context, req *fnpb.StartWorkerRequest) (*fnpb.StartWorkerResponse, error) {
	err := func() error {
		cc, err := grpc.NewClient(req.GetArtifactEndpoint().GetUrl(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		payload, _ := proto.Marshal(&pipepb.ArtifactFilePayload{Path: p.path})
		st, err := jobpb.NewArtifactRetrievalServiceClient(cc).GetArtifact(ctx, &jobpb.GetArtifactRequest{
			Artifact: &pipepb.ArtifactInformation{TypeUrn: "beam:artifact:type:file:v1", TypePayload: payload}})
		if err != nil {
			return err
		}
		var data []byte
		for {
			r, err := st.Recv()
			if err == io.EOF {
				return fmt.Errorf("served %q", data)
			}
			if err != nil {
				return err
			}
			data = append(data, r.GetData()...)
		}
	}()
	p.got <- err
	return &fnpb.StartWorkerResponse{Error: "fake pool: starts no worker"}, nil
}

func (p *fakePool) StopWorker(context.Context, *fnpb.StopWorkerRequest) (*fnpb.StopWorkerResponse, error) {
	return &fnpb.StopWorkerResponse{}, nil
}

// TestUnstagedArtifactNotServed: an EXTERNAL environment that declares a
// local file as a FILE artifact without staging it (what a pipeline naming
// /etc/shadow does) does not get it from the runner's artifact service: a
// worker of the job asking for it is refused, naming it.
func TestUnstagedArtifactNotServed(t *testing.T) {
	ctx := testContext(t, time.Minute)
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root:secret-hash:"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := &fakePool{path: secret, got: make(chan error, 4)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	fnpb.RegisterBeamFnExternalWorkerPoolServer(gs, pool)
	go gs.Serve(lis)
	defer gs.Stop()

	pipe := jobtest.MarshalLoopback(t, faultPipeline(t, "a"), func(context.Context) string { return lis.Addr().String() }, secret)
	payload, _ := proto.Marshal(&pipepb.ArtifactFilePayload{Path: secret})
	for _, e := range pipe.GetComponents().GetEnvironments() {
		e.Dependencies = append(e.Dependencies, &pipepb.ArtifactInformation{TypeUrn: "beam:artifact:type:file:v1", TypePayload: payload})
	}
	if err := prepareAndRun(ctx, t, env.Client, pipe); err != nil { // no staging
		t.Fatalf("submit: %v", err)
	}
	select {
	case err := <-pool.got:
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), secret+" of job") || !strings.Contains(err.Error(), "was not staged for the job") {
			t.Fatalf("fetching the unstaged file: %v, want PermissionDenied naming it", err)
		}
	case <-ctx.Done():
		t.Fatal("the runner never asked the pool for a worker")
	}
}

// TestStatusEndpointGuarded: the status page and /metrics listen like the
// job endpoint: beyond loopback only with TLS and the token, and every
// request must carry the token.
func TestStatusEndpointGuarded(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sec, ca, token := guardedFiles(t)
	// The job endpoint on loopback needs nothing; the status endpoint
	// beyond it is refused without TLS and the token.
	_, err := host.NewJobServer("127.0.0.1:0", host.DefaultOptions(), quiet, host.WithStatus(host.StatusConfig{Addr: "0.0.0.0:0"}))
	if err == nil || !strings.Contains(err.Error(), "status endpoint") || !strings.Contains(err.Error(), "auth_token_file") {
		t.Fatalf("status page on 0.0.0.0 without security: %v, want an error naming the status endpoint and auth_token_file", err)
	}

	srv, err := host.NewJobServer("127.0.0.1:0", host.DefaultOptions(), quiet, host.WithEndpointSecurity(sec), host.WithStatus(host.StatusConfig{Addr: "0.0.0.0:0"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	u := srv.StatusURL()
	if !strings.HasPrefix(u, "https://") {
		t.Fatalf("status URL %q, want https", u)
	}
	port := portOf(t, strings.TrimSuffix(strings.TrimPrefix(u, "https://"), "/"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 30 * time.Second}
	get := func(path, tok string) int {
		req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+port+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, path := range []string{"/", "/metrics", "/api/jobs"} {
		if c := get(path, ""); c != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, c)
		}
		if c := get(path, "guess"); c != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, c)
		}
		if c := get(path, token); c != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, c)
		}
	}
}

// TestEmbeddedPythonEnvironmentRefused: a pipeline whose SDK environment is
// the Python SDK's EMBEDDED_PYTHON (what Beam's own Python tests submit by
// default) is refused at submission with what to submit instead, not left
// waiting for a worker that never connects.
func TestEmbeddedPythonEnvironmentRefused(t *testing.T) {
	ctx := testContext(t, time.Minute)
	pipe := processPipeline(t, "/bin/sh")
	var envID string
	for id, env := range pipe.GetComponents().GetEnvironments() {
		envID = id
		env.Urn, env.Payload = "beam:env:embedded_python:v1", nil
	}
	e, err := jobtest.Start(host.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	err = prepareAndRun(ctx, t, e.Client, pipe)
	want := `environment "` + envID + `" is EMBEDDED_PYTHON (beam:env:embedded_python:v1), which runs the SDK harness inside the runner's own process: only Python runners can; submit with --environment_type=LOOPBACK, EXTERNAL or PROCESS`
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("submit: %v, want InvalidArgument: %s", err, want)
	}
}
