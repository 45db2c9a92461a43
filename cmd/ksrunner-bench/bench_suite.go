package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/harnessopts"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"

	"github.com/ksrunner/ksrunner/host"
)

// `bench suite` runs a set of pipelines on ksrunner and on Prism in one
// run, each measurement in a process of its own (`bench one`), so that the
// CPU seconds and peak RSS it reports are that runner's alone (with its
// LOOPBACK SDK worker, which runs in the same process), and prints one
// Markdown table and, with --json, the measurements as JSON.

// suiteCase is one pipeline of the suite.
type suiteCase struct {
	Name     string
	Elements int64
	What     string
	build    func() *beam.Pipeline
	// check reports a run on runner whose counters are wrong.
	check func(r beam.PipelineResult, runner string) error
	// pyWords > 0: a Python wordcount of that many words (no build, no
	// check: the script checks its counts).
	pyWords int64
}

const suiteKeys = 1000

// suiteSizes are the sizes every case runs at: time per element should
// stay flat from one to the other.
// suiteSourceSplits is how many ranges combine-split's source splits into:
// as a topic of 16 partitions would be read.
const suiteSourceSplits = 16

var suiteSizes = []struct {
	suffix string
	n      int64
}{{"1m", 1_000_000}, {"10m", 10_000_000}}

func suiteCases() []suiteCase {
	const sideEntries = 100_000
	var out []suiteCase
	for _, size := range suiteSizes {
		n := size.n
		gbk := func(name string, keys int64, combine bool, splits int64, what string) suiteCase {
			return suiteCase{Name: name + "-" + size.suffix, Elements: n, What: what,
				build: func() *beam.Pipeline { return buildGBKBench(n, keys, combine, splits) },
				check: func(r beam.PipelineResult, _ string) error {
					return readBenchCounts(r.Metrics()).verify(n, keys, combine)
				}}
		}
		out = append(out,
			gbk("gbk", suiteKeys, false, 0, "GroupByKey + sum, 1,000 keys"),
			gbk("onekey", 1, false, 0, "GroupByKey + sum, all values on one key"),
			gbk("combine", suiteKeys, true, 0, "CombinePerKey(sum), lifted, 1,000 keys"),
			gbk("combine-split", suiteKeys, true, suiteSourceSplits, "the same with the source split into 16 ranges (a splittable DoFn), which a runner may process in parallel"),
			suiteCase{Name: "hotkey-" + size.suffix, Elements: n, What: "GroupByKey + sum, one key of 1,000 holds half the values",
				build: func() *beam.Pipeline { return buildHotKeyBench(n, suiteKeys) },
				check: func(r beam.PipelineResult, _ string) error {
					return checkCounts(suiteCounts(r.Metrics(), suiteNamespace), map[string]int64{"checked": suiteKeys})
				}},
			suiteCase{Name: "windowed-" + size.suffix, Elements: n, What: "GroupByKey + sum in 1 s fixed windows over 10 min of event time, 1,000 keys",
				build: func() *beam.Pipeline { return buildWindowedBench(n, suiteKeys) },
				check: func(r beam.PipelineResult, _ string) error {
					want := windowGroups(n, suiteKeys, windowedSpan.Milliseconds())
					return checkCounts(suiteCounts(r.Metrics(), suiteNamespace), map[string]int64{"checked": want})
				}},
			suiteCase{Name: "sidejoin-" + size.suffix, Elements: n, What: "each element looks up a 100,000-entry map side input",
				build: func() *beam.Pipeline { return buildSideJoinBench(n, sideEntries) },
				check: func(r beam.PipelineResult, runner string) error {
					return checkSideJoin(r, runner, n, sideEntries)
				}},
			suiteCase{Name: "wordcount-py-" + size.suffix, Elements: n, What: "Python wordcount (ReadFromText, Count.PerElement, WriteToText) of that many words", pyWords: n},
		)
	}
	return out
}

// suiteResult is one measurement. CPUS is every process's of the
// measurement (runner and SDK worker); RunnerRSSMiB and RunnerCPUS are
// the runner process's: ksrunner's job server, or Prism's process (shared
// with the Go SDK worker; for Python, the Python process tree that runs
// prism).
type suiteResult struct {
	Case         string  `json:"case"`
	Runner       string  `json:"runner"`
	Run          int     `json:"run"`
	Elements     int64   `json:"elements"`
	WallS        float64 `json:"wall_s"`
	PerSecond    float64 `json:"elements_per_s"`
	CPUS         float64 `json:"cpu_s"`
	RunnerCPUS   float64 `json:"runner_cpu_s"`
	RunnerRSSMiB float64 `json:"runner_peak_rss_mib"`
	WorkerRSSMiB float64 `json:"worker_peak_rss_mib"`
}

// runBenchSuite is `ksrunner bench suite`.
func runBenchSuite(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench suite")
	def := host.DefaultOptions()
	var names []string
	for _, c := range suiteCases() {
		names = append(names, c.Name)
	}
	casesFlag := fs.String("cases", strings.Join(names, ","), "comma-separated cases, each CASE or CASE@RUNNER (that runner only: Prism holds all the data in memory, 1.3-1.9 GiB at 1M elements): "+strings.Join(names, ", "))
	runners := fs.String("runners", "ksrunner,prism", "comma-separated runners: ksrunner, prism")
	runs := fs.Int("runs", 1, "runs of each case on each runner; the table shows the best")
	jsonOut := fs.String("json", "", "also write every measurement to this file as JSON")
	mdOut := fs.String("markdown", "", "also write the table to this file")
	pack := fs.Int("record_pack_bytes", def.RecordPackBytes, "ksrunner: "+host.RecordPackBytesHelp)
	guarantee := fs.String("processing_guarantee", def.ProcessingGuarantee, "ksrunner: exactly_once or at_least_once")
	bootstrap := fs.String("bootstrap_servers", def.BootstrapServers, `ksrunner: Kafka brokers, or "embedded"`)
	goSideCache := fs.Int64("go_side_input_cache", 0, "Go cases: the Go SDK's side input cache, in entries (harnessopts.SideInputCacheCapacity); 0: off, the SDK's default. It serves only bundles that carry cache tokens, which ksrunner sends and Prism does not")
	python := fs.String("python", defaultPython(), "Python cases: a python with apache_beam 2.77.0 (default: $KSRUNNER_PYTHON, else host/pythontest's venv)")
	prismBinary := fs.String("prism_binary", "", "Python cases on Prism: a prism binary (default: built from the Beam Go module into a temporary directory)")
	ksrunnerBinary := fs.String("ksrunner_binary", "", "the ksrunner binary whose `jobserver` is measured (default: built from ./cmd/ksrunner into a temporary directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	byName := map[string]suiteCase{}
	for _, c := range suiteCases() {
		byName[c.Name] = c
	}
	var cases []suiteCase
	py := false
	only := map[string]string{} // case -> its one runner
	for _, n := range strings.Split(*casesFlag, ",") {
		n, r, one := strings.Cut(strings.TrimSpace(n), "@")
		c, ok := byName[n]
		if !ok {
			return fmt.Errorf("bench suite: --cases: unknown case %q (want some of %s)", n, strings.Join(names, ", "))
		}
		if one {
			if r != "ksrunner" && r != "prism" {
				return fmt.Errorf("bench suite: --cases: %s@%s: unknown runner %q (want ksrunner or prism)", n, r, r)
			}
			only[n] = r
		}
		cases = append(cases, c)
		py = py || c.pyWords > 0
	}
	which := strings.Split(*runners, ",")
	for _, r := range which {
		if r != "ksrunner" && r != "prism" {
			return fmt.Errorf("bench suite: --runners: unknown runner %q (want ksrunner or prism)", r)
		}
	}
	if *runs < 1 {
		return fmt.Errorf("bench suite: --runs must be at least 1")
	}
	if py && *python == "" {
		return fmt.Errorf("bench suite: the Python cases need --python (a python with apache_beam 2.77.0; host/pythontest's tests make one)")
	}
	if py && *prismBinary == "" && slices.Contains(which, "prism") {
		dir, err := os.MkdirTemp("", "ksrunner-bench-prism-")
		if err != nil {
			return fmt.Errorf("bench suite: %w", err)
		}
		defer os.RemoveAll(dir)
		if *prismBinary, err = buildPrism(ctx, dir); err != nil {
			return fmt.Errorf("bench suite: %w", err)
		}
	}
	if *ksrunnerBinary == "" && slices.Contains(which, "ksrunner") {
		dir, err := os.MkdirTemp("", "ksrunner-bench-ksrunner-")
		if err != nil {
			return fmt.Errorf("bench suite: %w", err)
		}
		defer os.RemoveAll(dir)
		*ksrunnerBinary = filepath.Join(dir, "ksrunner")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", *ksrunnerBinary, "./cmd/ksrunner").CombinedOutput(); err != nil {
			return fmt.Errorf("bench suite: building ksrunner (go build ./cmd/ksrunner, from the repository): %w\n%s", err, out)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench suite: %w", err)
	}
	fmt.Fprintf(stdout, "bench suite: ksrunner record_pack_bytes=%d processing_guarantee=%s bootstrap_servers=%s; go_side_input_cache=%d; each measurement a process of its own, ksrunner's job server a process of its own\n",
		*pack, *guarantee, *bootstrap, *goSideCache)
	var all []suiteResult
	for _, c := range cases {
		for run := 1; run <= *runs; run++ {
			for _, r := range which {
				if o, ok := only[c.Name]; ok && o != r {
					continue
				}
				res, err := runSuiteChild(ctx, self, c, r, []string{
					"--record_pack_bytes=" + strconv.Itoa(*pack), "--processing_guarantee=" + *guarantee, "--bootstrap_servers=" + *bootstrap,
					"--python=" + *python, "--prism_binary=" + *prismBinary, "--ksrunner_binary=" + *ksrunnerBinary,
					"--go_side_input_cache=" + strconv.FormatInt(*goSideCache, 10),
				})
				if err != nil {
					return fmt.Errorf("bench suite: case %s on %s, run %d: %w", c.Name, r, run, err)
				}
				res.Run = run
				fmt.Fprintf(os.Stderr, "bench suite: %s %s run %d: %.3fs, %.0f elements/s, cpu %.2fs (runner %.2fs), peak RSS runner %.0f MiB, worker %.0f MiB\n",
					c.Name, r, run, res.WallS, res.PerSecond, res.CPUS, res.RunnerCPUS, res.RunnerRSSMiB, res.WorkerRSSMiB)
				all = append(all, res)
			}
		}
	}
	var table strings.Builder
	writeSuiteTable(&table, cases, which, all)
	fmt.Fprint(stdout, table.String())
	if *mdOut != "" {
		if err := os.WriteFile(*mdOut, []byte(table.String()), 0o644); err != nil {
			return fmt.Errorf("bench suite: --markdown: %w", err)
		}
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("bench suite: --json: %w", err)
		}
	}
	return nil
}

// runSuiteChild runs one case on one runner in a child process (`bench
// one`) and measures it: wall time and the runner's figures as the child
// reports them, CPU of the whole measurement (the child and its children)
// from the kernel.
func runSuiteChild(ctx context.Context, self string, c suiteCase, runner string, opts []string) (suiteResult, error) {
	cmd := exec.CommandContext(ctx, self, append([]string{"bench", "one", "--case=" + c.Name, "--runner=" + runner}, opts...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return suiteResult{}, err
	}
	vals := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if vals[k], err = strconv.ParseFloat(v, 64); err != nil {
			return suiteResult{}, fmt.Errorf("child output %q: %w", sc.Text(), err)
		}
	}
	for _, k := range []string{"wall_s", "runner_rss_kib", "runner_cpu_s", "worker_rss_kib"} {
		if _, ok := vals[k]; !ok {
			return suiteResult{}, fmt.Errorf("child printed no %s: %q", k, out)
		}
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return suiteResult{}, fmt.Errorf("no resource usage of the child")
	}
	wall := vals["wall_s"]
	return suiteResult{
		Case: c.Name, Runner: runner, Elements: c.Elements, WallS: wall, PerSecond: float64(c.Elements) / wall,
		CPUS:         time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(),
		RunnerCPUS:   vals["runner_cpu_s"],
		RunnerRSSMiB: vals["runner_rss_kib"] / 1024, // Linux: KiB
		WorkerRSSMiB: vals["worker_rss_kib"] / 1024,
	}, nil
}

// writeSuiteTable prints the best run (least wall time) of each case and
// runner, and ksrunner's speed over Prism's.
func writeSuiteTable(w io.Writer, cases []suiteCase, runners []string, all []suiteResult) {
	fmt.Fprintln(w, "| case | what | elements | runner | wall s | elements/s | CPU s (all) | CPU s (runner) | peak RSS MiB (runner) | peak RSS MiB (SDK) | ksrunner/prism |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cases {
		best := map[string]suiteResult{}
		for _, r := range all {
			if b, ok := best[r.Runner]; r.Case == c.Name && (!ok || r.WallS < b.WallS) {
				best[r.Runner] = r
			}
		}
		for _, rn := range runners {
			b, ok := best[rn]
			if !ok {
				continue
			}
			ratio := ""
			if k, p := best["ksrunner"], best["prism"]; rn == "ksrunner" && k.WallS > 0 && p.WallS > 0 {
				ratio = fmt.Sprintf("%.2f", p.WallS/k.WallS)
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s | %.3f | %.0f | %.2f | %.2f | %.0f | %.0f | %s |\n",
				c.Name, c.What, c.Elements, rn, b.WallS, b.PerSecond, b.CPUS, b.RunnerCPUS, b.RunnerRSSMiB, b.WorkerRSSMiB, ratio)
		}
	}
}

// runBenchOne is `ksrunner bench one`: one case on one runner. On
// ksrunner the job server is a child process (`bench jobserver`); the SDK
// worker is this process (Go, LOOPBACK) or a Python child. It prints
// "key value" lines that bench suite reads: wall_s (the pipeline's run),
// runner_rss_kib and runner_cpu_s (the job server's; Prism's: this
// process's, which Prism shares with the Go SDK worker) and worker_rss_kib.
func runBenchOne(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench one")
	def := host.DefaultOptions()
	name := fs.String("case", "", "the case (see bench suite --cases)")
	runner := fs.String("runner", "ksrunner", "ksrunner or prism")
	pack := fs.Int("record_pack_bytes", def.RecordPackBytes, "ksrunner: "+host.RecordPackBytesHelp)
	guarantee := fs.String("processing_guarantee", def.ProcessingGuarantee, "ksrunner: exactly_once or at_least_once")
	bootstrap := fs.String("bootstrap_servers", def.BootstrapServers, `ksrunner: Kafka brokers, or "embedded"`)
	goSideCache := fs.Int64("go_side_input_cache", 0, "Go cases: the Go SDK's side input cache, in entries (harnessopts.SideInputCacheCapacity); 0: off, the SDK's default. It serves only bundles that carry cache tokens, which ksrunner sends and Prism does not")
	logLevel := fs.String("log_level", "warn", "log level")
	heapProfile := fs.String("heapprofile", "", "ksrunner: the job server writes a heap profile near its peak heap to this file")
	python := fs.String("python", "", "Python cases: a python with apache_beam")
	prismBinary := fs.String("prism_binary", "", "Python cases on Prism: a prism binary")
	ksrunnerBinary := fs.String("ksrunner_binary", "", "ksrunner: run the job server as `KSRUNNER_BINARY jobserver` (default: `ksrunner-bench jobserver`, which has --heapprofile)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var c *suiteCase
	for _, sc := range suiteCases() {
		if sc.Name == *name {
			c = &sc
		}
	}
	if c == nil {
		return fmt.Errorf("bench one: --case: unknown case %q", *name)
	}
	if _, err := benchLogger("bench one", *logLevel); err != nil {
		return err
	}
	if *goSideCache > 0 {
		if err := harnessopts.SideInputCacheCapacity(*goSideCache); err != nil {
			return fmt.Errorf("bench one: --go_side_input_cache: %w", err)
		}
	}
	*jobopts.EnvironmentType = "LOOPBACK"
	flag.Set("environment_type", "LOOPBACK")
	var js *jobServerChild
	switch *runner {
	case "prism":
	case "ksrunner":
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench one: %w", err)
		}
		if js, err = startJobServerChild(ctx, *ksrunnerBinary, self, []string{
			"--record_pack_bytes=" + strconv.Itoa(*pack), "--processing_guarantee=" + *guarantee,
			"--bootstrap_servers=" + *bootstrap, "--log_level=" + *logLevel,
		}, []string{"--heapprofile=" + *heapProfile}); err != nil {
			return fmt.Errorf("bench one: %w", err)
		}
		defer js.kill()
	default:
		return fmt.Errorf("bench one: --runner: unknown runner %q (want ksrunner or prism)", *runner)
	}
	var wall time.Duration
	var workerRSS int64
	if c.pyWords > 0 {
		var err error
		if wall, workerRSS, err = runPythonCase(ctx, c, *runner, js, *python, *prismBinary); err != nil {
			return fmt.Errorf("bench one: %s on %s: %w", c.Name, *runner, err)
		}
	} else {
		execute := prism.Execute
		if js != nil {
			*jobopts.Endpoint = js.endpoint
			execute = universal.Execute
		}
		p := c.build()
		start := time.Now()
		res, err := execute(ctx, p)
		wall = time.Since(start)
		if err != nil {
			return fmt.Errorf("bench one: %s on %s: %w", c.Name, *runner, err)
		}
		if err := c.check(res, *runner); err != nil {
			return fmt.Errorf("bench one: %s on %s: wrong result: %w", c.Name, *runner, err)
		}
		workerRSS = selfPeakRSSKiB()
	}
	runnerRSS, runnerCPU := selfPeakRSSKiB(), processCPU()
	if c.pyWords > 0 {
		// Prism runs in the Python process's tree: its figures are the
		// tree's.
		runnerRSS, runnerCPU = workerRSS, childrenCPU()
	}
	if js != nil {
		var err error
		if runnerRSS, runnerCPU, err = js.stop(); err != nil {
			return fmt.Errorf("bench one: %w", err)
		}
	}
	fmt.Fprintf(stdout, "wall_s %.6f\nrunner_rss_kib %d\nrunner_cpu_s %.3f\nworker_rss_kib %d\n", wall.Seconds(), runnerRSS, runnerCPU.Seconds(), workerRSS)
	return nil
}
