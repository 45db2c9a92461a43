package host

import (
	"context"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/translate"
)

// What a job server lets its clients do: which brokers a job may point
// the runner at (allowed_bootstrap_servers), whether it runs the commands
// of PROCESS environments (allow_process_environments). The endpoint
// itself is guarded by package endpoint.

// checkAllowedBootstrap checks the entries of allowed_bootstrap_servers.
func checkAllowedBootstrap(entries []string) error {
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "embedded" {
			continue
		}
		if _, _, err := net.SplitHostPort(e); err != nil || e == "" {
			return fmt.Errorf("option allowed_bootstrap_servers: %q: want HOST:PORT (\"*\" globs allowed, e.g. *.kafka.internal:9093) or embedded", e)
		}
		if _, err := path.Match(e, ""); err != nil {
			return fmt.Errorf("option allowed_bootstrap_servers: %q: bad pattern: %w", e, err)
		}
	}
	return nil
}

// checkBootstrap refuses a job's bootstrap_servers that the job server may
// not dial: brokers other than its own that allowed_bootstrap_servers does
// not allow. Without that option, a job server on loopback and without
// Kafka credentials allows any; one reachable beyond loopback, or that
// would present credentials to the brokers, allows only its own.
func (s *JobServer) checkBootstrap(brokers string) error {
	own := s.defaults.BootstrapServers
	if brokers == own {
		return nil
	}
	allowed := s.cfg.allowedBootstrap
	if len(allowed) == 0 {
		if s.cfg.loopback && s.cfg.kafka == nil {
			return nil
		}
		why := "its endpoint is reachable beyond loopback"
		if s.cfg.kafka != nil {
			why = "it would connect to them with its own Kafka credentials (" + s.cfg.kafka.Describe() + ")"
		}
		return fmt.Errorf("pipeline option bootstrap_servers: %q is not this job server's brokers (%s), and without its option allowed_bootstrap_servers it runs jobs on its own brokers only, since %s", brokers, own, why)
	}
	addrs := []string{brokers}
	if brokers != "embedded" {
		addrs = kafkaconn.SplitBrokers(brokers)
	}
	ownAddrs := kafkaconn.SplitBrokers(own)
	for _, a := range addrs {
		if slices.Contains(ownAddrs, a) {
			continue
		}
		ok := false
		for _, e := range allowed {
			if m, _ := path.Match(strings.ToLower(strings.TrimSpace(e)), strings.ToLower(a)); m {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("pipeline option bootstrap_servers: address %q is not allowed by the job server's option allowed_bootstrap_servers (%s)", a, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// dialedEndpoint is the address the client dialed to reach this server
// (the call's :authority), else the listener's.
func (s *JobServer) dialedEndpoint(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if a := md.Get(":authority"); len(a) > 0 {
		if h, p, err := net.SplitHostPort(a[0]); err == nil && h != "" && p != "" {
			return a[0]
		}
	}
	return s.Endpoint()
}

// urnEnvEmbeddedPython is the Python SDK's EMBEDDED_PYTHON environment.
const urnEnvEmbeddedPython = "beam:env:embedded_python:v1"

// checkEnvironments refuses, at submission, stages whose SDK environment
// this runner cannot start (DOCKER, EMBEDDED_PYTHON, an unknown one), or
// may not: a PROCESS environment (alone, or as the ANYOF alternative the
// harness would choose) when process environments are off.

func checkEnvironments(plan *translate.Plan, allowProcess bool) error {
	envs := plan.Pipeline.GetComponents().GetEnvironments()
	for _, st := range plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			if s.Executor != translate.ExecutorHarness {
				continue
			}
			env := envs[s.EnvironmentID]
			switch urn := env.GetUrn(); urn {
			case harness.URNEnvExternal:
			case harness.URNEnvProcess:
				if !allowProcess {
					return processRefused(s.ID, s.EnvironmentID, env)
				}
			case harness.URNEnvAnyOf:
				if allowProcess {
					continue
				}
				var anyOf pipepb.AnyOfEnvironmentPayload
				if err := proto.Unmarshal(env.GetPayload(), &anyOf); err != nil {
					return fmt.Errorf("stage %s: environment %q: decoding its %s payload: %w", s.ID, s.EnvironmentID, urn, err)
				}
				var process *pipepb.Environment
				external := false
				for _, alt := range anyOf.GetEnvironments() {
					switch alt.GetUrn() {
					case harness.URNEnvExternal:
						external = true
					case harness.URNEnvProcess:
						process = alt
					}
				}
				if !external && process != nil {
					return processRefused(s.ID, s.EnvironmentID, process)
				}
			case harness.URNEnvDocker:
				return fmt.Errorf("stage %s: environment %q is DOCKER, which this runner cannot start (no Docker here); submit with --environment_type=LOOPBACK, EXTERNAL or PROCESS", s.ID, s.EnvironmentID)
			case urnEnvEmbeddedPython:
				// The Python SDK's default for Beam's own tests: only a
				// runner written in Python can host the SDK in-process.
				return fmt.Errorf("stage %s: environment %q is EMBEDDED_PYTHON (%s), which runs the SDK harness inside the runner's own process: only Python runners can; submit with --environment_type=LOOPBACK, EXTERNAL or PROCESS", s.ID, s.EnvironmentID, urn)
			default:
				return fmt.Errorf("stage %s: environment %q has unsupported type %q (this runner starts LOOPBACK/EXTERNAL, PROCESS and ANYOF of them)", s.ID, s.EnvironmentID, urn)
			}
		}
	}
	return nil
}

func processRefused(stage, envID string, env *pipepb.Environment) error {
	var p pipepb.ProcessPayload
	_ = proto.Unmarshal(env.GetPayload(), &p)
	return fmt.Errorf("stage %s: environment %q is a PROCESS environment (command %q), which this job server does not run: its option allow_process_environments is off (the default when the job endpoint is reachable beyond loopback); submit with --environment_type=LOOPBACK or EXTERNAL, or start the job server with --allow_process_environments",
		stage, envID, p.GetCommand())
}
