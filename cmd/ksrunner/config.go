package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/providers/structs"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/endpoint"
)

// serverConfig is everything `ksrunner jobserver` reads. Job-scoped options
// are defaults that a job's pipeline options override.
type serverConfig struct {
	host.Options `koanf:",squash,flatten"`
	JobHost      string `koanf:"job_host"`
	JobPort      int    `koanf:"job_port"`
	// ExpansionPort is the port of the KafkaIO expansion service, on
	// JobHost.
	ExpansionPort int    `koanf:"expansion_port"`
	LogLevel      string `koanf:"log_level"`

	// The endpoints' security (the job and expansion endpoints, on
	// JobHost): TLS, mutual TLS, bearer token, insecure_bind.
	endpoint.Security `koanf:",squash,flatten"`
	// The runner's own Kafka security.
	host.KafkaSecurity `koanf:",squash,flatten"`
	// AllowProcessEnvironments: "auto" (on when JobHost is loopback),
	// or a boolean.
	AllowProcessEnvironments string `koanf:"allow_process_environments"`
	// AllowedBootstrapServers limits a job's bootstrap_servers.
	AllowedBootstrapServers []string `koanf:"allowed_bootstrap_servers"`
}

func defaultServerConfig() serverConfig {
	return serverConfig{Options: host.DefaultOptions(), JobHost: "localhost", JobPort: 8099, ExpansionPort: 8097, LogLevel: "info", AllowProcessEnvironments: "auto"}
}

// processEnvironments is allow_process_environments: nil for auto.
func (c serverConfig) processEnvironments() (*bool, error) {
	v := strings.TrimSpace(c.AllowProcessEnvironments)
	if v == "" || strings.EqualFold(v, "auto") {
		return nil, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil, fmt.Errorf("option allow_process_environments: %q, want true, false or auto (on when job_host is loopback)", c.AllowProcessEnvironments)
	}
	return &b, nil
}

// Help of the security options (the worker's flags use the Kafka ones).
const (
	securityProtocolHelp = "how the runner's own Kafka clients connect: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
	saslMechanismHelp    = "SASL mechanism of SASL_PLAINTEXT and SASL_SSL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
	saslUsernameHelp     = "SASL user name"
	saslPasswordFileHelp = "file holding the SASL password (a trailing newline is dropped)"
	sslCAFileHelp        = "PEM file of the CA certificates that verify the brokers (SSL, SASL_SSL; default: the system's)"
	sslCertFileHelp      = "PEM client certificate (chain), for brokers that authenticate clients by certificate"
	sslKeyFileHelp       = "PEM (unencrypted) private key of ssl_cert_file"
	allowProcessHelp     = "run the commands of jobs' PROCESS environments: true, false, or auto (true only when job_host is loopback)"
)

// loadServerConfig merges, lowest first: defaults, the --config YAML file,
// KSRUNNER_* environment variables, flags.
func loadServerConfig(args []string) (serverConfig, error) {
	def := defaultServerConfig()
	fs := pflag.NewFlagSet("jobserver", pflag.ContinueOnError)
	fs.String("config", "", "YAML configuration file")
	fs.String("job_host", def.JobHost, "host the job endpoint listens on")
	fs.Int("job_port", def.JobPort, "port of the job endpoint (0 picks a free port)")
	fs.Int("expansion_port", def.ExpansionPort, "port of the KafkaIO expansion service, on job_host (0 picks a free port)")
	fs.String("log_level", def.LogLevel, "debug, info, warn or error")
	fs.String("bootstrap_servers", def.BootstrapServers, `Kafka brokers, or "embedded" for an in-process broker (data in memory only)`)
	fs.String("application_id", def.ApplicationID, "consumer group and internal topic prefix (required for unbounded pipelines)")
	fs.Int("internal_parallelism", def.InternalParallelism, "partitions of repartition topics")
	fs.Int("topic_replication_factor", def.TopicReplicationFactor, "replication factor of internal topics (-1: broker default)")
	fs.Int("max_bundle_size", def.MaxBundleSize, "input elements per bundle at most")
	fs.Int("max_bundle_time_ms", def.MaxBundleTimeMs, host.MaxBundleTimeMsHelp)
	fs.Int("commit_interval_ms", def.CommitIntervalMs, "how often tasks commit")
	fs.Int("source_idle_timeout_ms", def.SourceIdleTimeoutMs, "how long a caught-up Kafka read partition stays idle before its watermark follows wall time")
	fs.String("state_dir", def.StateDir, "directory of the Pebble state stores (default: a temporary directory per job)")
	fs.String("processing_guarantee", def.ProcessingGuarantee, "exactly_once (each commit interval is a Kafka transaction) or at_least_once (faster; output may repeat after a failure)")
	fs.Bool("keep_internal_topics", def.KeepInternalTopics, "keep internal topics, whole, after a bounded job is done (consumed shuffle records are otherwise purged after each commit)")
	fs.StringSlice("stage_wasm", nil, "PATTERN=MODULE[#DOFN]: run the transforms whose unique name matches PATTERN (a name or glob) as WASM DoFns of MODULE (a file path, file: URL or artifact:NAME); repeatable, or comma-separated")
	fs.Bool("wasm_interruptible", def.WASMInterruptible, "stop WASM guest code past wasm_bundle_deadline (costs guest throughput)")
	fs.Duration("wasm_bundle_deadline", def.WASMBundleDeadline, "longest a WASM bundle may run; a stuck non-interruptible guest makes the process exit (0: no limit)")
	fs.String("deserialization_error_policy", def.DeserializationErrorPolicy, host.DeserializationErrorPolicyHelp)
	fs.String("dead_letter_topic", def.DeadLetterTopic, host.DeadLetterTopicHelp)
	fs.Int("read_max_elements_per_poll", def.ReadMaxElementsPerPoll, host.ReadMaxElementsPerPollHelp)
	fs.Int("read_max_poll_time_ms", def.ReadMaxPollTimeMs, host.ReadMaxPollTimeMsHelp)
	fs.Int("transaction_timeout_ms", def.TransactionTimeoutMs, host.TransactionTimeoutMsHelp)
	fs.Int("num_standby_replicas", def.NumStandbyReplicas, host.NumStandbyReplicasHelp)
	fs.String("group_protocol", def.GroupProtocol, host.GroupProtocolHelp)
	fs.Int("session_timeout_ms", def.SessionTimeoutMs, host.SessionTimeoutMsHelp)
	// Security of the endpoints (job, artifact staging, expansion).
	fs.String("tls_cert_file", "", "PEM certificate of the job and expansion endpoints: with tls_key_file, they speak TLS only")
	fs.String("tls_key_file", "", "PEM private key of tls_cert_file")
	fs.String("tls_client_ca_file", "", "PEM CA certificates: the endpoints require client certificates they sign (mutual TLS)")
	fs.String("auth_token_file", "", "file holding the bearer token every call to the endpoints must carry (\"authorization: Bearer TOKEN\")")
	fs.Bool("insecure_bind", false, "let the endpoints listen beyond loopback (job_host) without TLS or without a token: open to whoever reaches them")
	fs.String("allow_process_environments", def.AllowProcessEnvironments, allowProcessHelp)
	fs.Lookup("allow_process_environments").NoOptDefVal = "true"
	fs.StringSlice("allowed_bootstrap_servers", nil, "HOST:PORT entries (\"*\" globs, or embedded) that a job's bootstrap_servers may name besides this server's own (default: any on loopback without Kafka credentials, else none)")
	// The runner's own Kafka security.
	fs.String("security_protocol", "", securityProtocolHelp+" (default PLAINTEXT)")
	fs.String("sasl_mechanism", "", saslMechanismHelp)
	fs.String("sasl_username", "", saslUsernameHelp)
	fs.String("sasl_password_file", "", saslPasswordFileHelp)
	fs.String("ssl_ca_file", "", sslCAFileHelp)
	fs.String("ssl_cert_file", "", sslCertFileHelp)
	fs.String("ssl_key_file", "", sslKeyFileHelp)
	if err := fs.Parse(args); err != nil {
		return serverConfig{}, err
	}
	if fs.NArg() > 0 {
		return serverConfig{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	k := koanf.New(".")
	if err := k.Load(structs.Provider(def, "koanf"), nil); err != nil {
		return serverConfig{}, err
	}
	if path, _ := fs.GetString("config"); path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return serverConfig{}, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	if err := k.Load(env.Provider(".", env.Opt{
		Prefix: "KSRUNNER_",
		TransformFunc: func(k, v string) (string, any) {
			k = strings.ToLower(strings.TrimPrefix(k, "KSRUNNER_"))
			if !knownKey(k) || k == "config" {
				// Other tools share the prefix (KSRUNNER_TEST_BOOTSTRAP,
				// KSRUNNER_KAFKA_PORT, KSRUNNER_DEBUG, ...): only options
				// are read from the environment.
				return "", nil
			}
			if k == "stage_wasm" || k == "allowed_bootstrap_servers" { // a list: comma-separated entries
				return k, strings.Split(v, ",")
			}
			return k, v
		},
	}), nil); err != nil {
		return serverConfig{}, err
	}
	if err := k.Load(posflag.Provider(fs, ".", k), nil); err != nil {
		return serverConfig{}, err
	}
	var cfg serverConfig
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf", FlatPaths: false}); err != nil {
		return serverConfig{}, fmt.Errorf("configuration: %w", err)
	}
	for _, key := range k.Keys() {
		if !knownKey(key) {
			return serverConfig{}, fmt.Errorf("configuration: unknown option %q", key)
		}
	}
	if err := cfg.Options.Validate(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration (defaults, --config file, KSRUNNER_* environment, flags): %w", err)
	}
	if err := cfg.Security.Check(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w", err)
	}
	if err := cfg.KafkaSecurity.Check(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w", err)
	}
	if _, err := cfg.processEnvironments(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w", err)
	}
	return cfg, nil
}

func knownKey(key string) bool {
	switch key {
	case "config", "job_host", "job_port", "expansion_port", "log_level", "bootstrap_servers", "application_id", "internal_parallelism",
		"topic_replication_factor", "max_bundle_size", "max_bundle_time_ms", "commit_interval_ms", "source_idle_timeout_ms", "state_dir", "keep_internal_topics", "processing_guarantee",
		"stage_wasm", "wasm_interruptible", "wasm_bundle_deadline",
		"deserialization_error_policy", "dead_letter_topic", "read_max_elements_per_poll", "read_max_poll_time_ms",
		"transaction_timeout_ms", "num_standby_replicas", "group_protocol", "session_timeout_ms",
		"tls_cert_file", "tls_key_file", "tls_client_ca_file", "auth_token_file", "insecure_bind",
		"allow_process_environments", "allowed_bootstrap_servers",
		"security_protocol", "sasl_mechanism", "sasl_username", "sasl_password_file", "ssl_ca_file", "ssl_cert_file", "ssl_key_file":
		return true
	}
	return false
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("option log_level: %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
