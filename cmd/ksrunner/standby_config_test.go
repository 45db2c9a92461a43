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
