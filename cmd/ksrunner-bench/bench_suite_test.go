package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ksrunner/ksrunner/host"
)

// suiteWindowSum agrees with a sum over every element.
func TestSuiteWindowSum(t *testing.T) {
	const n, keys, span = 5000, 7, 60_000
	for start := int64(0); start < span; start += 1000 {
		for key := int64(0); key < keys; key++ {
			var want int64
			for i := int64(0); i < n; i++ {
				if ts := i * span / n; ts >= start && ts < start+1000 && i%keys == key {
					want += i
				}
			}
			if got := suiteWindowSum(n, keys, span, key, start, start+1000); got != want {
				t.Fatalf("window [%d,%d) key %d: %d, want %d", start, start+1000, key, got, want)
			}
		}
	}
}

// The suite's own pipelines, small, run on ksrunner (packed and not) and
// pass their checks; a check that is wrong fails.
func TestSuitePipelinesOnKsrunner(t *testing.T) {
	const n, keys = 20_000, 50
	for _, pack := range []int{0, host.DefaultRecordPackBytes} {
		opts := host.DefaultOptions()
		opts.InternalParallelism = 3
		opts.CommitIntervalMs = 5
		opts.RecordPackBytes = pack
		res := runOnKsrunner(t, buildHotKeyBench(n, keys), opts)
		if err := checkCounts(suiteCounts(res.Metrics(), suiteNamespace), map[string]int64{"checked": keys}); err != nil {
			t.Errorf("hot key, record_pack_bytes=%d: %v", pack, err)
		}
		res = runOnKsrunner(t, buildWindowedBench(n, keys), opts)
		got := suiteCounts(res.Metrics(), suiteNamespace)
		if err := checkCounts(got, map[string]int64{"checked": windowGroups(n, keys, windowedSpan.Milliseconds())}); err != nil {
			t.Errorf("windowed, record_pack_bytes=%d: %v", pack, err)
		}
		res = runOnKsrunner(t, buildSideJoinBench(n, 3000), opts)
		got = suiteCounts(res.Metrics(), suiteNamespace)
		if err := checkSideJoin(res, "ksrunner", n, 3000); err != nil {
			t.Errorf("side join, record_pack_bytes=%d: %v", pack, err)
		}
		if err := checkCounts(got, map[string]int64{"joined": n + 1}); err == nil || !strings.Contains(err.Error(), "counter joined") {
			t.Errorf("a wrong count passed the check: %v", err)
		}
	}
}

// Every case runs at 1M and 10M elements, under names of its own.
func TestSuiteCasesAtBothSizes(t *testing.T) {
	seen := map[string]int64{}
	sizes := map[string]map[int64]bool{}
	for _, c := range suiteCases() {
		if _, dup := seen[c.Name]; dup {
			t.Errorf("case %s twice", c.Name)
		}
		seen[c.Name] = c.Elements
		base := c.Name[:strings.LastIndex(c.Name, "-")]
		if sizes[base] == nil {
			sizes[base] = map[int64]bool{}
		}
		sizes[base][c.Elements] = true
		if (c.build == nil || c.check == nil) != (c.pyWords > 0) {
			t.Errorf("case %s: a Go pipeline needs build and check, a Python one neither", c.Name)
		}
	}
	for base, s := range sizes {
		if !s[1_000_000] || !s[10_000_000] || len(s) != 2 {
			t.Errorf("case %s at %v, want 1M and 10M", base, s)
		}
	}
	if len(sizes) != 8 {
		t.Errorf("%d cases, want 8 (gbk, onekey, combine, combine-split, hotkey, windowed, sidejoin, wordcount-py)", len(sizes))
	}
}

// TestReadyVenv: the bench takes the tests' Python venv of the highest
// version that is ready, whatever version the tests' helper is at.
func TestReadyVenv(t *testing.T) {
	const prefix = "pyvenv-beam-2.77.0-"
	for _, c := range []struct {
		name  string
		venvs map[string]bool // venv name → ready
		want  string          // the venv taken, "" for none
	}{
		{"none", nil, ""},
		{"one ready", map[string]bool{prefix + "4": true}, prefix + "4"},
		{"the highest ready", map[string]bool{prefix + "3": true, prefix + "4": true, prefix + "10": true}, prefix + "10"},
		{"not the one still being made", map[string]bool{prefix + "4": true, prefix + "5": false}, prefix + "4"},
		{"only ready ones", map[string]bool{prefix + "4": false}, ""},
		{"not another version's", map[string]bool{"pyvenv-beam-2.76.0-9": true, prefix + "x": true}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, ready := range c.venvs {
				if err := os.MkdirAll(filepath.Join(dir, name, "bin"), 0o755); err != nil {
					t.Fatal(err)
				}
				if ready {
					if err := os.WriteFile(filepath.Join(dir, name, ".ksrunner-ready"), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := ""
			if c.want != "" {
				want = filepath.Join(dir, c.want, "bin", "python")
			}
			if got := readyVenv(dir, prefix); got != want {
				t.Errorf("readyVenv = %q, want %q", got, want)
			}
		})
	}
}
