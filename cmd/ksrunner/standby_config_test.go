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
