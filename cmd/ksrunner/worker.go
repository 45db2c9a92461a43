package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/endpoint"
)

// workerFlags are `ksrunner worker`'s options: flags, with KSRUNNER_*
// environment variables of the same names under them.
type workerFlags struct {
	appID, brokers, stateDir, logLevel string
	statusHost                         string
	statusPort                         int
	brokerUnavailableMs                int
	pools                              []string
	kafka                              host.KafkaSecurity
	endpoint                           endpoint.Security // of the status endpoint
	allowProcess                       bool
	leaveOnStop                        bool
}

// workerFlagSet defines the worker's flags, into f.
func workerFlagSet(f *workerFlags) *pflag.FlagSet {
	fs := newFlagSet("worker")
	fs.StringVar(&f.appID, "application_id", "", "the application to join (required)")
	fs.StringVar(&f.brokers, "bootstrap_servers", "", "the application's Kafka brokers (required)")
	fs.StringVar(&f.stateDir, "state_dir", "", "directory of the worker's state store and identity (default: a temporary directory; give one for fast restarts)")
	fs.StringVar(&f.logLevel, "log_level", "info", "debug, info, warn or error")
	fs.StringVar(&f.statusHost, "status_host", "localhost", "host the status page and /metrics listen on")
	fs.IntVar(&f.statusPort, "status_port", 0, "port of the worker's status page and Prometheus /metrics (0: none)")
	fs.StringSliceVar(&f.pools, "sdk_worker_pool", nil, "ENVIRONMENT_ID=HOST:PORT: run the stages of that environment in the Beam SDK worker pool at HOST:PORT (repeatable)")
	fs.IntVar(&f.brokerUnavailableMs, "broker_unavailable_timeout_ms", host.DefaultOptions().BrokerUnavailableTimeoutMs,
		"how long the worker goes on without reading its application's pipeline topic (its Kafka brokers out of reach; it retries with backoff) before it fails, naming them; the jobs it runs keep the option they were submitted with")
	fs.BoolVar(&f.allowProcess, "allow_process_environments", true, "run the commands of the job's PROCESS environments (false: leave their stages to other processes)")
	fs.BoolVar(&f.leaveOnStop, "leave_group_on_stop", false, leaveGroupOnStopHelp)
	kafkaSecurityFlags(fs, &f.kafka)
	endpointSecurityFlags(fs, &f.endpoint, "status endpoint")
	return fs
}

func parseWorkerFlags(args []string) (workerFlags, error) {
	var f workerFlags
	fs := workerFlagSet(&f)
	if err := parseFlags(fs, args); err != nil {
		return f, err
	}
	// Environment variables count where no flag was given.
	env, err := envOptions(os.Environ(), func(key string) bool { return fs.Lookup(key) != nil })
	if err != nil {
		return f, err
	}
	sources := map[string]string{}
	fs.Visit(func(fl *pflag.Flag) { sources[fl.Name] = "flag --" + fl.Name })
	for key, e := range env {
		if fs.Changed(key) {
			continue
		}
		if err := fs.Set(key, e.raw); err != nil {
			return f, fmt.Errorf("environment variable %s=%q: %v", e.name, e.raw, err)
		}
		sources[key] = "environment variable " + e.name
	}
	if _, err := newLogger(f.logLevel); err != nil {
		return f, fmt.Errorf("worker: %w%s", err, fromWhere(err, sources))
	}
	if f.statusPort < 0 || f.statusPort > 65535 {
		return f, fmt.Errorf("option status_port: %d, want a port (0: no status page)%s", f.statusPort, fromWhere(errors.New("option status_port"), sources))
	}
	if f.brokerUnavailableMs < host.MinBrokerUnavailableTimeoutMs {
		return f, fmt.Errorf("option broker_unavailable_timeout_ms: %d, must be at least %d%s", f.brokerUnavailableMs, host.MinBrokerUnavailableTimeoutMs, fromWhere(errors.New("option broker_unavailable_timeout_ms"), sources))
	}
	if err := f.kafka.Check(); err != nil {
		return f, fmt.Errorf("worker: %w%s", err, fromWhere(err, sources))
	}
	if err := f.endpoint.Check(); err != nil {
		return f, fmt.Errorf("worker: %w%s", err, fromWhere(err, sources))
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
	opts := []host.ServerOption{
		host.WithStuckBundlePolicy(exitOnStuckBundle),
		host.WithKafkaSecurity(f.kafka),
		host.WithProcessEnvironments(f.allowProcess),
		host.WithEndpointSecurity(f.endpoint),
		host.WithLeaveGroupOnStop(f.leaveOnStop),
	}
	if f.statusPort != 0 {
		opts = append(opts, host.WithStatus(host.StatusConfig{Addr: net.JoinHostPort(f.statusHost, strconv.Itoa(f.statusPort))}))
	}
	w, err := host.NewWorker(host.WorkerConfig{
		ApplicationID: f.appID, BootstrapServers: f.brokers, StateDir: f.stateDir, SDKWorkerPools: pools, Logger: logger,
		BrokerUnavailableTimeout: time.Duration(f.brokerUnavailableMs) * time.Millisecond,
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
