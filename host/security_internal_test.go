package host

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
)

// TestCheckBootstrap: a job's bootstrap_servers is refused, naming the
// option and the address, unless it is the job server's own brokers, or
// allowed_bootstrap_servers allows every address of it; without that
// option, only a job server on loopback without Kafka credentials lets a
// job name other brokers.
func TestCheckBootstrap(t *testing.T) {
	sasl := &kafkaconn.Security{Protocol: kafkaconn.SASLSSL, Mechanism: kafkaconn.MechanismScramSHA256, Username: "runner", Password: "x"}
	for _, c := range []struct {
		name     string
		loopback bool
		kafka    *kafkaconn.Security
		allowed  []string
		brokers  string
		want     string // "" allowed, else a part of the refusal
	}{
		{"own brokers", false, nil, nil, "own:9092", ""},
		{"loopback, no list: any", true, nil, nil, "elsewhere:9092", ""},
		{"beyond loopback, no list: own only", false, nil, nil, "elsewhere:9092", `pipeline option bootstrap_servers: "elsewhere:9092" is not this job server's brokers (own:9092)`},
		{"beyond loopback reason", false, nil, nil, "elsewhere:9092", "reachable beyond loopback"},
		{"credentials, no list: own only", true, sasl, nil, "elsewhere:9092", "its own Kafka credentials (SASL_SSL, SCRAM-SHA-256 as runner"},
		{"listed", false, sasl, []string{"kafka-*.internal:9093"}, "kafka-1.internal:9093,KAFKA-2.internal:9093", ""},
		{"listed with own", false, nil, []string{"other:1"}, "own:9092,other:1", ""},
		{"one address not listed", false, nil, []string{"kafka-*.internal:9093"}, "kafka-1.internal:9093,evil:9092", `pipeline option bootstrap_servers: address "evil:9092" is not allowed by the job server's option allowed_bootstrap_servers (kafka-*.internal:9093)`},
		{"port not listed", true, nil, []string{"kafka-*.internal:9093"}, "kafka-1.internal:9092", `address "kafka-1.internal:9092" is not allowed`},
		{"embedded not listed", false, nil, []string{"a:1"}, "embedded", `address "embedded" is not allowed`},
		{"embedded listed", false, nil, []string{"embedded"}, "embedded", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &JobServer{defaults: Options{BootstrapServers: "own:9092"}, cfg: serverConfig{loopback: c.loopback, kafka: c.kafka, allowedBootstrap: c.allowed}}
			err := s.checkBootstrap(c.brokers)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want a refusal containing %q", err, c.want)
			}
		})
	}
	for _, bad := range []string{"nohostport", "a:1:2", "[:9092"} {
		if err := checkAllowedBootstrap([]string{bad}); err == nil || !strings.Contains(err.Error(), "option allowed_bootstrap_servers") || !strings.Contains(err.Error(), bad) {
			t.Errorf("allowed_bootstrap_servers %q: got %v, want an error naming the option and the entry", bad, err)
		}
	}
	if _, err := NewJobServer("127.0.0.1:0", DefaultOptions(), nil, WithAllowedBootstrapServers([]string{"nohostport"})); err == nil || !strings.Contains(err.Error(), "allowed_bootstrap_servers") {
		t.Errorf("NewJobServer with a bad allowed_bootstrap_servers entry: %v", err)
	}
}

// TestStateDirParent: a state_dir whose parent does not exist is an error
// naming the option (as a job server option, a pipeline option, a
// worker's option); ksrunner creates state_dir itself only.
func TestStateDirParent(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir", "state")
	o := DefaultOptions()
	o.StateDir = missing
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "option state_dir") || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), missing) {
		t.Errorf("Validate: %v, want an error naming option state_dir and %s", err, missing)
	}
	opts, _ := structpb.NewStruct(map[string]any{"beam:option:state_dir:v1": missing})
	if _, err := DefaultOptions().WithPipelineOptions(opts); err == nil || !strings.Contains(err.Error(), "pipeline option state_dir") {
		t.Errorf("WithPipelineOptions: %v, want an error naming pipeline option state_dir", err)
	}
	_, err := NewWorker(WorkerConfig{ApplicationID: "a", BootstrapServers: "127.0.0.1:1", StateDir: missing, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "option state_dir") {
		t.Errorf("NewWorker: %v, want an error naming option state_dir", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	o.StateDir = filepath.Join(file, "state")
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("state_dir under a file: %v", err)
	}
	// A state_dir that does not exist yet, in an existing directory, is fine.
	o.StateDir = filepath.Join(t.TempDir(), "state")
	if err := o.Validate(); err != nil {
		t.Errorf("state_dir in an existing directory: %v", err)
	}
}
