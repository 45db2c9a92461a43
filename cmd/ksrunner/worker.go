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
)

// workerFlags are `ksrunner worker`'s options: flags, with KSRUNNER_*
// environment variables of the same names as their defaults.
type workerFlags struct {
	appID, brokers, stateDir, logLevel string
	statusHost                         string
	statusPort                         int
	pools                              []string
}

func parseWorkerFlags(args []string) (workerFlags, error) {
	envOr := func(name, def string) string {
		if v, ok := os.LookupEnv("KSRUNNER_" + strings.ToUpper(name)); ok {
			return v
		}
		return def
	}
	var f workerFlags
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	fs.StringVar(&f.appID, "application_id", envOr("application_id", ""), "the application to join (required)")
	fs.StringVar(&f.brokers, "bootstrap_servers", envOr("bootstrap_servers", ""), "the application's Kafka brokers (required)")
	fs.StringVar(&f.stateDir, "state_dir", envOr("state_dir", ""), "directory of the worker's state store and identity (default: a temporary directory; give one for fast restarts)")
	fs.StringVar(&f.logLevel, "log_level", envOr("log_level", "info"), "debug, info, warn or error")
	fs.StringVar(&f.statusHost, "status_host", envOr("status_host", "localhost"), "host the status page and /metrics listen on")
	port, err := strconv.Atoi(envOr("status_port", "0"))
	if err != nil {
		return f, fmt.Errorf("environment KSRUNNER_STATUS_PORT: %q: %w", os.Getenv("KSRUNNER_STATUS_PORT"), err)
	}
	fs.IntVar(&f.statusPort, "status_port", port, "port of the worker's status page and Prometheus /metrics (0: none)")
	fs.StringSliceVar(&f.pools, "sdk_worker_pool", nil, "ENVIRONMENT_ID=HOST:PORT: run the stages of that environment in the Beam SDK worker pool at HOST:PORT (repeatable)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.statusPort < 0 || f.statusPort > 65535 {
		return f, fmt.Errorf("option status_port: %d, want a port (0: no status page)", f.statusPort)
	}
	return f, nil
}

func runWorker(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := parseWorkerFlags(args)
	if err != nil {
		return err
	}
	logger, err := newLogger(f.logLevel)
	if err != nil {
		return err
	}
	pools := map[string]string{}
	for _, p := range f.pools {
		env, addr, ok := strings.Cut(p, "=")
		if !ok || env == "" || addr == "" {
			return fmt.Errorf("option sdk_worker_pool: %q: want ENVIRONMENT_ID=HOST:PORT", p)
		}
		pools[env] = addr
	}
	opts := []host.ServerOption{host.WithStuckBundlePolicy(exitOnStuckBundle)}
	if f.statusPort != 0 {
		opts = append(opts, host.WithStatus(host.StatusConfig{Addr: net.JoinHostPort(f.statusHost, strconv.Itoa(f.statusPort))}))
	}
	w, err := host.NewWorker(host.WorkerConfig{
		ApplicationID: f.appID, BootstrapServers: f.brokers, StateDir: f.stateDir, SDKWorkerPools: pools, Logger: logger,
	}, opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "worker: application %s on %s\n", f.appID, f.brokers)
	if u := w.StatusURL(); u != "" {
		fmt.Fprintf(stdout, "status page: %s (metrics: %smetrics)\n", u, u)
	}
	return w.Run(ctx)
}
