package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
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
}

const suiteKeys = 1000

func suiteCases() []suiteCase {
	gbk := func(name string, n int64, combine bool, what string) suiteCase {
		return suiteCase{Name: name, Elements: n, What: what,
			build: func() *beam.Pipeline { return buildGBKBench(n, suiteKeys, combine) },
			check: func(r beam.PipelineResult, _ string) error {
				return readBenchCounts(r.Metrics()).verify(n, suiteKeys, combine)
			}}
	}
	const sideEntries = 100_000
	const windowedN = 1_000_000
	return []suiteCase{
		gbk("gbk-1m", 1_000_000, false, "GroupByKey + sum, 1,000 keys"),
		gbk("gbk-10m", 10_000_000, false, "GroupByKey + sum, 1,000 keys"),
		gbk("combine-1m", 1_000_000, true, "CombinePerKey(sum), lifted, 1,000 keys"),
		{Name: "hotkey-1m", Elements: 1_000_000, What: "GroupByKey + sum, one key holds half the values",
			build: func() *beam.Pipeline { return buildHotKeyBench(1_000_000, suiteKeys) },
			check: func(r beam.PipelineResult, _ string) error {
				return checkCounts(suiteCounts(r.Metrics(), suiteNamespace), map[string]int64{"checked": suiteKeys})
			}},
		{Name: "windowed-1m", Elements: windowedN, What: "GroupByKey + sum in 1 s fixed windows over 10 min of event time, 1,000 keys",
			build: func() *beam.Pipeline { return buildWindowedBench(windowedN, suiteKeys) },
			check: func(r beam.PipelineResult, _ string) error {
				want := windowGroups(windowedN, suiteKeys, windowedSpan.Milliseconds())
				return checkCounts(suiteCounts(r.Metrics(), suiteNamespace), map[string]int64{"checked": want})
			}},
		{Name: "sidejoin-1m", Elements: 1_000_000, What: "1M elements each look up a 100,000-entry map side input",
			build: func() *beam.Pipeline { return buildSideJoinBench(1_000_000, sideEntries) },
			check: func(r beam.PipelineResult, runner string) error {
				return checkSideJoin(r, runner, 1_000_000, sideEntries)
			}},
	}
}

// suiteResult is one measurement.
type suiteResult struct {
	Case      string  `json:"case"`
	Runner    string  `json:"runner"`
	Run       int     `json:"run"`
	Elements  int64   `json:"elements"`
	WallS     float64 `json:"wall_s"`
	PerSecond float64 `json:"elements_per_s"`
	CPUS      float64 `json:"cpu_s"`
	PeakRSSMB float64 `json:"peak_rss_mib"`
}

// runBenchSuite is `ksrunner bench suite`.
func runBenchSuite(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench suite")
	def := host.DefaultOptions()
	var names []string
	for _, c := range suiteCases() {
		names = append(names, c.Name)
	}
	casesFlag := fs.String("cases", strings.Join(names, ","), "comma-separated cases: "+strings.Join(names, ", "))
	runners := fs.String("runners", "ksrunner,prism", "comma-separated runners: ksrunner, prism")
	runs := fs.Int("runs", 1, "runs of each case on each runner; the table shows the best")
	jsonOut := fs.String("json", "", "also write every measurement to this file as JSON")
	pack := fs.Int("record_pack_bytes", def.RecordPackBytes, "ksrunner: "+host.RecordPackBytesHelp)
	guarantee := fs.String("processing_guarantee", def.ProcessingGuarantee, "ksrunner: exactly_once or at_least_once")
	bootstrap := fs.String("bootstrap_servers", def.BootstrapServers, `ksrunner: Kafka brokers, or "embedded"`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	byName := map[string]suiteCase{}
	for _, c := range suiteCases() {
		byName[c.Name] = c
	}
	var cases []suiteCase
	for _, n := range strings.Split(*casesFlag, ",") {
		c, ok := byName[strings.TrimSpace(n)]
		if !ok {
			return fmt.Errorf("bench suite: --cases: unknown case %q (want some of %s)", n, strings.Join(names, ", "))
		}
		cases = append(cases, c)
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
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench suite: %w", err)
	}
	fmt.Fprintf(stdout, "bench suite: ksrunner record_pack_bytes=%d processing_guarantee=%s bootstrap_servers=%s; each measurement a process of its own\n",
		*pack, *guarantee, *bootstrap)
	var all []suiteResult
	for _, c := range cases {
		for run := 1; run <= *runs; run++ {
			for _, r := range which {
				res, err := runSuiteChild(ctx, self, c, r, []string{
					"--record_pack_bytes=" + strconv.Itoa(*pack), "--processing_guarantee=" + *guarantee, "--bootstrap_servers=" + *bootstrap,
				})
				if err != nil {
					return fmt.Errorf("bench suite: case %s on %s, run %d: %w", c.Name, r, run, err)
				}
				res.Run = run
				fmt.Fprintf(os.Stderr, "bench suite: %s %s run %d: %.3fs, %.0f elements/s, cpu %.2fs, peak RSS %.0f MiB\n", c.Name, r, run, res.WallS, res.PerSecond, res.CPUS, res.PeakRSSMB)
				all = append(all, res)
			}
		}
	}
	writeSuiteTable(stdout, cases, which, all)
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
// one`) and measures it: wall time as the child reports it (the
// pipeline's Execute, not the process's start), CPU and peak RSS of the
// whole child from the kernel.
func runSuiteChild(ctx context.Context, self string, c suiteCase, runner string, opts []string) (suiteResult, error) {
	cmd := exec.CommandContext(ctx, self, append([]string{"bench", "one", "--case=" + c.Name, "--runner=" + runner}, opts...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return suiteResult{}, err
	}
	var wall float64
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	found := false
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "wall_s "); ok {
			if wall, err = strconv.ParseFloat(v, 64); err != nil {
				return suiteResult{}, fmt.Errorf("child output %q: %w", sc.Text(), err)
			}
			found = true
		}
	}
	if !found {
		return suiteResult{}, fmt.Errorf("child printed no wall time: %q", out)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return suiteResult{}, fmt.Errorf("no resource usage of the child")
	}
	return suiteResult{
		Case: c.Name, Runner: runner, Elements: c.Elements, WallS: wall, PerSecond: float64(c.Elements) / wall,
		CPUS:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(),
		PeakRSSMB: float64(ru.Maxrss) / 1024, // Linux: KiB
	}, nil
}

// writeSuiteTable prints the best run (least wall time) of each case and
// runner, and ksrunner's speed over Prism's.
func writeSuiteTable(w io.Writer, cases []suiteCase, runners []string, all []suiteResult) {
	fmt.Fprintln(w, "| case | what | elements | runner | wall s | elements/s | CPU s | peak RSS MiB | ksrunner/prism |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---:|---:|---:|")
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
			fmt.Fprintf(w, "| %s | %s | %d | %s | %.3f | %.0f | %.2f | %.0f | %s |\n", c.Name, c.What, c.Elements, rn, b.WallS, b.PerSecond, b.CPUS, b.PeakRSSMB, ratio)
		}
	}
}

// runBenchOne is `ksrunner bench one`: one case on one runner, in this
// process; it prints "wall_s SECONDS" (bench suite reads it).
func runBenchOne(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench one")
	def := host.DefaultOptions()
	name := fs.String("case", "", "the case (see bench suite --cases)")
	runner := fs.String("runner", "ksrunner", "ksrunner or prism")
	pack := fs.Int("record_pack_bytes", def.RecordPackBytes, "ksrunner: "+host.RecordPackBytesHelp)
	guarantee := fs.String("processing_guarantee", def.ProcessingGuarantee, "ksrunner: exactly_once or at_least_once")
	bootstrap := fs.String("bootstrap_servers", def.BootstrapServers, `ksrunner: Kafka brokers, or "embedded"`)
	logLevel := fs.String("log_level", "warn", "log level")
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
	logger, err := benchLogger("bench one", *logLevel)
	if err != nil {
		return err
	}
	*jobopts.EnvironmentType = "LOOPBACK"
	flag.Set("environment_type", "LOOPBACK")
	execute := prism.Execute
	switch *runner {
	case "prism":
	case "ksrunner":
		opts := def
		opts.RecordPackBytes = *pack
		opts.ProcessingGuarantee = *guarantee
		opts.BootstrapServers = *bootstrap
		if err := opts.Validate(); err != nil {
			return fmt.Errorf("bench one: %w", err)
		}
		srv, err := host.NewJobServer("localhost:0", opts, logger)
		if err != nil {
			return err
		}
		go srv.Serve()
		defer srv.Stop()
		*jobopts.Endpoint = srv.Endpoint()
		execute = universal.Execute
	default:
		return fmt.Errorf("bench one: --runner: unknown runner %q (want ksrunner or prism)", *runner)
	}
	p := c.build()
	start := time.Now()
	res, err := execute(ctx, p)
	wall := time.Since(start)
	if err != nil {
		return fmt.Errorf("bench one: %s on %s: %w", c.Name, *runner, err)
	}
	if err := c.check(res, *runner); err != nil {
		return fmt.Errorf("bench one: %s on %s: wrong result: %w", c.Name, *runner, err)
	}
	fmt.Fprintf(stdout, "wall_s %.6f\n", wall.Seconds())
	return nil
}
