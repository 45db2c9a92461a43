// Package endpoint guards ksrunner's network endpoints: the Job API with
// its artifact staging service, the KafkaIO expansion service, and a
// status page. An endpoint listens on loopback unless told otherwise;
// anywhere else it requires TLS and a bearer token, or an explicit
// InsecureBind.
//
// A guarded gRPC server checks every call of every service for the token
// (metadata "authorization: Bearer TOKEN"); an HTTP handler wrapped by
// Guard.HTTPHandler checks the Authorization header of every request.
//
// Beam's SDKs do not send tokens or speak TLS to a job server: a Go
// pipeline can replace grpcx.Dial (the SDK's dialer, a package variable)
// with one that adds them; for Python, and for the expansion service,
// `ksrunner proxy` on the client's machine forwards a loopback port to the
// guarded endpoint, adding both (see the README's Security section).
package endpoint

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Security is how an endpoint admits clients. The zero value admits
// anyone, and only on loopback.
type Security struct {
	// TLSCertFile and TLSKeyFile are the server's PEM certificate (chain)
	// and key: with them the endpoint speaks TLS only.
	TLSCertFile string `koanf:"tls_cert_file"`
	TLSKeyFile  string `koanf:"tls_key_file"`
	// TLSClientCAFile, with TLS, is a PEM file of the CAs whose client
	// certificates the endpoint requires (mutual TLS).
	TLSClientCAFile string `koanf:"tls_client_ca_file"`
	// AuthTokenFile holds the bearer token every call must carry (a
	// trailing newline is dropped). It applies on loopback too.
	AuthTokenFile string `koanf:"auth_token_file"`
	// InsecureBind lets the endpoint listen beyond loopback without TLS
	// or without a token; it logs a warning saying what is missing.
	InsecureBind bool `koanf:"insecure_bind"`
}

// Check validates the combination of options without reading files.
func (s Security) Check() error {
	switch {
	case (s.TLSCertFile == "") != (s.TLSKeyFile == ""):
		return errors.New("options tls_cert_file and tls_key_file: give both (the server's certificate and its key) or neither")
	case s.TLSClientCAFile != "" && s.TLSCertFile == "":
		return errors.New("option tls_client_ca_file: client certificates need TLS: give tls_cert_file and tls_key_file too")
	}
	return nil
}

// Guard admits the clients of one endpoint per its Security.
type Guard struct {
	name     string
	addr     string
	tls      *tls.Config
	token    []byte
	loopback bool
}

// Listen listens on addr (HOST:PORT) for the endpoint name ("job",
// "expansion", "status": it names the endpoint in messages). It refuses an
// address that is not loopback, unless sec has TLS and a token, or
// InsecureBind (then it logs a warning naming what is missing).
func Listen(name, addr string, sec Security, logger *slog.Logger) (net.Listener, *Guard, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := sec.Check(); err != nil {
		return nil, nil, fmt.Errorf("%s endpoint: %w", name, err)
	}
	g := &Guard{name: name}
	if sec.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(sec.TLSCertFile, sec.TLSKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s endpoint: options tls_cert_file and tls_key_file (%s, %s): %w", name, sec.TLSCertFile, sec.TLSKeyFile, err)
		}
		g.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if sec.TLSClientCAFile != "" {
			b, err := os.ReadFile(sec.TLSClientCAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("%s endpoint: option tls_client_ca_file: %w", name, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b) {
				return nil, nil, fmt.Errorf("%s endpoint: option tls_client_ca_file: %s holds no PEM certificate", name, sec.TLSClientCAFile)
			}
			g.tls.ClientCAs = pool
			g.tls.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	if sec.AuthTokenFile != "" {
		tok, err := ReadToken(sec.AuthTokenFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s endpoint: option auth_token_file: %w", name, err)
		}
		g.token = []byte(tok)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s endpoint: listen on %s: %w", name, addr, err)
	}
	g.addr = lis.Addr().String()
	g.loopback = IsLoopback(lis.Addr())
	if g.loopback {
		return lis, g, nil
	}
	var missing []string
	if g.tls == nil {
		missing = append(missing, "TLS (tls_cert_file, tls_key_file)")
	}
	if g.token == nil {
		missing = append(missing, "a bearer token (auth_token_file)")
	}
	if len(missing) == 0 {
		return lis, g, nil
	}
	if !sec.InsecureBind {
		lis.Close()
		return nil, nil, fmt.Errorf("%s endpoint: %s is not a loopback address, and listening there requires %s; or set insecure_bind to listen anyway, open to whoever can reach it",
			name, addr, strings.Join(missing, " and "))
	}
	logger.Warn(fmt.Sprintf("INSECURE BIND: the %s endpoint listens on %s, beyond loopback, WITHOUT %s (insecure_bind): anyone who can reach it can use it", name, g.addr, strings.Join(missing, " and ")),
		"endpoint", name, "address", g.addr)
	return lis, g, nil
}

// ReadToken reads a bearer token file: its content without the trailing
// newline, which must not be empty.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimRight(string(b), "\r\n")
	if strings.TrimSpace(tok) == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("%s: a token is one line", path)
	}
	return tok, nil
}

// IsLoopback reports whether a listener's address is a loopback one
// (127.0.0.0/8, ::1); an unspecified address (0.0.0.0, ::) is not.
func IsLoopback(a net.Addr) bool {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.IsLoopback()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Loopback reports whether the endpoint listens on loopback only.
func (g *Guard) Loopback() bool { return g.loopback }

// TLS reports whether the endpoint speaks TLS.
func (g *Guard) TLS() bool { return g.tls != nil }

// Token reports whether calls need the bearer token.
func (g *Guard) Token() bool { return g.token != nil }

// GRPCServerOptions are the options of a grpc.Server of the endpoint: TLS
// credentials, and interceptors checking the token of every call of every
// service.
func (g *Guard) GRPCServerOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if g.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(g.tls)))
	}
	if g.token != nil {
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				if err := g.checkGRPC(ctx, info.FullMethod); err != nil {
					return nil, err
				}
				return handler(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
				if err := g.checkGRPC(ss.Context(), info.FullMethod); err != nil {
					return err
				}
				return handler(srv, ss)
			}),
		)
	}
	return opts
}

// checkGRPC checks the "authorization" metadata of a call.
func (g *Guard) checkGRPC(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	var got string
	if v := md.Get("authorization"); len(v) > 0 {
		got = v[0]
	}
	if err := g.check(got); err != nil {
		return status.Errorf(codes.Unauthenticated, "%s endpoint: %s: %v", g.name, method, err)
	}
	return nil
}

// check compares an Authorization value with the token, in constant time.
func (g *Guard) check(authorization string) error {
	if g.token == nil {
		return nil
	}
	if authorization == "" {
		return errors.New(`no bearer token (metadata "authorization: Bearer TOKEN")`)
	}
	scheme, tok, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return errors.New(`authorization is not "Bearer TOKEN"`)
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), g.token) != 1 {
		return errors.New("wrong bearer token")
	}
	return nil
}

// HTTPHandler wraps h so that every request must carry the token
// ("Authorization: Bearer TOKEN"); without a token configured it is h.
func (g *Guard) HTTPHandler(h http.Handler) http.Handler {
	if g.token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.check(r.Header.Get("Authorization")); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ksrunner"`)
			http.Error(w, fmt.Sprintf("%s endpoint: %v", g.name, err), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// HTTPListener is lis for an http.Server of the endpoint: wrapped in TLS
// when the endpoint has it.
func (g *Guard) HTTPListener(lis net.Listener) net.Listener {
	if g.tls == nil {
		return lis
	}
	return tls.NewListener(lis, g.tls)
}
