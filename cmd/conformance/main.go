package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

const defaultPackages = "github.com/apache/beam/sdks/v2/go/test/integration/primitives"

// defaultSkip names the tests not run by default, reported as skipped: TestDrain runs an
// unbounded splittable DoFn that ends only when the job is drained from outside (only
// Dataflow's harness does that), so it is a certain hang of --timeout. Beam filters it for
// every portable runner.
const defaultSkip = "^TestDrain$"

// leftOut names the tests that are neither run nor reported: TestOomParDo needs the SDK in
// a container and a temp_location to find heap dumps in, which no machine here has.
var leftOut = regexp.MustCompile("^TestOomParDo$")

type config struct {
	endpoint   string
	prism      bool
	packages   []string
	run        string
	skip       string
	timeout    time.Duration
	expected   string
	parallel   int
	logdir     string
	jobTimeout time.Duration
	verbose    bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var packages string
	fs.StringVar(&cfg.endpoint, "endpoint", "", "job endpoint HOST:PORT; empty: build and start ./cmd/ksrunner jobserver --job_port=0")
	fs.BoolVar(&cfg.prism, "prism", false, "with no --endpoint: build and start Beam's Prism instead of ksrunner (a reference run)")
	fs.StringVar(&packages, "packages", defaultPackages, "comma-separated import paths of Beam integration test packages")
	fs.StringVar(&cfg.run, "run", "", "regexp selecting top-level tests (empty: all)")
	fs.StringVar(&cfg.skip, "skip", defaultSkip, "regexp of top-level tests not to run")
	fs.DurationVar(&cfg.timeout, "timeout", 120*time.Second, "per-test timeout; a test still running then is killed and failed")
	fs.StringVar(&cfg.expected, "expected", "", "file listing the tests that must pass (default: .ci/conformance-expected.txt at the module root)")
	fs.IntVar(&cfg.parallel, "parallel", 1, "tests run at the same time (Prism mixes up user state of concurrent jobs: keep 1 to compare with it)")
	fs.StringVar(&cfg.logdir, "logdir", "", "directory for the test binaries' output (default: a new temporary directory)")
	fs.DurationVar(&cfg.jobTimeout, "jobserver_timeout", 3*time.Minute, "how long to wait for a started job server to print its endpoint (includes building it)")
	fs.BoolVar(&cfg.verbose, "v", false, "print each test's output as it finishes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "conformance: unexpected arguments %q\n", fs.Args())
		return 2
	}
	for _, p := range strings.Split(packages, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.packages = append(cfg.packages, p)
		}
	}
	if cfg.parallel < 1 {
		cfg.parallel = 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	code, err := conform(ctx, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "conformance: %v\n", err)
	}
	return code
}

func conform(ctx context.Context, cfg config, stdout, stderr io.Writer) (int, error) {
	start := time.Now()
	root, err := moduleRoot(ctx)
	if err != nil {
		return 2, err
	}
	if cfg.expected == "" {
		cfg.expected = filepath.Join(root, ".ci", "conformance-expected.txt")
	}
	expected, err := readExpected(cfg.expected)
	if err != nil {
		return 2, err
	}
	var runRE, skipRE *regexp.Regexp
	if cfg.run != "" {
		if runRE, err = regexp.Compile(cfg.run); err != nil {
			return 2, fmt.Errorf("--run: %v", err)
		}
	}
	if cfg.skip != "" {
		if skipRE, err = regexp.Compile(cfg.skip); err != nil {
			return 2, fmt.Errorf("--skip: %v", err)
		}
	}
	if cfg.logdir == "" {
		if cfg.logdir, err = os.MkdirTemp("", "ksrunner-conformance-"); err != nil {
			return 2, err
		}
	} else if err := os.MkdirAll(cfg.logdir, 0o755); err != nil {
		return 2, err
	}
	fmt.Fprintf(stderr, "conformance: logs in %s\n", cfg.logdir)
	// The binaries built there (the test packages', the job server's) are
	// hundreds of MB a run; the logs are what is kept.
	defer removeBinaries(cfg.logdir)

	// Build the test binaries first: that is the slow part, and it needs no job server.
	var pkgs []*testPackage
	for _, p := range cfg.packages {
		t0 := time.Now()
		tp, err := buildPackage(ctx, root, p, cfg.logdir)
		if err != nil {
			return 2, err
		}
		names, err := tp.list(ctx, runRE, skipRE)
		if err != nil {
			return 2, err
		}
		fmt.Fprintf(stderr, "conformance: built %s in %.1fs: %d tests selected\n", p, time.Since(t0).Seconds(), len(names))
		pkgs = append(pkgs, tp)
	}

	endpoint := cfg.endpoint
	if endpoint == "" {
		js, err := startJobServer(ctx, root, cfg.prism, cfg.logdir, cfg.jobTimeout, stderr)
		if err != nil {
			return 2, err
		}
		defer js.stop(stderr)
		endpoint = js.endpoint
	}
	fmt.Fprintf(stderr, "conformance: job endpoint %s, %d at a time, timeout %v per test\n", endpoint, cfg.parallel, cfg.timeout)

	var results []result
	var mu sync.Mutex
	for _, tp := range pkgs {
		work := make(chan string)
		var wg sync.WaitGroup
		for i := 0; i < cfg.parallel; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for name := range work {
					r := tp.runTest(ctx, name, endpoint, cfg.timeout)
					mu.Lock()
					results = append(results, r)
					if cfg.verbose {
						fmt.Fprintf(stderr, "--- %s %s (%.1fs)\n%s", r.Status, r.ID(), r.Elapsed.Seconds(), r.Output)
					} else {
						fmt.Fprintf(stderr, "  %-4s %6.1fs %s%s\n", r.Status, r.Elapsed.Seconds(), r.ID(), noteSuffix(r.Note))
					}
					mu.Unlock()
				}
			}()
		}
		for _, name := range tp.skipped {
			results = append(results, result{Package: tp.short, Test: name, Status: "skip", Note: "excluded by --skip"})
		}
		for _, name := range tp.tests {
			if ctx.Err() != nil {
				break
			}
			work <- name
		}
		close(work)
		wg.Wait()
	}
	if ctx.Err() != nil {
		return 2, fmt.Errorf("interrupted")
	}

	rep := evaluate(results, expected, pkgs, runRE, skipRE)
	rep.print(stdout, time.Since(start))
	if len(rep.missing) > 0 {
		return 1, nil
	}
	return 0, nil
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

// removeBinaries deletes the binaries conform builds into logdir: the test
// packages' (*.test) and the job server's.
func removeBinaries(logdir string) {
	bins, _ := filepath.Glob(filepath.Join(logdir, "*.test"))
	for _, b := range append(bins, filepath.Join(logdir, "ksrunner"), filepath.Join(logdir, "prism")) {
		os.Remove(b)
	}
}
