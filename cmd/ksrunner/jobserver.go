package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/ksrunner/ksrunner/host"
)

func runJobServer(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := loadServerConfig(args)
	if err != nil {
		return err
	}
	logger, err := newLogger(cfg.LogLevel)
	if err != nil {
		return err
	}
	srv, err := host.NewJobServer(net.JoinHostPort(cfg.JobHost, strconv.Itoa(cfg.JobPort)), cfg.Options, logger,
		host.WithStuckBundlePolicy(exitOnStuckBundle))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "job endpoint: %s\n", srv.Endpoint())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	select {
	case <-ctx.Done():
		srv.Stop()
		return <-errc
	case err := <-errc:
		return err
	}
}

// exitOnStuckBundle ends the process when a non-interruptible WASM guest
// overran wasm_bundle_deadline: nothing can stop it in-process, and exiting
// makes Kafka move the task's partitions to another instance (and abort its
// open transaction).
func exitOnStuckBundle(msg string) {
	fmt.Fprintln(os.Stderr, "ksrunner: fatal:", msg)
	os.Exit(3)
}

func runBroker(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("broker")
	port := fs.Int("port", 9092, "port to listen on (0 picks a free port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := host.StartEmbeddedBroker(*port)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(stdout, "broker: %s (in memory only)\n", b.Bootstrap())
	<-ctx.Done()
	return nil
}
