package kafkaio

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"google.golang.org/grpc"

	"github.com/ksrunner/ksrunner/host/endpoint"
	"github.com/ksrunner/ksrunner/host/internal/expansion"
)

// ExpansionServer serves Beam's ExpansionService for KafkaIO, as
// `ksrunner jobserver` does on expansion_port: the Python SDK reaches it
// with ReadFromKafka(..., expansion_service='HOST:PORT'), and a Go program
// that does not import this package with kafkaio.Read(s, "HOST:PORT", ...).
type ExpansionServer struct {
	lis net.Listener
	srv *grpc.Server
}

// An ExpansionOption configures an ExpansionServer.
type ExpansionOption func(*endpoint.Security)

// WithSecurity sets how the expansion server admits clients (TLS, mutual
// TLS, a bearer token): without it, it listens on loopback only (see
// endpoint.Listen).
func WithSecurity(s endpoint.Security) ExpansionOption {
	return func(c *endpoint.Security) { *c = s }
}

// NewExpansionServer listens on addr (port 0 picks a free port); warnings
// of expansions go to logger. An address beyond loopback needs TLS and a
// bearer token (WithSecurity), or insecure_bind.
func NewExpansionServer(addr string, logger *slog.Logger, options ...ExpansionOption) (*ExpansionServer, error) {
	var sec endpoint.Security
	for _, o := range options {
		o(&sec)
	}
	lis, guard, err := endpoint.Listen("expansion", addr, sec, logger)
	if err != nil {
		return nil, fmt.Errorf("expansion server: %w", err)
	}
	srv := grpc.NewServer(guard.GRPCServerOptions()...)
	expansion.NewService(logger).Register(srv)
	return &ExpansionServer{lis: lis, srv: srv}, nil
}

// Endpoint is the address it listens on, HOST:PORT.
func (s *ExpansionServer) Endpoint() string { return s.lis.Addr().String() }

// Serve serves until Stop. It returns nil after Stop.
func (s *ExpansionServer) Serve() error {
	if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Stop stops the server, ending open calls.
func (s *ExpansionServer) Stop() { s.srv.Stop() }
