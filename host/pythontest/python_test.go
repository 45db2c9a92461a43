// Package pythontest runs Beam Python SDK pipelines through ksrunner's job
// server (PortableRunner, LOOPBACK workers in the Python process): its own
// pipelines, whose results must equal the Python DirectRunner's on the same
// pipeline, and the Python SDK's ValidatesRunner tests.
//
// The tests need python3 (3.10 or newer) and the apache-beam package at the
// Beam version of go.mod. KSRUNNER_PYTHON names a python that has it;
// otherwise the tests make a virtual environment under the user cache
// directory (ksrunner/pyvenv-beam-VERSION) with pip, once. Without python3
// they skip, unless KSRUNNER_REQUIRE_PYTHON is set (CI sets it).
package pythontest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/expansion/expansiontest"
	"github.com/ksrunner/ksrunner/host/internal/testkit"

	"github.com/ksrunner/ksrunner/host"
)

// TestMain gives the tests' processes a temporary directory of their own,
// removed at the end: the Python SDK makes a beam-pipeline-temp directory
// for every Pipeline and removes it only when that pipeline runs, and
// Beam's suites build pipelines they never run, which left dozens of
// directories in /tmp per run.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ksrunner-pythontest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pythontest:", err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// beamPython returns a python interpreter that can import apache_beam (the
// venv of Beam's Python SDK at go.mod's Beam version, shared with the
// expansion service's tests; see expansiontest.BeamPython).
func beamPython(t *testing.T) string { return expansiontest.BeamPython(t) }

// runPipeline runs a pipeline script of testdata, which writes its results
// one per line to its first argument, and returns the lines sorted.
func runPipeline(ctx context.Context, t *testing.T, py, script string, args ...string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "results.txt")
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", script), out}, args...)...)
	// On timeout, SIGABRT makes Python's fault handler print every
	// thread's stack into log (a hung run then says where it hung), and
	// WaitDelay kills it if that does not end it.
	cmd.Env = append(os.Environ(), "PYTHONFAULTHANDLER=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGABRT) }
	cmd.WaitDelay = 10 * time.Second
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, log.Bytes())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(lines)
	return lines
}

// startJobServer starts a job server with the test broker and returns its
// endpoint.
func startJobServer(t *testing.T, opts host.Options) string {
	t.Helper()
	return startJobServerLog(t, opts, &testkit.SyncBuffer{})
}

// Custom WindowFns written in Python: a non-merging one whose windows depend
// on the element and a merging one (sessions with a per-element gap), under
// GroupByKey, CombinePerKey and a second GroupByKey of merged windows. The
// SDK assigns the windows and merges them (merge_windows).
func TestCustomWindowFns(t *testing.T) {
	matchDirectRunner(t, "windowfns.py", map[string]int{
		"group-fixed": 500, "sum-fixed": 500, "group-sessions": 500, "sum-sessions": 500, "regroup-sessions": 50,
	})
}

// The model's main features from Python: multiple outputs, side inputs
// (singleton, list, dict), combines, Flatten and CoGroupByKey over inputs
// of different coders, Reshuffle, fixed, sliding and session windows, and a
// stateful DoFn with bag state and an event-time timer, a group of 3 MB
// (paged: host/internal/task/gbkpages.go; to a plain ParDo, to one with a
// side input and to a stateful one, with internal_max_message_bytes at
// 1 MiB; in pieces across a topic to a ParDo with a side input that shares
// it with another, and through a Flatten of two GroupByKeys' groups), an
// ordered list state of 3 MB
// (paged: host/internal/state/user.go), and a splittable DoFn with a
// windowed side input that defers its remainders.
func TestFeatures(t *testing.T) {
	matchDirectRunner(t, "features.py", map[string]int{
		"count-even": 25, "sum-odd": 25, "side": 25, "cogbk": 25, "fixed": 100, "sliding": 300, "sessions": 100, "state": 50, "hotkey": 1, "hotside": 1, "hotshared": 1, "hotsharedcount": 1, "hotflatten": 2, "hotstate": 1, "ordered": 1, "sdfside": 500,
	}, func(o *host.Options) {
		// No 3 MB group may cross a topic or the store whole.
		o.InternalMaxMessageBytes = 1 << 20
	})
}

// A splittable DoFn that never checkpoints itself, each of its three
// restrictions 2 s long, under a 2 s transaction timeout: ksrunner
// checkpoints its bundles (host/internal/task/checkpoint.go) through the
// Python SDK's split API, so every cycle commits in time and the output is
// the DirectRunner's.
func TestLongSplittableBundle(t *testing.T) {
	matchDirectRunner(t, "longsdf.py", map[string]int{"longsdf": 1200}, func(o *host.Options) {
		o.TransactionTimeoutMs = 2000
		o.MaxBundleTimeMs = 500
	})
}

// A Python splittable DoFn with a 2 s restriction and a 0.1 s one, on two
// tasks: the task done first splits the other's running restriction at
// half its remainder (the SDK answers the split) and processes the rest,
// with the same output as the DirectRunner and the job's committed
// ksrunner/rebalanced_splits counter at least 1 (0 without the
// rebalancing).
func TestSplittableWorkRebalanced(t *testing.T) {
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want := runPipeline(ctx, t, py, "unevensdf.py")
	if len(want) != 420 {
		t.Fatalf("reference run: %d results, want 420", len(want))
	}
	opts := host.DefaultOptions()
	opts.InternalParallelism = 2
	endpoint := startJobServer(t, opts)
	metrics := filepath.Join(t.TempDir(), "rebalanced")
	t.Setenv("KSRUNNER_TEST_METRICS_FILE", metrics)
	got := runPipeline(ctx, t, py, "unevensdf.py",
		"--runner=PortableRunner", "--job_endpoint="+endpoint, "--environment_type=LOOPBACK")
	if d := diff(want, got); d != "" {
		t.Errorf("results differ from the DirectRunner's (%d lines, want %d):\n%s", len(got), len(want), d)
	}
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(string(b)); err != nil || n < 1 {
		t.Errorf("committed ksrunner/rebalanced_splits: %q, want at least 1", b)
	}
}

// Wordcount with the SDK's file IO: ReadFromText (a splittable DoFn) and
// WriteToText (sharded temporary files, then a finalizing step).
func TestWordCount(t *testing.T) {
	matchDirectRunner(t, "wordcount.py", map[string]int{"count": 300})
}

// pythonVRFiles are the Beam Python test files with ValidatesRunner tests
// that need nothing but a portable runner (no Dataflow, GCP, other runners'
// job servers or cross-language expansion).
var pythonVRFiles = []string{
	"apache_beam/pipeline_test.py",
	"apache_beam/transforms/combinefn_lifecycle_test.py",
	"apache_beam/transforms/deduplicate_test.py",
	"apache_beam/transforms/combiners_test.py",
	"apache_beam/transforms/dofn_lifecycle_test.py",
	"apache_beam/transforms/util_test.py",
	"apache_beam/transforms/sideinputs_test.py",
	"apache_beam/transforms/ptransform_test.py",
	"apache_beam/metrics/metric_test.py",
}

// pythonVRExpectedFailures fail, by test id, with the given message in
// pytest's output (none today).
var pythonVRExpectedFailures = map[string]string{}

// The Beam Python SDK's own ValidatesRunner tests (the it_validatesrunner
// mark) from the files above, through ksrunner: every test passes but the
// expected failures, which must fail with their message.
func TestPythonValidatesRunner(t *testing.T) {
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	site, err := exec.CommandContext(ctx, py, "-c", "import apache_beam, os; print(os.path.dirname(os.path.dirname(apache_beam.__file__)))").Output()
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := startJobServer(t, host.DefaultOptions())
	args := append([]string{"-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "beam_opts_plugin", "-m", "it_validatesrunner",
		"--test-pipeline-options=--runner=PortableRunner --job_endpoint=" + endpoint + " --environment_type=LOOPBACK"}, pythonVRFiles...)
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Dir = strings.TrimSpace(string(site))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+plugin)
	out, _ := cmd.CombinedOutput() // pytest exits non-zero on the expected failures
	results := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "PASSED" || f[0] == "FAILED" || f[0] == "ERROR") && strings.Contains(f[1], "::") {
			results[f[1]] = f[0]
		}
	}
	passed := 0
	for test, res := range results {
		want, expectFail := pythonVRExpectedFailures[test]
		switch {
		case res == "PASSED" && expectFail:
			t.Errorf("%s passed; it is listed as an expected failure (%s): update the list", test, want)
		case res == "PASSED":
			passed++
		case !expectFail:
			t.Errorf("%s: %s", test, res)
		}
	}
	for test, msg := range pythonVRExpectedFailures {
		if results[test] != "FAILED" {
			t.Errorf("%s: %q, want FAILED", test, results[test])
		}
		if !strings.Contains(string(out), msg) {
			t.Errorf("%s: the output does not say %q", test, msg)
		}
	}
	if passed < 30 || t.Failed() {
		t.Errorf("%d ValidatesRunner tests passed; pytest output:\n%s", passed, out)
	}
	t.Logf("%d Python ValidatesRunner tests passed, %d expected failures", passed, len(pythonVRExpectedFailures))
}

// matchDirectRunner runs a pipeline script on the Python DirectRunner and
// through ksrunner at internal_parallelism 1 and 4; ksrunner's results must
// be exactly the DirectRunner's. minimum gives, per result kind (a line's
// first word), how many results the reference must have at least, so the
// comparison means something.
func matchDirectRunner(t *testing.T, script string, minimum map[string]int, with ...func(*host.Options)) {
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want := runPipeline(ctx, t, py, script)
	kinds := map[string]int{}
	for _, l := range want {
		kinds[strings.Fields(l)[0]]++
	}
	for k, n := range minimum {
		if kinds[k] < n {
			t.Fatalf("reference run: %d %s results, want at least %d (%v)", kinds[k], k, n, kinds)
		}
	}
	for _, par := range []int{1, 4} {
		t.Run(fmt.Sprintf("internal_parallelism=%d", par), func(t *testing.T) {
			opts := host.DefaultOptions()
			opts.InternalParallelism = par
			for _, f := range with {
				f(&opts)
			}
			endpoint := startJobServer(t, opts)
			got := runPipeline(ctx, t, py, script,
				"--runner=PortableRunner", "--job_endpoint="+endpoint, "--environment_type=LOOPBACK")
			if d := diff(want, got); d != "" {
				t.Errorf("results differ from the DirectRunner's (%d lines, want %d):\n%s", len(got), len(want), d)
			}
		})
	}
}

// diff lists up to 20 lines only in want (-) or only in got (+); both sorted.
func diff(want, got []string) string {
	var b strings.Builder
	n := 0
	add := func(prefix, l string) {
		if n < 20 {
			fmt.Fprintf(&b, "%s %s\n", prefix, l)
		}
		n++
	}
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || i < len(want) && want[i] < got[j]:
			add("-", want[i])
			i++
		case i == len(want) || got[j] < want[i]:
			add("+", got[j])
			j++
		default:
			i++
			j++
		}
	}
	if n > 20 {
		fmt.Fprintf(&b, "... %d more\n", n-20)
	}
	return b.String()
}
