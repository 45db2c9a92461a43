package kafkaio

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"google.golang.org/grpc"

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

// NewExpansionServer listens on addr (port 0 picks a free port); warnings
// of expansions go to logger.
func NewExpansionServer(addr string, logger *slog.Logger) (*ExpansionServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("expansion server: listen on %s: %w", addr, err)
	}
	srv := grpc.NewServer()
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
