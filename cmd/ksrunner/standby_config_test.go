package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNumStandbyReplicasConfig: num_standby_replicas comes from a flag,
// the environment or the configuration file, and a negative value is an
// error of the job server's configuration naming it.
func TestNumStandbyReplicasConfig(t *testing.T) {
	if cfg, err := loadServerConfig([]string{"--num_standby_replicas=1"}); err != nil || cfg.NumStandbyReplicas != 1 {
		t.Fatalf("flag: %d, %v", cfg.NumStandbyReplicas, err)
	}
	t.Setenv("KSRUNNER_NUM_STANDBY_REPLICAS", "2")
	if cfg, err := loadServerConfig(nil); err != nil || cfg.NumStandbyReplicas != 2 {
		t.Fatalf("env: %d, %v", cfg.NumStandbyReplicas, err)
	}
	os.Unsetenv("KSRUNNER_NUM_STANDBY_REPLICAS")
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("num_standby_replicas: -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadServerConfig([]string{"--config", file})
	if err == nil || !strings.Contains(err.Error(), "option num_standby_replicas: -1, must not be negative") || !strings.Contains(err.Error(), "job server configuration") {
		t.Errorf("config file with -1: %v, want an error of the job server configuration naming num_standby_replicas", err)
	}
}

// TestBrokerUnavailableTimeoutConfig: broker_unavailable_timeout_ms comes
// from a flag or the environment, and a value under a second is an error
// of the job server's configuration naming it.
func TestBrokerUnavailableTimeoutConfig(t *testing.T) {
	if cfg, err := loadServerConfig([]string{"--broker_unavailable_timeout_ms=60000"}); err != nil || cfg.BrokerUnavailableTimeoutMs != 60000 {
		t.Fatalf("flag: %d, %v", cfg.BrokerUnavailableTimeoutMs, err)
	}
	t.Setenv("KSRUNNER_BROKER_UNAVAILABLE_TIMEOUT_MS", "90000")
	if cfg, err := loadServerConfig(nil); err != nil || cfg.BrokerUnavailableTimeoutMs != 90000 {
		t.Fatalf("env: %d, %v", cfg.BrokerUnavailableTimeoutMs, err)
	}
	_, err := loadServerConfig([]string{"--broker_unavailable_timeout_ms=10"})
	if err == nil || !strings.Contains(err.Error(), "option broker_unavailable_timeout_ms: 10, must be at least 1000") || !strings.Contains(err.Error(), "job server configuration") {
		t.Errorf("flag 10: %v, want an error of the job server configuration naming broker_unavailable_timeout_ms", err)
	}
}

// TestWorkerBrokerUnavailableTimeoutFlag: a worker's
// broker_unavailable_timeout_ms (how long it reads its pipeline topic
// without the brokers) defaults to the job option's default, comes from a
// flag or the environment, and under a second is an error naming it and
// where it came from.
func TestWorkerBrokerUnavailableTimeoutFlag(t *testing.T) {
	base := []string{"--application_id=a", "--bootstrap_servers=b:1"}
	if f, err := parseWorkerFlags(base); err != nil || f.brokerUnavailableMs != 180000 {
		t.Fatalf("default: %d, %v", f.brokerUnavailableMs, err)
	}
	if f, err := parseWorkerFlags(append(base, "--broker_unavailable_timeout_ms=60000")); err != nil || f.brokerUnavailableMs != 60000 {
		t.Fatalf("flag: %d, %v", f.brokerUnavailableMs, err)
	}
	t.Setenv("KSRUNNER_BROKER_UNAVAILABLE_TIMEOUT_MS", "500")
	_, err := parseWorkerFlags(base)
	if err == nil || !strings.Contains(err.Error(), "option broker_unavailable_timeout_ms: 500, must be at least 1000 (from environment variable KSRUNNER_BROKER_UNAVAILABLE_TIMEOUT_MS)") {
		t.Errorf("environment 500: %v, want an error naming the option and the variable", err)
	}
}
