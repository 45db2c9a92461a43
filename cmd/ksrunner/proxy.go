package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ksrunner/ksrunner/host/endpoint"
)

// `ksrunner proxy` lets a client that speaks neither TLS nor bearer tokens
// (Beam's Python SDK, the Go SDK's expansion client) reach a guarded job
// server: it listens on loopback, on the client's machine, and forwards
// every gRPC call to the job server over TLS, adding the token.

type proxyFlags struct {
	forwards                  []string
	caFile, certFile, keyFile string
	serverName, tokenFile     string
	plaintext                 bool
	logLevel                  string
}

// proxyFlagSet defines the proxy's flags, into f.
func proxyFlagSet(f *proxyFlags) *pflag.FlagSet {
	fs := newFlagSet("proxy")
	fs.StringSliceVar(&f.forwards, "forward", nil, "LOCAL=REMOTE: listen on LOCAL (a loopback HOST:PORT) and forward to the guarded endpoint REMOTE (HOST:PORT); repeatable, e.g. localhost:8099=jobs.example.com:8099 and localhost:8097=jobs.example.com:8097")
	fs.StringVar(&f.caFile, "tls_ca_file", "", "PEM CA certificates that verify the endpoints' (default: the system's)")
	fs.StringVar(&f.certFile, "tls_cert_file", "", "PEM client certificate, for endpoints that require one (tls_client_ca_file)")
	fs.StringVar(&f.keyFile, "tls_key_file", "", "PEM private key of tls_cert_file")
	fs.StringVar(&f.serverName, "tls_server_name", "", "name to verify the endpoints' certificate against (default: REMOTE's host)")
	fs.StringVar(&f.tokenFile, "auth_token_file", "", "file holding the bearer token to send with every call")
	fs.BoolVar(&f.plaintext, "plaintext", false, "connect to REMOTE without TLS (an endpoint started with insecure_bind and a token)")
	fs.StringVar(&f.logLevel, "log_level", "info", "debug, info, warn or error")
	return fs
}

func parseProxyFlags(args []string) (proxyFlags, error) {
	var f proxyFlags
	if err := parseFlags(proxyFlagSet(&f), args); err != nil {
		return f, err
	}
	switch {
	case len(f.forwards) == 0:
		return f, errors.New("option forward: give at least one LOCAL=REMOTE")
	case (f.certFile == "") != (f.keyFile == ""):
		return f, errors.New("options tls_cert_file and tls_key_file: give both or neither")
	case f.plaintext && (f.caFile != "" || f.certFile != "" || f.serverName != ""):
		return f, errors.New("option plaintext: no TLS options go with it")
	}
	for _, fw := range f.forwards {
		if l, r, ok := strings.Cut(fw, "="); !ok || l == "" || r == "" {
			return f, fmt.Errorf("option forward: %q: want LOCAL=REMOTE (HOST:PORT each)", fw)
		}
	}
	return f, nil
}

func runProxy(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := parseProxyFlags(args)
	if err != nil {
		return err
	}
	logger, err := newLogger(f.logLevel)
	if err != nil {
		return err
	}
	opts := endpoint.ProxyOptions{CAFile: f.caFile, ServerName: f.serverName, CertFile: f.certFile, KeyFile: f.keyFile, TokenFile: f.tokenFile, Plaintext: f.plaintext}
	var proxies []*endpoint.Proxy
	defer func() {
		for _, p := range proxies {
			p.Stop()
		}
	}()
	for _, fw := range f.forwards {
		local, remote, _ := strings.Cut(fw, "=")
		p, err := endpoint.NewProxy(local, remote, opts, logger)
		if err != nil {
			return err
		}
		proxies = append(proxies, p)
		fmt.Fprintf(stdout, "proxy: %s -> %s\n", p.Addr(), remote)
	}
	errc := make(chan error, len(proxies))
	for _, p := range proxies {
		go func() { errc <- p.Serve() }()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}
