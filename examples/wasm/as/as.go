// Package as holds an AssemblyScript DoFn for ksrunner's WASM ABI v1
// (assembly/index.ts: "Split", strings into words, the same as the Go
// example's wordfns.Split) and builds it.
//
// Build it by hand (Node.js and npm needed; nothing is installed in the
// repository):
//
//	npm install --prefix ~/.cache/ksrunner/assemblyscript-0.28.20 assemblyscript@0.28.20
//	~/.cache/ksrunner/assemblyscript-0.28.20/node_modules/.bin/asc examples/wasm/as/assembly/index.ts \
//	    -o split-as.wasm -O3 --runtime stub --use abort= --exportStart _initialize --noAssert
//
// and map transforms to it with --stage_wasm='PATTERN=split-as.wasm#Split'.
// Build does the same from Go (the tests and `ksrunner-bench wasm` use it).
package as

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Version is the assemblyscript npm package the module is built with.
const Version = "0.28.20"

//go:embed assembly/index.ts
var source []byte

// ErrNoNPM: npm is not installed, so the module cannot be built.
var ErrNoNPM = errors.New("npm not found in PATH (install Node.js and npm to build the AssemblyScript module)")

// Args are asc's arguments after the input file and -o: optimised, the stub
// runtime (no GC), no env.abort import (the host provides only WASI and
// ksr), top-level initialisation exported as _initialize (the host calls
// it), no runtime assertions.
var Args = []string{"-O3", "--runtime", "stub", "--use", "abort=", "--exportStart", "_initialize", "--noAssert"}

// Build compiles the module into dir and returns its path. It installs the
// assemblyscript compiler with npm into a cache directory on first use.
func Build(ctx context.Context, dir string) (string, error) {
	asc, err := compiler(ctx)
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "index.ts")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "split-as.wasm")
	cmd := exec.CommandContext(ctx, asc, append([]string{src, "-o", out}, Args...)...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("asc: %v\n%s", err, msg)
	}
	return out, nil
}

// compiler returns the path of asc, installing it if needed.
func compiler(ctx context.Context) (string, error) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", ErrNoNPM
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	prefix := filepath.Join(cache, "ksrunner", "assemblyscript-"+Version)
	asc := filepath.Join(prefix, "node_modules", ".bin", "asc")
	if _, err := os.Stat(asc); err == nil {
		return asc, nil
	}
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", prefix, "assemblyscript@"+Version)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install assemblyscript@%s: %v\n%s", Version, err, msg)
	}
	if _, err := os.Stat(asc); err != nil {
		return "", fmt.Errorf("npm install assemblyscript@%s: no %s afterwards", Version, asc)
	}
	return asc, nil
}
