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
// (apache-beam 2.77.0) when it exists, else "".
func defaultPython() string {
	if py := os.Getenv("KSRUNNER_PYTHON"); py != "" {
		return py
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	py := filepath.Join(cache, "ksrunner", "pyvenv-beam-2.77.0-3", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return ""
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
