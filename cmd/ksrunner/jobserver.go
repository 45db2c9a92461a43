package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/kafkaio"
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
	opts := []host.ServerOption{
		host.WithStuckBundlePolicy(exitOnStuckBundle),
		host.WithEndpointSecurity(cfg.Security),
		host.WithKafkaSecurity(cfg.KafkaSecurity),
		host.WithAllowedBootstrapServers(cfg.AllowedBootstrapServers),
		host.WithLeaveGroupOnStop(cfg.LeaveGroupOnStop),
		host.WithJobHistory(cfg.JobHistory),
	}
	if allow, _ := cfg.processEnvironments(); allow != nil {
		opts = append(opts, host.WithProcessEnvironments(*allow))
	}
	if cfg.StatusPort != 0 {
		opts = append(opts, host.WithStatus(host.StatusConfig{Addr: net.JoinHostPort(cfg.JobHost, strconv.Itoa(cfg.StatusPort))}))
	}
	srv, err := host.NewJobServer(net.JoinHostPort(cfg.JobHost, strconv.Itoa(cfg.JobPort)), cfg.Options, logger, opts...)
	if err != nil {
		return err
	}
	exp, err := kafkaio.NewExpansionServer(net.JoinHostPort(cfg.JobHost, strconv.Itoa(cfg.ExpansionPort)), logger, kafkaio.WithSecurity(cfg.Security))
	if err != nil {
		srv.Stop()
		return err
	}
	fmt.Fprintf(stdout, "job endpoint: %s\n", srv.Endpoint())
	fmt.Fprintf(stdout, "expansion endpoint: %s\n", exp.Endpoint())
	if u := srv.StatusURL(); u != "" {
		fmt.Fprintf(stdout, "status page: %s (metrics: %smetrics)\n", u, u)
	}
	checkBrokers(ctx, cfg.BootstrapServers, cfg.KafkaSecurity, stdout, logger)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve() }()
	go func() { errc <- exp.Serve() }()
	// The applications this server ran with its state_dir resume without a
	// resubmission (after the endpoint is up: GetJobs lists them).
	if ids, err := srv.Resume(ctx); err != nil {
		logger.Error("resuming applications", "error", err)
	} else if len(ids) > 0 {
		fmt.Fprintf(stdout, "resumed jobs: %s\n", strings.Join(ids, ", "))
	}
	// Either server ending (or the signal) stops both.
	pending := 2
	select {
	case <-ctx.Done():
	case err = <-errc:
		pending--
	}
	exp.Stop()
	srv.Stop()
	for ; pending > 0; pending-- {
		if err2 := <-errc; err == nil {
			err = err2
		}
	}
	return err
}

// exitOnStuckBundle ends the process when a non-interruptible WASM guest
// overran wasm_bundle_deadline: nothing can stop it in-process, and exiting
// makes Kafka move the task's partitions to another instance (and abort its
// open transaction).
func exitOnStuckBundle(msg string) {
	fmt.Fprintln(os.Stderr, "ksrunner: fatal:", msg)
	os.Exit(3)
}

func brokerFlags() *pflag.FlagSet {
	fs := newFlagSet("broker")
	fs.Int("port", 9092, "port to listen on (0 picks a free port)")
	return fs
}

func runBroker(ctx context.Context, args []string, stdout io.Writer) error {
	fs := brokerFlags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	port, _ := fs.GetInt("port")
	b, err := host.StartEmbeddedBroker(port)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(stdout, "broker: %s (in memory only)\n", b.Bootstrap())
	<-ctx.Done()
	return nil
}
