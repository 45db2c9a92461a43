package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStageWASMConfig(t *testing.T) {
	// Flags: repeatable and comma-separated.
	cfg, err := loadServerConfig([]string{"--stage_wasm=A*=/m/a.wasm", "--stage_wasm=B=/m/b.wasm#Fn,C=file:///m/c.wasm",
		"--wasm_interruptible=false", "--wasm_bundle_deadline=30s", "--wasm_memory_limit_mb=128"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A*=/m/a.wasm", "B=/m/b.wasm#Fn", "C=file:///m/c.wasm"}; !slices.Equal(cfg.StageWASM, want) {
		t.Errorf("flags: stage_wasm %q, want %q", cfg.StageWASM, want)
	}
	if cfg.WASMInterruptible || cfg.WASMBundleDeadline != 30*time.Second || cfg.WASMMemoryLimitMB != 128 {
		t.Errorf("flags: interruptible %v, deadline %v, memory limit %d", cfg.WASMInterruptible, cfg.WASMBundleDeadline, cfg.WASMMemoryLimitMB)
	}

	// Defaults.
	if cfg, err = loadServerConfig(nil); err != nil {
		t.Fatal(err)
	}
	if len(cfg.StageWASM) != 0 || !cfg.WASMInterruptible || cfg.WASMBundleDeadline != 5*time.Minute || cfg.WASMMemoryLimitMB != 256 {
		t.Errorf("defaults: %q %v %v %d", cfg.StageWASM, cfg.WASMInterruptible, cfg.WASMBundleDeadline, cfg.WASMMemoryLimitMB)
	}

	// Environment (comma-separated) and config file (a list).
	t.Setenv("KSRUNNER_STAGE_WASM", "X=/x.wasm,Y=/y.wasm")
	if cfg, err = loadServerConfig(nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"X=/x.wasm", "Y=/y.wasm"}; !slices.Equal(cfg.StageWASM, want) {
		t.Errorf("env: stage_wasm %q, want %q", cfg.StageWASM, want)
	}
	os.Unsetenv("KSRUNNER_STAGE_WASM")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("stage_wasm:\n  - 'S*=/s.wasm'\nwasm_bundle_deadline: 1m\n"), 0o644)
	if cfg, err = loadServerConfig([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.StageWASM, []string{"S*=/s.wasm"}) || cfg.WASMBundleDeadline != time.Minute {
		t.Errorf("file: stage_wasm %q, deadline %v", cfg.StageWASM, cfg.WASMBundleDeadline)
	}

	// Malformed entries fail at startup.
	if _, err := loadServerConfig([]string{"--stage_wasm=nomodule"}); err == nil {
		t.Error("--stage_wasm=nomodule: no error")
	}
	if _, err := loadServerConfig([]string{"--wasm_memory_limit_mb=0"}); err == nil || !strings.Contains(err.Error(), "wasm_memory_limit_mb: 0, must be 1 to 4096") {
		t.Errorf("--wasm_memory_limit_mb=0: %v", err)
	}
}

// Configuration merges defaults < --config file < KSRUNNER_* environment <
// flags, and other tools' KSRUNNER_* variables are not options.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ksrunner.yaml")
	if err := os.WriteFile(file, []byte("internal_parallelism: 3\nmax_bundle_size: 7\ncommit_interval_ms: 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KSRUNNER_MAX_BUNDLE_SIZE", "70")
	t.Setenv("KSRUNNER_COMMIT_INTERVAL_MS", "90")
	t.Setenv("KSRUNNER_SOURCE_IDLE_TIMEOUT_MS", "2500")
	t.Setenv("KSRUNNER_TEST_BOOTSTRAP", "127.0.0.1:1") // the test helpers' variable, not an option
	cfg, err := loadServerConfig([]string{"--config", file, "--commit_interval_ms=900"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"internal_parallelism (file over default)", cfg.InternalParallelism, 3},
		{"max_bundle_size (env over file)", cfg.MaxBundleSize, 70},
		{"commit_interval_ms (flag over env)", cfg.CommitIntervalMs, 900},
		{"job_port (default)", cfg.JobPort, 8099},
		{"source_idle_timeout_ms (env over default)", cfg.SourceIdleTimeoutMs, 2500},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}

	if err := os.WriteFile(file, []byte("internal_paralelism: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadServerConfig([]string{"--config", file}); err == nil || !strings.Contains(err.Error(), "internal_paralelism") {
		t.Errorf("a misspelt option in the file: %v, want an error naming it", err)
	}
	if _, err := loadServerConfig([]string{"--internal_parallelism=0"}); err == nil || !strings.Contains(err.Error(), "internal_parallelism") {
		t.Errorf("an invalid value: %v, want an error naming the option", err)
	}
}
