package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// testPackage is one compiled integration test package.
type testPackage struct {
	importPath string
	short      string // last element of the import path: the prefix of test ids
	dir        string // source directory: tests run there, as under go test
	bin        string
	logdir     string
	tests      []string // selected top-level tests, in listing order
	skipped    []string // tests --run selects but --skip excludes (reported, not run)
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module (run from the ksrunner module)")
	}
	return filepath.Dir(gomod), nil
}

func buildPackage(ctx context.Context, root, importPath, logdir string) (*testPackage, error) {
	tp := &testPackage{importPath: importPath, short: path.Base(importPath), logdir: logdir}
	out, err := goCmd(ctx, root, "list", "-f", "{{.Dir}}", importPath)
	if err != nil {
		return nil, fmt.Errorf("go list %s: %v\n%s", importPath, err, out)
	}
	tp.dir = strings.TrimSpace(string(out))
	tp.bin = filepath.Join(logdir, tp.short+".test")
	if out, err := goCmd(ctx, root, "test", "-c", "-o", tp.bin, importPath); err != nil {
		return nil, fmt.Errorf("go test -c %s: %v\n%s", importPath, err, out)
	}
	return tp, nil
}

func goCmd(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

var testNameRE = regexp.MustCompile(`^Test[^\s/]*$`)

// list selects the package's top-level tests with run (nil: all) minus skip.
func (tp *testPackage) list(ctx context.Context, run, skip *regexp.Regexp) ([]string, error) {
	cmd := exec.CommandContext(ctx, tp.bin, "-test.list", ".*")
	cmd.Dir = tp.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -test.list: %v\n%s", tp.bin, err, stderr.String())
	}
	lines := strings.Split(string(out), "\n")
	tp.tests = selectTests(lines, run, skip)
	if skip != nil {
		for _, name := range selectTests(lines, run, nil) {
			if skip.MatchString(name) {
				tp.skipped = append(tp.skipped, name)
			}
		}
	}
	return tp.tests, nil
}

func selectTests(lines []string, run, skip *regexp.Regexp) []string {
	var names []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if !testNameRE.MatchString(l) || l == "TestMain" || leftOut.MatchString(l) {
			continue
		}
		if run != nil && !run.MatchString(l) {
			continue
		}
		if skip != nil && skip.MatchString(l) {
			continue
		}
		names = append(names, l)
	}
	return names
}

// result of one top-level test.
type result struct {
	Package string // short package name
	Test    string
	Status  string // pass, fail, skip
	Note    string // why it failed when the events do not say (timeout, crash)
	Elapsed time.Duration
	Output  string
}

// ID is how the expected list names the test.
func (r result) ID() string { return r.Package + "." + r.Test }

// event is one go test -json / test2json event.
type event struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// grace is how long after -test.timeout the process gets to report before it is killed.
const grace = 15 * time.Second

func (tp *testPackage) runTest(ctx context.Context, name, endpoint string, timeout time.Duration) result {
	r := result{Package: tp.short, Test: name}
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, timeout+grace)
	defer cancel()
	cmd := exec.CommandContext(tctx, "go", "tool", "test2json", "-t", "-p", tp.importPath,
		tp.bin, "-test.v=test2json", "-test.run", "^"+regexp.QuoteMeta(name)+"$",
		"-test.timeout", timeout.String(), "-test.count=1",
		"--runner=universal", "--endpoint="+endpoint, "--environment_type=LOOPBACK")
	cmd.Dir = tp.dir
	// its own process group, so the kill on timeout also reaches the test binary
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.Status, r.Note = "fail", err.Error()
		return r
	}
	logf, _ := os.Create(filepath.Join(tp.logdir, tp.short+"."+name+".jsonl"))
	if logf != nil {
		defer logf.Close()
	}
	if err := cmd.Start(); err != nil {
		r.Status, r.Note = "fail", err.Error()
		return r
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if logf != nil {
			logf.Write(line)
			logf.Write([]byte{'\n'})
		}
		var ev event
		if json.Unmarshal(line, &ev) != nil {
			out.Write(line)
			out.WriteByte('\n')
			continue
		}
		if ev.Action == "output" {
			out.WriteString(ev.Output)
		}
		if ev.Test == name {
			switch ev.Action {
			case "pass", "fail", "skip":
				r.Status = ev.Action
			}
		}
	}
	werr := cmd.Wait()
	r.Elapsed = time.Since(start)
	r.Output = out.String() + stderr.String()
	switch {
	case tctx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		r.Status, r.Note = "fail", fmt.Sprintf("killed: still running after %v", timeout+grace)
	case r.Status == "":
		r.Status = "fail"
		if werr != nil {
			r.Note = "no result: " + werr.Error()
		} else {
			r.Note = "no result"
		}
	case r.Status == "fail" && strings.Contains(r.Output, "panic: test timed out after"):
		r.Note = "timed out after " + timeout.String()
	}
	if r.Status == "pass" && werr != nil {
		// the test passed but the process failed afterwards (e.g. a crash in cleanup)
		r.Status, r.Note = "fail", "process failed after the test passed: "+werr.Error()
	}
	return r
}
