package pythontest

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/endpoint"
	"github.com/ksrunner/ksrunner/host/endpoint/testcerts"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestThroughProxy: the Python SDK, which dials the Job API and artifact
// staging in plaintext without a token, runs a pipeline on a job server
// that requires TLS and a token, through endpoint.Proxy (`ksrunner
// proxy`): --job_endpoint names the proxy, and the proxy's answer to
// Prepare points staging at itself. (TestWordCount compares the same
// pipeline's results with the DirectRunner's; here they only need to be
// there.)
func TestThroughProxy(t *testing.T) {
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	cert := ca.Issue(t, "job server", "127.0.0.1")
	token := testcerts.Write(t, dir, "token", []byte("python-token\n"))
	opts := host.DefaultOptions()
	opts.BootstrapServers = kafkatest.Broker(t)
	logOut := &testkit.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logOut, nil))
	srv, err := host.NewJobServer("127.0.0.1:0", opts, logger, host.WithEndpointSecurity(endpoint.Security{
		TLSCertFile:   testcerts.Write(t, dir, "srv.pem", cert.CertPEM),
		TLSKeyFile:    testcerts.Write(t, dir, "srv-key.pem", cert.KeyPEM),
		AuthTokenFile: token,
	}))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() || os.Getenv("KSRUNNER_DEBUG") != "" {
			t.Logf("job server log:\n%s", logOut.String())
		}
	})
	p, err := endpoint.NewProxy("127.0.0.1:0", srv.Endpoint(), endpoint.ProxyOptions{CAFile: testcerts.Write(t, dir, "ca.pem", ca.PEM), TokenFile: token}, logger)
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve()
	defer p.Stop()
	got := runPipeline(ctx, t, py, "wordcount.py", "--runner=PortableRunner", "--job_endpoint="+p.Addr(), "--environment_type=LOOPBACK")
	if len(got) < 300 || !strings.HasPrefix(got[0], "count ") {
		t.Errorf("results through the proxy: %d lines (%q...), want at least 300 counts", len(got), got[0])
	}
}
