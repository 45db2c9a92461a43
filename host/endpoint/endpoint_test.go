package endpoint_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ksrunner/ksrunner/host/endpoint"
	"github.com/ksrunner/ksrunner/host/endpoint/testcerts"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// TestCheck: option combinations that cannot work are refused, naming
// the options.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		sec  endpoint.Security
		want string
	}{
		{endpoint.Security{TLSCertFile: "c"}, "tls_cert_file and tls_key_file"},
		{endpoint.Security{TLSKeyFile: "k"}, "tls_cert_file and tls_key_file"},
		{endpoint.Security{TLSClientCAFile: "ca"}, "tls_client_ca_file"},
	} {
		if err := c.sec.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.sec, err, c.want)
		}
		if _, _, err := endpoint.Listen("test", "127.0.0.1:0", c.sec, quiet); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Listen %+v: %v", c.sec, err)
		}
	}
	dir := t.TempDir()
	empty := testcerts.Write(t, dir, "empty", []byte("\n"))
	if _, _, err := endpoint.Listen("test", "127.0.0.1:0", endpoint.Security{AuthTokenFile: empty}, quiet); err == nil || !strings.Contains(err.Error(), "auth_token_file") || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty token file: %v", err)
	}
}

// TestGuardedGRPCAndHTTP: a gRPC server and an HTTP handler guarded with
// mutual TLS and a token admit only clients with a certificate the client
// CA signed and the token; on loopback without options, anyone.
func TestGuardedGRPCAndHTTP(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "server CA")
	clientCA := testcerts.NewCA(t, "client CA")
	srvPair := ca.Issue(t, "server", "127.0.0.1")
	client := clientCA.Issue(t, "client")
	stranger := testcerts.NewCA(t, "other CA").Issue(t, "stranger")
	sec := endpoint.Security{
		TLSCertFile:     testcerts.Write(t, dir, "srv.pem", srvPair.CertPEM),
		TLSKeyFile:      testcerts.Write(t, dir, "srv-key.pem", srvPair.KeyPEM),
		TLSClientCAFile: testcerts.Write(t, dir, "client-ca.pem", clientCA.PEM),
		AuthTokenFile:   testcerts.Write(t, dir, "token", []byte("tok\n")),
	}
	lis, g, err := endpoint.Listen("test", "127.0.0.1:0", sec, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Loopback() || !g.TLS() || !g.Token() {
		t.Errorf("guard: loopback %v tls %v token %v", g.Loopback(), g.TLS(), g.Token())
	}
	srv := grpc.NewServer(g.GRPCServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	call := func(cert *testcerts.Pair, token string) error {
		cfg := &tls.Config{RootCAs: roots}
		if cert != nil {
			c, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
		}
		cc, err := grpc.NewClient(lis.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hc := healthpb.NewHealthClient(cc)
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			return err
		}
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{}) // a stream
		if err == nil {
			_, err = w.Recv()
		}
		return err
	}
	if err := call(&client, "tok"); err != nil {
		t.Errorf("client certificate and token: %v", err)
	}
	if err := call(&client, "wrong"); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "wrong bearer token") {
		t.Errorf("wrong token: %v", err)
	}
	if err := call(&client, ""); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "no bearer token") {
		t.Errorf("no token: %v", err)
	}
	if err := call(nil, "tok"); err == nil {
		t.Error("no client certificate: admitted")
	}
	if err := call(&stranger, "tok"); err == nil {
		t.Error("a client certificate of another CA: admitted")
	}

	// HTTP: the same guard around a handler.
	hlis, hg, err := endpoint.Listen("status", "127.0.0.1:0", endpoint.Security{AuthTokenFile: sec.AuthTokenFile}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: hg.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))}
	go hs.Serve(hg.HTTPListener(hlis))
	defer hs.Close()
	get := func(auth string) int {
		req, _ := http.NewRequest("GET", "http://"+hlis.Addr().String()+"/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("Bearer tok"); c != http.StatusOK {
		t.Errorf("HTTP with the token: %d", c)
	}
	for _, a := range []string{"", "Bearer nope", "Basic dG9rOg=="} {
		if c := get(a); c != http.StatusUnauthorized {
			t.Errorf("HTTP with %q: %d, want 401", a, c)
		}
	}
}

// TestListenBeyondLoopback: an unspecified address is not loopback: it
// needs TLS and a token, or insecure_bind.
func TestListenBeyondLoopback(t *testing.T) {
	_, _, err := endpoint.Listen("expansion", "0.0.0.0:0", endpoint.Security{}, quiet)
	if err == nil || !strings.Contains(err.Error(), "expansion endpoint: 0.0.0.0:0 is not a loopback address") {
		t.Fatalf("0.0.0.0 without security: %v", err)
	}
	lis, g, err := endpoint.Listen("expansion", "0.0.0.0:0", endpoint.Security{InsecureBind: true}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	if g.Loopback() {
		t.Error("0.0.0.0 reported as loopback")
	}
	for _, a := range []string{"localhost:0", "127.0.0.1:0", "[::1]:0"} {
		lis, g, err := endpoint.Listen("x", a, endpoint.Security{}, quiet)
		if err != nil {
			if strings.Contains(a, "::1") {
				continue // no IPv6 here
			}
			t.Fatalf("%s: %v", a, err)
		}
		lis.Close()
		if !g.Loopback() {
			t.Errorf("%s: not loopback", a)
		}
	}
}
