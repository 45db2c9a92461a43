package main

import (
	"context"
	"fmt"
	"io"
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
	pools                              []string
	kafka                              host.KafkaSecurity
	allowProcess                       bool
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
	fs.StringSliceVar(&f.pools, "sdk_worker_pool", nil, "ENVIRONMENT_ID=HOST:PORT: run the stages of that environment in the Beam SDK worker pool at HOST:PORT (repeatable)")
	allowProcess, err := strconv.ParseBool(envOr("allow_process_environments", "true"))
	if err != nil {
		return f, fmt.Errorf("KSRUNNER_ALLOW_PROCESS_ENVIRONMENTS: %w", err)
	}
	fs.BoolVar(&f.allowProcess, "allow_process_environments", allowProcess, "run the commands of the job's PROCESS environments (false: leave their stages to other processes)")
	fs.StringVar(&f.kafka.Protocol, "security_protocol", envOr("security_protocol", ""), securityProtocolHelp+" (default PLAINTEXT)")
	fs.StringVar(&f.kafka.Mechanism, "sasl_mechanism", envOr("sasl_mechanism", ""), saslMechanismHelp)
	fs.StringVar(&f.kafka.Username, "sasl_username", envOr("sasl_username", ""), saslUsernameHelp)
	fs.StringVar(&f.kafka.PasswordFile, "sasl_password_file", envOr("sasl_password_file", ""), saslPasswordFileHelp)
	fs.StringVar(&f.kafka.CAFile, "ssl_ca_file", envOr("ssl_ca_file", ""), sslCAFileHelp)
	fs.StringVar(&f.kafka.CertFile, "ssl_cert_file", envOr("ssl_cert_file", ""), sslCertFileHelp)
	fs.StringVar(&f.kafka.KeyFile, "ssl_key_file", envOr("ssl_key_file", ""), sslKeyFileHelp)
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if err := f.kafka.Check(); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments %q", fs.Args())
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
	w, err := host.NewWorker(host.WorkerConfig{
		ApplicationID: f.appID, BootstrapServers: f.brokers, StateDir: f.stateDir, SDKWorkerPools: pools, Logger: logger,
	}, host.WithStuckBundlePolicy(exitOnStuckBundle), host.WithKafkaSecurity(f.kafka), host.WithProcessEnvironments(f.allowProcess))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "worker: application %s on %s\n", f.appID, f.brokers)
	return w.Run(ctx)
}
