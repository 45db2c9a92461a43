package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestStageWASMConfig(t *testing.T) {
	// Flags: repeatable and comma-separated.
	cfg, err := loadServerConfig([]string{"--stage_wasm=A*=/m/a.wasm", "--stage_wasm=B=/m/b.wasm#Fn,C=file:///m/c.wasm",
		"--wasm_interruptible", "--wasm_bundle_deadline=30s"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A*=/m/a.wasm", "B=/m/b.wasm#Fn", "C=file:///m/c.wasm"}; !slices.Equal(cfg.StageWASM, want) {
		t.Errorf("flags: stage_wasm %q, want %q", cfg.StageWASM, want)
	}
	if !cfg.WASMInterruptible || cfg.WASMBundleDeadline != 30*time.Second {
		t.Errorf("flags: interruptible %v, deadline %v", cfg.WASMInterruptible, cfg.WASMBundleDeadline)
	}

	// Defaults.
	if cfg, err = loadServerConfig(nil); err != nil {
		t.Fatal(err)
	}
	if len(cfg.StageWASM) != 0 || cfg.WASMInterruptible || cfg.WASMBundleDeadline != 5*time.Minute {
		t.Errorf("defaults: %q %v %v", cfg.StageWASM, cfg.WASMInterruptible, cfg.WASMBundleDeadline)
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
}
