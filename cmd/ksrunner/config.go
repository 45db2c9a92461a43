package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
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
	ExpansionPort int `koanf:"expansion_port"`
	// StatusPort is the port of the status page and /metrics, on
	// JobHost (0: none).
	StatusPort int    `koanf:"status_port"`
	LogLevel   string `koanf:"log_level"`

	// The endpoints' security (the job, expansion and status endpoints,
	// on JobHost): TLS, mutual TLS, bearer token, insecure_bind.
	endpoint.Security `koanf:",squash,flatten"`
	// The runner's own Kafka security.
	host.KafkaSecurity `koanf:",squash,flatten"`
	// AllowProcessEnvironments: "auto" (on when JobHost is loopback),
	// or a boolean.
	AllowProcessEnvironments string `koanf:"allow_process_environments"`
	// AllowedBootstrapServers limits a job's bootstrap_servers.
	AllowedBootstrapServers []string `koanf:"allowed_bootstrap_servers"`
	// LeaveGroupOnStop: the server's jobs leave their consumer groups when
	// it stops (host.WithLeaveGroupOnStop).
	LeaveGroupOnStop bool `koanf:"leave_group_on_stop"`
	// JobHistory is how many ended jobs the server keeps
	// (host.WithJobHistory).
	JobHistory int `koanf:"job_history"`
}

func defaultServerConfig() serverConfig {
	return serverConfig{Options: host.DefaultOptions(), JobHost: "localhost", JobPort: 8099, ExpansionPort: 8097, StatusPort: 8074, LogLevel: "info", AllowProcessEnvironments: "auto", JobHistory: host.DefaultJobHistory}
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
	securityProtocolHelp = "how the runner's own Kafka clients connect: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default PLAINTEXT)"
	saslMechanismHelp    = "SASL mechanism of SASL_PLAINTEXT and SASL_SSL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
	saslUsernameHelp     = "SASL user name"
	saslPasswordFileHelp = "file holding the SASL password (a trailing newline is dropped)"
	sslCAFileHelp        = "PEM file of the CA certificates that verify the brokers (SSL, SASL_SSL; default: the system's)"
	sslCertFileHelp      = "PEM client certificate (chain), for brokers that authenticate clients by certificate"
	sslKeyFileHelp       = "PEM (unencrypted) private key of ssl_cert_file"
	allowProcessHelp     = "run the commands of jobs' PROCESS environments: true, false, or auto (true only when job_host is loopback)"
)

// kafkaSecurityFlags adds the runner's own Kafka security options to fs.
func kafkaSecurityFlags(fs *pflag.FlagSet, k *host.KafkaSecurity) {
	fs.StringVar(&k.Protocol, "security_protocol", k.Protocol, securityProtocolHelp)
	fs.StringVar(&k.Mechanism, "sasl_mechanism", k.Mechanism, saslMechanismHelp)
	fs.StringVar(&k.Username, "sasl_username", k.Username, saslUsernameHelp)
	fs.StringVar(&k.PasswordFile, "sasl_password_file", k.PasswordFile, saslPasswordFileHelp)
	fs.StringVar(&k.CAFile, "ssl_ca_file", k.CAFile, sslCAFileHelp)
	fs.StringVar(&k.CertFile, "ssl_cert_file", k.CertFile, sslCertFileHelp)
	fs.StringVar(&k.KeyFile, "ssl_key_file", k.KeyFile, sslKeyFileHelp)
}

// endpointSecurityFlags adds the endpoints' security options to fs; what
// names the endpoints they guard.
func endpointSecurityFlags(fs *pflag.FlagSet, s *endpoint.Security, what string) {
	fs.StringVar(&s.TLSCertFile, "tls_cert_file", s.TLSCertFile, "PEM certificate of the "+what+": with tls_key_file, they speak TLS only")
	fs.StringVar(&s.TLSKeyFile, "tls_key_file", s.TLSKeyFile, "PEM private key of tls_cert_file")
	fs.StringVar(&s.TLSClientCAFile, "tls_client_ca_file", s.TLSClientCAFile, "PEM CA certificates: the "+what+" require client certificates they sign (mutual TLS)")
	fs.StringVar(&s.AuthTokenFile, "auth_token_file", s.AuthTokenFile, "file holding the bearer token every call to the "+what+" must carry (\"authorization: Bearer TOKEN\")")
	fs.BoolVar(&s.InsecureBind, "insecure_bind", s.InsecureBind, "let the "+what+" listen beyond loopback without TLS or without a token: open to whoever reaches them")
}

// jobServerFlags are `ksrunner jobserver`'s flags: one per option (the
// configuration file and KSRUNNER_* variables know the same names), and
// --config.
func jobServerFlags() *pflag.FlagSet {
	def := defaultServerConfig()
	fs := newFlagSet("jobserver")
	fs.String("config", "", "YAML configuration file of options (by their names, as the flags); KSRUNNER_CONFIG also names it")
	fs.String("job_host", def.JobHost, "host the job endpoint listens on")
	fs.Int("job_port", def.JobPort, "port of the job endpoint (0 picks a free port)")
	fs.Int("expansion_port", def.ExpansionPort, "port of the KafkaIO expansion service, on job_host (0 picks a free port)")
	fs.Int("status_port", def.StatusPort, "port of the status page and Prometheus /metrics, on job_host (0: none)")
	fs.String("log_level", def.LogLevel, "debug, info, warn or error")
	fs.String("bootstrap_servers", def.BootstrapServers, `Kafka brokers, or "embedded" for an in-process broker (data in memory only)`)
	fs.String("application_id", def.ApplicationID, "consumer group and internal topic prefix (default: one made per submission; give one to an unbounded pipeline so that restarts, workers and resubmissions find it)")
	fs.Int("internal_parallelism", def.InternalParallelism, "partitions of repartition topics")
	fs.Int("topic_replication_factor", def.TopicReplicationFactor, "replication factor of internal topics (-1: broker default)")
	fs.Int("max_bundle_size", def.MaxBundleSize, "input elements per bundle at most")
	fs.Int("max_bundle_time_ms", def.MaxBundleTimeMs, host.MaxBundleTimeMsHelp)
	fs.Int("record_pack_bytes", def.RecordPackBytes, host.RecordPackBytesHelp)
	fs.Int("internal_max_message_bytes", def.InternalMaxMessageBytes, host.InternalMaxMessageBytesHelp)
	fs.Int("commit_interval_ms", def.CommitIntervalMs, "how often tasks commit")
	fs.Int("source_idle_timeout_ms", def.SourceIdleTimeoutMs, "how long a caught-up Kafka read partition stays idle before its watermark follows wall time")
	fs.Int("source_max_delay_ms", def.SourceMaxDelayMs, host.SourceMaxDelayMsHelp)
	fs.String("state_dir", def.StateDir, "directory of the Pebble state stores (default: a temporary directory per job)")
	fs.String("processing_guarantee", def.ProcessingGuarantee, "exactly_once (each commit interval is a Kafka transaction) or at_least_once (faster; output may repeat after a failure)")
	fs.Bool("keep_internal_topics", def.KeepInternalTopics, "keep internal topics, whole, after a bounded job is done (consumed shuffle records are otherwise purged after each commit)")
	fs.StringSlice("stage_wasm", nil, "PATTERN=MODULE[#DOFN]: run the transforms whose unique name matches PATTERN (a name or glob) as WASM DoFns of MODULE (a file path, file: URL or artifact:NAME); repeatable, or comma-separated")
	fs.Bool("wasm_interruptible", def.WASMInterruptible, host.WASMInterruptibleHelp)
	fs.Int("wasm_memory_limit_mb", def.WASMMemoryLimitMB, host.WASMMemoryLimitMBHelp)
	fs.Duration("wasm_bundle_deadline", def.WASMBundleDeadline, "longest a WASM bundle may run; a stuck non-interruptible guest makes the process exit (0: no limit)")
	fs.String("deserialization_error_policy", def.DeserializationErrorPolicy, host.DeserializationErrorPolicyHelp)
	fs.String("dead_letter_topic", def.DeadLetterTopic, host.DeadLetterTopicHelp)
	fs.Int("read_max_elements_per_poll", def.ReadMaxElementsPerPoll, host.ReadMaxElementsPerPollHelp)
	fs.Int("read_max_poll_time_ms", def.ReadMaxPollTimeMs, host.ReadMaxPollTimeMsHelp)
	fs.Int("transaction_timeout_ms", def.TransactionTimeoutMs, host.TransactionTimeoutMsHelp)
	fs.Int("num_standby_replicas", def.NumStandbyReplicas, host.NumStandbyReplicasHelp)
	fs.Int("sdk_worker_parallelism", def.SDKWorkerParallelism, host.SDKWorkerParallelismHelp)
	fs.String("group_protocol", def.GroupProtocol, host.GroupProtocolHelp)
	fs.Int("session_timeout_ms", def.SessionTimeoutMs, host.SessionTimeoutMsHelp)
	fs.Int("broker_unavailable_timeout_ms", def.BrokerUnavailableTimeoutMs, host.BrokerUnavailableTimeoutMsHelp)
	// Security of the endpoints (job, artifact staging, expansion, status).
	endpointSecurityFlags(fs, new(endpoint.Security), "job, expansion and status endpoints")
	fs.String("allow_process_environments", def.AllowProcessEnvironments, allowProcessHelp)
	fs.Lookup("allow_process_environments").NoOptDefVal = "true"
	fs.StringSlice("allowed_bootstrap_servers", nil, "HOST:PORT entries (\"*\" globs, or embedded) that a job's bootstrap_servers may name besides this server's own (default: any on loopback without Kafka credentials, else none)")
	fs.Bool("leave_group_on_stop", false, leaveGroupOnStopHelp)
	fs.Int("job_history", def.JobHistory, "how many ended jobs the job endpoint and the status page keep (at least 1); the one that ended first is forgotten, and a job's staged artifacts are deleted when it ends")
	kafkaSecurityFlags(fs, new(host.KafkaSecurity))
	return fs
}

const leaveGroupOnStopHelp = "when this process stops (SIGTERM), its jobs leave their consumer groups, so the application's other processes take its tasks at once: for a process stopped for good (scaling down). Without it a process with a state_dir keeps its membership for its restart, and the others wait up to session_timeout_ms for its tasks"

// loadServerConfig merges, lowest first: defaults, the --config YAML file,
// KSRUNNER_* environment variables, flags. An unknown name in any of them
// is an error naming where it is (with the option it may be a misspelling
// of), and so is a bad value.
func loadServerConfig(args []string) (serverConfig, error) {
	fs := jobServerFlags()
	if err := parseFlags(fs, args); err != nil {
		return serverConfig{}, err
	}
	known := func(key string) bool { return key != "config" && fs.Lookup(key) != nil }
	knownNames := optionNames(fs)

	// sources says where each key's value came from, for errors.
	sources := map[string]string{}
	k := koanf.New(".")
	if err := k.Load(structs.Provider(defaultServerConfig(), "koanf"), nil); err != nil {
		return serverConfig{}, err
	}

	// The configuration file.
	path, _ := fs.GetString("config")
	if path == "" {
		path = os.Getenv(envPrefix + "CONFIG")
	}
	if path != "" {
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
			return serverConfig{}, fmt.Errorf("config file %s: %w", path, err)
		}
		for _, key := range fk.Keys() {
			if !known(key) {
				return serverConfig{}, fmt.Errorf("config file %s: unknown option %q%s", path, key, didYouMean(key, knownNames, ""))
			}
			if err := checkValue(fk.Get(key), key); err != nil {
				return serverConfig{}, fmt.Errorf("config file %s: option %s: %v", path, key, err)
			}
			sources[key] = "config file " + path
		}
		if err := k.Merge(fk); err != nil {
			return serverConfig{}, err
		}
	}

	// KSRUNNER_* environment variables.
	env, err := envOptions(os.Environ(), known)
	if err != nil {
		return serverConfig{}, err
	}
	for key, e := range env {
		if err := checkValue(e.value, key); err != nil {
			return serverConfig{}, fmt.Errorf("environment variable %s=%q: %v", e.name, e.raw, err)
		}
		if err := k.Set(key, e.value); err != nil {
			return serverConfig{}, err
		}
		sources[key] = "environment variable " + e.name
	}

	// Flags (pflag parsed and checked their values).
	if err := k.Load(posflag.Provider(fs, ".", k), nil); err != nil {
		return serverConfig{}, err
	}
	fs.Visit(func(f *pflag.Flag) { sources[f.Name] = "flag --" + f.Name })

	var cfg serverConfig
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf", FlatPaths: false}); err != nil {
		return serverConfig{}, fmt.Errorf("configuration: %w", err)
	}
	if cfg.StatusPort < 0 || cfg.StatusPort > 65535 {
		return serverConfig{}, fmt.Errorf("option status_port: %d, want a port (0: no status page)%s", cfg.StatusPort, fromWhere(errors.New("option status_port"), sources))
	}
	if cfg.JobHistory < 1 {
		return serverConfig{}, fmt.Errorf("option job_history: %d, want at least 1 (how many ended jobs to keep)%s", cfg.JobHistory, fromWhere(errors.New("option job_history"), sources))
	}
	if err := cfg.Options.Validate(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w%s", err, fromWhere(err, sources))
	}
	if _, err := cfg.processEnvironments(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w%s", err, fromWhere(err, sources))
	}
	if err := cfg.Security.Check(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w%s", err, fromWhere(err, sources))
	}
	if err := cfg.KafkaSecurity.Check(); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w%s", err, fromWhere(err, sources))
	}
	if _, err := newLogger(cfg.LogLevel); err != nil {
		return serverConfig{}, fmt.Errorf("job server configuration: %w%s", err, fromWhere(err, sources))
	}
	return cfg, nil
}

// checkValue checks that value parses as option key of serverConfig.
func checkValue(value any, key string) error {
	k := koanf.New(".")
	if err := k.Load(structs.Provider(defaultServerConfig(), "koanf"), nil); err != nil {
		return err
	}
	if err := k.Set(key, value); err != nil {
		return err
	}
	var cfg serverConfig
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf", FlatPaths: false}); err != nil {
		return errors.New(strings.TrimSpace(strings.TrimPrefix(unwrapDecodeError(err), "* ")))
	}
	return nil
}

// unwrapDecodeError drops mapstructure's "1 error(s) decoding:" header.
func unwrapDecodeError(err error) string {
	s := err.Error()
	for _, header := range []string{"error(s):", "decoding:"} {
		if _, rest, ok := strings.Cut(s, header); ok {
			return strings.TrimSpace(rest)
		}
	}
	return s
}

// optionNamePattern finds the option an error of host.Options.Validate (or
// newLogger) names.
var optionNamePattern = regexp.MustCompile(`option ([a-z_]+)`)

// fromWhere says where the value of the option named in err came from.
func fromWhere(err error, sources map[string]string) string {
	m := optionNamePattern.FindStringSubmatch(err.Error())
	if m == nil {
		return " (defaults, --config file, KSRUNNER_* environment, flags)"
	}
	if src, ok := sources[m[1]]; ok {
		return " (from " + src + ")"
	}
	return " (the default)"
}

// envPrefix is the prefix of ksrunner's environment variables.
const envPrefix = "KSRUNNER_"

// envOption is the value of an option given by an environment variable.
type envOption struct {
	name, raw string // the variable and its value
	value     any
}

// envOptions reads the KSRUNNER_* variables of environ whose names are
// options (known). The variables of ksrunner's other commands' options and
// of its tools and tests are not this command's; any other is an error,
// naming the variable and, if it is a likely misspelling of one, the option.
func envOptions(environ []string, known func(string) bool) (map[string]envOption, error) {
	sort.Strings(environ)
	out := map[string]envOption{}
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, envPrefix)
		if !ok {
			continue
		}
		key := strings.ToLower(rest)
		switch {
		case key == "config":
			continue // the configuration file's path
		case known(key):
			var v any = val
			if key == "stage_wasm" || key == "sdk_worker_pool" || key == "allowed_bootstrap_servers" { // lists: comma-separated entries
				v = strings.Split(val, ",")
			}
			out[key] = envOption{name: name, raw: val, value: v}
		case allOptions[key] || toolVariable(rest):
			// another command's option, or a tool's variable
		default:
			return nil, fmt.Errorf("environment variable %s: not a ksrunner option%s", name, didYouMean(key, allOptionNames(), envPrefix))
		}
	}
	return out, nil
}

// toolVariable reports whether KSRUNNER_<name> is a variable of the
// project's tools and tests rather than an option.
func toolVariable(name string) bool {
	for _, p := range []string{"TEST_", "KAFKA_", "REQUIRE_", "HARNESS_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	switch name {
	case "DEBUG", "CACHE", "PYTHON", "STREAMING_RECORDS", "CPUPROFILE", "STATUS_SCREENSHOT":
		return true
	}
	return false
}

// allOptions are the option names of every command (jobserver, worker,
// the client commands).
var allOptions = func() map[string]bool {
	m := map[string]bool{}
	for _, fs := range []*pflag.FlagSet{jobServerFlags(), workerFlagSet(new(workerFlags)), clientFlags(new(string)), proxyFlagSet(new(proxyFlags))} {
		for _, n := range optionNames(fs) {
			m[n] = true
		}
	}
	return m
}()

func allOptionNames() []string {
	names := make([]string, 0, len(allOptions))
	for n := range allOptions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// optionNames are the names of fs's flags but --config.
func optionNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" {
			names = append(names, f.Name)
		}
	})
	return names
}

// didYouMean suggests the option name is likely a misspelling of.
func didYouMean(name string, known []string, prefix string) string {
	s := host.SuggestOption(name, known, 2)
	if s == "" {
		return ""
	}
	switch prefix {
	case envPrefix:
		s = envPrefix + strings.ToUpper(s)
	default:
		s = prefix + s
	}
	return fmt.Sprintf(" (did you mean %s?)", s)
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("option log_level: %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
