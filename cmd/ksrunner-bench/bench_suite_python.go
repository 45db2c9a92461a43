package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The Python case of the suite: bench_suite_wordcount.py on ksrunner
// (PortableRunner on the job server child, LOOPBACK) and on Prism
// (Python's PrismRunner with --prism_location: it cannot download a prism
// here, so the suite builds one from the Beam Go module it links).

//go:embed bench_suite_wordcount.py
var wordcountScript []byte

// runPythonCase runs c's wordcount in a Python child and returns the
// pipeline's wall time (as the script measured it) and the peak RSS of the
// Python process tree (the SDK worker; on Prism the prism process too).
func runPythonCase(ctx context.Context, c *suiteCase, runner string, js *jobServerChild, python, prismBinary string) (time.Duration, int64, error) {
	if python == "" {
		return 0, 0, fmt.Errorf("no --python (a python with apache_beam) for a Python case")
	}
	work, err := os.MkdirTemp("", "ksrunner-bench-wordcount-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(work)
	script := filepath.Join(work, "wordcount.py")
	if err := os.WriteFile(script, wordcountScript, 0o644); err != nil {
		return 0, 0, err
	}
	args := []string{script, work, strconv.FormatInt(c.pyWords, 10), "--environment_type=LOOPBACK"}
	switch runner {
	case "ksrunner":
		args = append(args, "--runner=PortableRunner", "--job_endpoint="+js.endpoint)
	case "prism":
		if prismBinary == "" {
			return 0, 0, fmt.Errorf("no --prism_binary for a Python case on Prism")
		}
		args = append(args, "--runner=PrismRunner", "--prism_location="+prismBinary)
	}
	cmd := exec.CommandContext(ctx, python, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("%s: %w\n%s%s", python, err, out.Bytes(), tail(errOut.Bytes(), 4000))
	}
	var wall float64
	var checked int64
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "wall_s "); ok {
			wall, err = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "checked "); ok {
			checked, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("wordcount printed %q: %w", sc.Text(), err)
		}
	}
	if wall == 0 || checked == 0 {
		return 0, 0, fmt.Errorf("wordcount printed no wall time or check: %q", out.Bytes())
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, 0, fmt.Errorf("no resource usage of the Python process")
	}
	return time.Duration(wall * float64(time.Second)), ru.Maxrss, nil
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// defaultPython is $KSRUNNER_PYTHON, else the venv host/pythontest makes
// (apache-beam 2.77.0) when one is ready, else "". The tests' helper
// (host/internal/expansion/expansiontest) names its venv
// pyvenv-beam-2.77.0-N and bumps N when its packages change, marking a
// finished one with .ksrunner-ready: the ready one of the highest N is
// taken, so that a bump there does not leave the bench without Python.
func defaultPython() string {
	if py := os.Getenv("KSRUNNER_PYTHON"); py != "" {
		return py
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return readyVenv(filepath.Join(cache, "ksrunner"), "pyvenv-beam-2.77.0-")
}

// readyVenv is the python of the ready venv in dir named prefix+N with the
// highest N, or "".
func readyVenv(dir, prefix string) string {
	entries, _ := os.ReadDir(dir)
	best, py := -1, ""
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), prefix))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) || err != nil || n <= best {
			continue
		}
		venv := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(venv, ".ksrunner-ready")); err != nil {
			continue
		}
		best, py = n, filepath.Join(venv, "bin", "python")
	}
	return py
}

// buildPrism builds Prism's command from the Beam Go module this binary
// links into dir and returns its path. It runs the go command in the
// current directory, which must be in ksrunner's module (go run
// ./cmd/ksrunner-bench from the repository).
func buildPrism(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "prism")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/apache/beam/sdks/v2/go/cmd/prism")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building prism (go build github.com/apache/beam/sdks/v2/go/cmd/prism, from the repository): %w\n%s", err, out)
	}
	return bin, nil
}
