package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/grpcx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ksrunner/ksrunner/host/endpoint/testcerts"
)

// TestSecurityConfig: the security options come from flags, the
// environment and the config file like the others; combinations that
// cannot work fail at startup, naming the option.
func TestSecurityConfig(t *testing.T) {
	cfg, err := loadServerConfig([]string{"--tls_cert_file=/c.pem", "--tls_key_file=/k.pem", "--tls_client_ca_file=/ca.pem", "--auth_token_file=/tok",
		"--allow_process_environments", "--allowed_bootstrap_servers=a:1,b:2", "--security_protocol=SASL_SSL", "--sasl_mechanism=SCRAM-SHA-512",
		"--sasl_username=u", "--sasl_password_file=/pw", "--ssl_ca_file=/kca.pem", "--ssl_cert_file=/kc.pem", "--ssl_key_file=/kk.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLSCertFile != "/c.pem" || cfg.TLSKeyFile != "/k.pem" || cfg.TLSClientCAFile != "/ca.pem" || cfg.AuthTokenFile != "/tok" || cfg.InsecureBind {
		t.Errorf("endpoint security %+v", cfg.Security)
	}
	if allow, _ := cfg.processEnvironments(); allow == nil || !*allow {
		t.Errorf("allow_process_environments %q", cfg.AllowProcessEnvironments)
	}
	if !slices.Equal(cfg.AllowedBootstrapServers, []string{"a:1", "b:2"}) {
		t.Errorf("allowed_bootstrap_servers %q", cfg.AllowedBootstrapServers)
	}
	if k := cfg.KafkaSecurity; k.Protocol != "SASL_SSL" || k.Mechanism != "SCRAM-SHA-512" || k.Username != "u" || k.PasswordFile != "/pw" || k.CAFile != "/kca.pem" || k.CertFile != "/kc.pem" || k.KeyFile != "/kk.pem" {
		t.Errorf("kafka security %+v", k)
	}

	// Defaults: nothing, process environments "auto".
	if cfg, err = loadServerConfig(nil); err != nil {
		t.Fatal(err)
	}
	if allow, _ := cfg.processEnvironments(); allow != nil || !cfg.KafkaSecurity.Empty() || cfg.Security.AuthTokenFile != "" {
		t.Errorf("defaults: %+v %+v %q", cfg.Security, cfg.KafkaSecurity, cfg.AllowProcessEnvironments)
	}

	// Environment and file.
	t.Setenv("KSRUNNER_ALLOWED_BOOTSTRAP_SERVERS", "x:1,y:2")
	t.Setenv("KSRUNNER_INSECURE_BIND", "true")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("allow_process_environments: false\nsecurity_protocol: SSL\nssl_ca_file: /f.pem\n"), 0o644)
	if cfg, err = loadServerConfig([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	if allow, _ := cfg.processEnvironments(); allow == nil || *allow || !cfg.InsecureBind || cfg.KafkaSecurity.CAFile != "/f.pem" ||
		!slices.Equal(cfg.AllowedBootstrapServers, []string{"x:1", "y:2"}) {
		t.Errorf("env and file: %+v %+v %q %q", cfg.Security, cfg.KafkaSecurity, cfg.AllowProcessEnvironments, cfg.AllowedBootstrapServers)
	}
	os.Unsetenv("KSRUNNER_ALLOWED_BOOTSTRAP_SERVERS")
	os.Unsetenv("KSRUNNER_INSECURE_BIND")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow_process_environments=maybe"}, `option allow_process_environments: "maybe"`},
		{[]string{"--tls_cert_file=/c.pem"}, "tls_cert_file and tls_key_file"},
		{[]string{"--tls_client_ca_file=/ca.pem"}, "option tls_client_ca_file"},
		{[]string{"--security_protocol=SASL_SSL"}, "option sasl_mechanism: required"},
		{[]string{"--ssl_ca_file=/ca.pem"}, "option ssl_ca_file: set, but security_protocol PLAINTEXT"},
		{[]string{"--state_dir=/nonexistent-ksrunner/state"}, "option state_dir"},
	} {
		if _, err := loadServerConfig(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestWorkerSecurityFlags: the worker takes the Kafka security options
// and allow_process_environments, as flags or KSRUNNER_* variables.
func TestWorkerSecurityFlags(t *testing.T) {
	t.Setenv("KSRUNNER_SASL_USERNAME", "w")
	t.Setenv("KSRUNNER_ALLOW_PROCESS_ENVIRONMENTS", "false")
	f, err := parseWorkerFlags([]string{"--application_id=a", "--bootstrap_servers=b:1", "--security_protocol=SASL_PLAINTEXT", "--sasl_mechanism=PLAIN", "--sasl_password_file=/pw"})
	if err != nil {
		t.Fatal(err)
	}
	if f.kafka.Protocol != "SASL_PLAINTEXT" || f.kafka.Username != "w" || f.kafka.PasswordFile != "/pw" || f.allowProcess {
		t.Errorf("worker flags %+v, allow process %v", f.kafka, f.allowProcess)
	}
	if _, err := parseWorkerFlags([]string{"--security_protocol=SASL_PLAINTEXT"}); err == nil || !strings.Contains(err.Error(), "option sasl_mechanism") {
		t.Errorf("SASL without a mechanism: %v", err)
	}
}

// guardedJobServer runs `ksrunner jobserver` on 0.0.0.0 with TLS and a
// token; it returns the CA, the token file and the job and expansion
// addresses on 127.0.0.1.
func guardedJobServer(t *testing.T) (ca *testcerts.CA, tokenFile, caFile, job, expansion string) {
	t.Helper()
	dir := t.TempDir()
	ca = testcerts.NewCA(t, "test CA")
	srv := ca.Issue(t, "job server", "127.0.0.1")
	caFile = testcerts.Write(t, dir, "ca.pem", ca.PEM)
	tokenFile = testcerts.Write(t, dir, "token", []byte("tok-123\n"))
	args := []string{"--job_host=0.0.0.0", "--job_port=0", "--expansion_port=0", "--log_level=error",
		"--tls_cert_file=" + testcerts.Write(t, dir, "srv.pem", srv.CertPEM), "--tls_key_file=" + testcerts.Write(t, dir, "srv-key.pem", srv.KeyPEM),
		"--auth_token_file=" + tokenFile}

	// Without TLS and a token it does not start.
	if err := runJobServer(context.Background(), []string{"--job_host=0.0.0.0", "--job_port=0", "--log_level=error"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "job endpoint: 0.0.0.0:0 is not a loopback address") {
		t.Fatalf("jobserver on 0.0.0.0 without TLS and a token: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runJobServer(ctx, args, w)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("jobserver: %v", err)
		}
	})
	endpoints := map[string]string{}
	lines := bufio.NewScanner(r)
	for len(endpoints) < 2 && lines.Scan() {
		if name, addr, ok := strings.Cut(lines.Text(), " endpoint: "); ok {
			_, port, _ := net.SplitHostPort(addr)
			endpoints[name] = "127.0.0.1:" + port
		}
	}
	go io.Copy(io.Discard, r)
	if len(endpoints) < 2 {
		t.Fatalf("jobserver printed %v", endpoints)
	}
	return ca, tokenFile, caFile, endpoints["job"], endpoints["expansion"]
}

// startTestProxy runs `ksrunner proxy` with args and returns the local
// addresses it prints, in order.
func startTestProxy(t *testing.T, args []string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runProxy(ctx, args, w)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	var locals []string
	lines := bufio.NewScanner(r)
	for len(locals) < strings.Count(strings.Join(args, " "), "--forward") && lines.Scan() {
		if l, ok := strings.CutPrefix(lines.Text(), "proxy: "); ok {
			local, _, _ := strings.Cut(l, " -> ")
			locals = append(locals, local)
		}
	}
	go io.Copy(io.Discard, r)
	return locals
}

// TestGoSDKThroughProxy: a Go SDK pipeline runs on a job server that
// listens beyond loopback with TLS and a token, through `ksrunner proxy`
// (job and expansion endpoints), which also forwards the artifact staging
// the Job API's Prepare points at; the endpoints refuse calls without the
// token.
func TestGoSDKThroughProxy(t *testing.T) {
	ca, tokenFile, caFile, job, exp := guardedJobServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Directly, without TLS or without the token: refused.
	plain, err := grpc.NewClient(job, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := jobpb.NewJobServiceClient(plain).GetJobs(ctx, &jobpb.GetJobsRequest{}); err == nil {
		t.Error("GetJobs in plaintext to the TLS endpoint: no error")
	}

	// The expansion endpoint over TLS but without the token: refused.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	noToken, err := grpc.NewClient(exp, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer noToken.Close()
	if _, err := jobpb.NewExpansionServiceClient(noToken).Expand(ctx, &jobpb.ExpansionRequest{}); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expansion endpoint") {
		t.Errorf("Expand without the token: %v, want Unauthenticated", err)
	}

	locals := startTestProxy(t, []string{"--forward=127.0.0.1:0=" + job, "--forward=localhost:0=" + exp, "--tls_ca_file=" + caFile, "--auth_token_file=" + tokenFile, "--log_level=error"})
	if len(locals) != 2 {
		t.Fatalf("proxy listens on %q, want 2 addresses", locals)
	}
	// The expansion service answers through the proxy.
	cc, err := grpc.NewClient(locals[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	res, err := jobpb.NewExpansionServiceClient(cc).Expand(ctx, &jobpb.ExpansionRequest{
		Transform: &pipepb.PTransform{UniqueName: "X", Spec: &pipepb.FunctionSpec{Urn: "beam:transform:org.apache.beam:kafka_write:v1"}}})
	if err != nil || !strings.Contains(res.GetError(), "kafka_write") {
		t.Errorf("Expand through the proxy: %v, %v", res.GetError(), err)
	}

	// A Go SDK pipeline, submitted (prepare, stage, run, follow) through
	// the proxy.
	*jobopts.Endpoint = locals[0]
	*jobopts.EnvironmentType = "LOOPBACK"
	defer func() { *jobopts.Endpoint = "" }()
	if _, err := universal.Execute(ctx, sumPipeline(1000)); err != nil {
		t.Fatalf("running through the proxy: %v", err)
	}
}

// sumPipeline sums 1..n; its assertion fails the job on a wrong sum.
func sumPipeline(n int) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	in := make([]int, n)
	for i := range in {
		in[i] = i + 1
	}
	passert.Equals(s, stats.Sum(s, beam.CreateList(s, in)), n*(n+1)/2)
	return p
}

// tokenCreds sends the token (over TLS).
type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(c)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return true }

// TestGoSDKDialOverride: a Go SDK pipeline reaches the guarded job server
// directly when the program replaces grpcx.Dial (the README's recipe):
// TLS and the token for the job endpoint, the SDK's default dialer for
// everything else (its LOOPBACK workers' Fn API connections).
func TestGoSDKDialOverride(t *testing.T) {
	ca, tokenFile, _, job, _ := guardedJobServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	old := grpcx.Dial
	defer func() { grpcx.Dial = old }()
	grpcx.Dial = func(ctx context.Context, endpoint string, timeout time.Duration) (*grpc.ClientConn, error) {
		if endpoint != job {
			return grpcx.DefaultDial(ctx, endpoint, timeout)
		}
		return grpc.NewClient(endpoint,
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})),
			grpc.WithPerRPCCredentials(tokenCreds(strings.TrimSpace(string(tok)))),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	}
	*jobopts.Endpoint = job
	*jobopts.EnvironmentType = "LOOPBACK"
	defer func() { *jobopts.Endpoint = "" }()
	if _, err := universal.Execute(ctx, sumPipeline(1000)); err != nil {
		t.Fatalf("running with grpcx.Dial replaced: %v", err)
	}
}
