package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	beamlog "github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
	"github.com/spf13/pflag"

	"github.com/ksrunner/ksrunner/cmd/internal/profile"
	"github.com/ksrunner/ksrunner/host"
)

func newFlagSet(name string) *pflag.FlagSet { return pflag.NewFlagSet(name, pflag.ContinueOnError) }

// runBench runs `ksrunner-bench gbk`: the GroupByKey pipeline of
// bench_gbk.go on ksrunner (an in-process job server on the embedded broker)
// and on Prism (in-process), both with LOOPBACK workers in this process, and
// prints wall times, elements/s and the speed ratio.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "wasm" {
		return runBenchWASM(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "kafka" {
		return runBenchKafka(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "rescale" {
		return runBenchRescale(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "scaling" {
		return runBenchScaling(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "suite" {
		return runBenchSuite(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "one" { // one measurement of bench suite
		return runBenchOne(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "jobs" {
		return runBenchJobs(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "jobserver" { // bench one's job server
		return runBenchJobServer(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "sdk-pool" { // an SDK worker pool of bench rescale
		return runSDKPool(ctx, args[1:], stdout)
	}
	if len(args) == 0 || args[0] != "gbk" {
		return fmt.Errorf("bench: want `bench gbk [flags]`, `bench suite [flags]`, `bench jobs [flags]`, `bench wasm [flags]`, `bench kafka [flags]` or `bench rescale [flags]`")
	}
	def := host.DefaultOptions()
	fs := newFlagSet("bench gbk")
	n := fs.Int64("elements", 1_000_000, "elements to generate")
	keys := fs.Int64("keys", 1000, "distinct keys")
	combine := fs.Bool("combine", false, "CombinePerKey(sum) (lifted) instead of GroupByKey + a summing ParDo")
	splits := fs.Int64("source_splits", 0, "split the source into this many ranges at the start (a splittable DoFn), which runners may process in parallel; 0: one DoFn call on the impulse, one bundle")
	runs := fs.Int("runs", 1, "how many times to run each runner (alternating)")
	runners := fs.String("runners", "ksrunner,prism", "comma-separated runners to measure: ksrunner, prism")
	parallelism := fs.Int("internal_parallelism", def.InternalParallelism, "ksrunner: partitions of repartition topics")
	bundle := fs.Int("max_bundle_size", def.MaxBundleSize, "ksrunner: input elements per bundle at most")
	bundleTime := fs.Int("max_bundle_time_ms", def.MaxBundleTimeMs, "ksrunner: "+host.MaxBundleTimeMsHelp)
	commitMs := fs.Int("commit_interval_ms", def.CommitIntervalMs, "ksrunner: commit interval")
	packList := fs.String("record_pack_bytes", strconv.Itoa(def.RecordPackBytes), "ksrunner: "+host.RecordPackBytesHelp+"; several, comma-separated, measure ksrunner with each in the same run (as runners ksrunner/pack=N)")
	guarantee := fs.String("processing_guarantee", def.ProcessingGuarantee, "ksrunner: exactly_once or at_least_once")
	bootstrap := fs.String("bootstrap_servers", def.BootstrapServers, `ksrunner: Kafka brokers, or "embedded"`)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the ksrunner runs to this file (run i>1 to FILE.i)")
	logLevel := fs.String("log_level", "warn", "ksrunner and SDK log level: debug, info, warn or error")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	which := strings.Split(*runners, ",")
	for _, r := range which {
		if r != "ksrunner" && r != "prism" {
			return fmt.Errorf("bench: unknown runner %q (want ksrunner or prism)", r)
		}
	}
	if *n < 1 || *keys < 1 || *runs < 1 || *splits < 0 {
		return fmt.Errorf("bench: --elements, --keys and --runs must be at least 1, --source_splits at least 0")
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("bench: --log_level: %w", err)
	}
	beam.Init() // sets slog's default logger, which Prism logs through
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)
	beamlog.SetLogger(sdkLogger{min: sdkSeverity(level)})
	opts := def
	opts.BootstrapServers = *bootstrap
	opts.InternalParallelism = *parallelism
	opts.MaxBundleSize = *bundle
	opts.MaxBundleTimeMs = *bundleTime
	opts.CommitIntervalMs = *commitMs
	packs, err := parsePackList(*packList)
	if err != nil {
		return err
	}
	opts.RecordPackBytes = packs[0]
	opts.ProcessingGuarantee = *guarantee
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	srv, err := host.NewJobServer("localhost:0", opts, logger)
	if err != nil {
		return err
	}
	go srv.Serve()
	defer srv.Stop()
	*jobopts.EnvironmentType = "LOOPBACK"
	flag.Set("environment_type", "LOOPBACK")
	which, packOf := packVariants(which, packs)

	variant := "GroupByKey + sum ParDo"
	if *combine {
		variant = "CombinePerKey(sum), lifted"
	}
	if *splits > 0 {
		variant += fmt.Sprintf(", source split into %d ranges", *splits)
	} else {
		variant += ", unsplit source"
	}
	fmt.Fprintf(stdout, "bench gbk: %d elements, %d keys, %s; ksrunner internal_parallelism=%d max_bundle_size=%d max_bundle_time_ms=%d record_pack_bytes=%s commit_interval_ms=%d processing_guarantee=%s; GOMAXPROCS=%d\n",
		*n, *keys, variant, opts.InternalParallelism, opts.MaxBundleSize, opts.MaxBundleTimeMs, *packList, opts.CommitIntervalMs, opts.ProcessingGuarantee, runtime.GOMAXPROCS(0))

	prismEndpoint := ""
	times, cpus := map[string][]time.Duration{}, map[string][]time.Duration{}
	for run := 1; run <= *runs; run++ {
		for _, r := range which {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			runtime.GC()
			p := buildGBKBench(*n, *keys, *combine, *splits)
			var exec func(context.Context, *beam.Pipeline) (beam.PipelineResult, error)
			stopProfile := func() error { return nil }
			switch runnerOf(r) {
			case "ksrunner":
				// A pipeline option: the job server's default is packs[0].
				beam.PipelineOptions.Set("record_pack_bytes", strconv.Itoa(packOf[r]))
				*jobopts.Endpoint = srv.Endpoint()
				exec = universal.Execute
				if *cpuProfile != "" {
					path := *cpuProfile
					if run > 1 {
						path = fmt.Sprintf("%s.%d", path, run)
					}
					if stopProfile, err = startCPUProfile(path); err != nil {
						return err
					}
				}
			case "prism":
				// Prism starts its in-process job server on the first
				// Execute with no endpoint; later runs reuse it.
				*jobopts.Endpoint = prismEndpoint
				exec = prism.Execute
			}
			cpu0 := processCPU()
			start := time.Now()
			res, err := exec(ctx, p)
			elapsed := time.Since(start)
			cpu := processCPU() - cpu0
			if perr := stopProfile(); perr != nil && err == nil {
				err = perr
			}
			if r == "prism" {
				prismEndpoint = *jobopts.Endpoint
			}
			if err != nil {
				return fmt.Errorf("bench: %s run %d: %w", r, run, err)
			}
			counts := readBenchCounts(res.Metrics())
			if err := counts.verify(*n, *keys, *combine); err != nil {
				return fmt.Errorf("bench: %s run %d: wrong result: %w", r, run, err)
			}
			times[r] = append(times[r], elapsed)
			cpus[r] = append(cpus[r], cpu)
			fmt.Fprintf(stdout, "run %d %-8s %8.3fs %10.0f elements/s  cpu %6.2fs  (checked %d keys", run, r, elapsed.Seconds(), rate(*n, elapsed), cpu.Seconds(), counts.checked)
			if !*combine {
				fmt.Fprintf(stdout, ", %d values", counts.values)
			}
			fmt.Fprintln(stdout, ")")
		}
	}
	for _, r := range which {
		ts := times[r]
		fmt.Fprintf(stdout, "%-8s median %8.3fs %10.0f elements/s  cpu %6.2fs  (range %.0f-%.0f elements/s over %d runs)\n",
			r, median(ts).Seconds(), rate(*n, median(ts)), median(cpus[r]).Seconds(), rate(*n, slices.Max(ts)), rate(*n, slices.Min(ts)), len(ts))
	}
	for _, r := range which {
		if k, p := times[r], times["prism"]; runnerOf(r) == "ksrunner" && len(k) > 0 && len(p) > 0 {
			fmt.Fprintf(stdout, "%s/prism speed: %.2f (medians), %.2f (best of %d each)\n", r, median(p).Seconds()/median(k).Seconds(), slices.Min(p).Seconds()/slices.Min(k).Seconds(), len(k))
		}
	}
	return nil
}

// parsePackList parses bench gbk's --record_pack_bytes: one value or
// several, comma-separated.
func parsePackList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("bench: --record_pack_bytes: %q is not an integer", f)
		}
		o := host.DefaultOptions()
		o.RecordPackBytes = v
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("bench: --record_pack_bytes: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// packVariants expands the runner ksrunner into one runner per pack size,
// "ksrunner/pack=N", when there are several; packOf maps each ksrunner
// runner to its record_pack_bytes.
func packVariants(runners []string, packs []int) (out []string, packOf map[string]int) {
	packOf = map[string]int{}
	for _, r := range runners {
		if r != "ksrunner" {
			out = append(out, r)
			continue
		}
		if len(packs) == 1 {
			out = append(out, r)
			packOf[r] = packs[0]
			continue
		}
		for _, p := range packs {
			name := fmt.Sprintf("ksrunner/pack=%d", p)
			out = append(out, name)
			packOf[name] = p
		}
	}
	return out, packOf
}

// runnerOf is the runner of a bench gbk runner name (ksrunner/pack=N is
// ksrunner).
func runnerOf(name string) string {
	r, _, _ := strings.Cut(name, "/")
	return r
}

// processCPU is the user + system CPU time the process has used: with other
// work on the machine it is a steadier measure of cost than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rate(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() }

func median(ts []time.Duration) time.Duration {
	s := slices.Clone(ts)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func startCPUProfile(path string) (func() error, error) {
	stop, err := profile.Start(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return stop, nil
}

// benchLogger sets up the logging of a bench command (cmd names it in
// errors) run at level: Beam's (beam.Init first, since it sets slog's
// default, which the SDK logs through) and the default slog logger, which
// it returns for the bench's job servers.
func benchLogger(cmd, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%s: --log_level: %w", cmd, err)
	}
	beam.Init()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	slog.SetDefault(logger)
	return logger, nil
}

// sdkLogger drops the Beam SDK's log lines below a severity (the SDK logs
// every job state change and worker start at info).
type sdkLogger struct{ min beamlog.Severity }

func (l sdkLogger) Log(ctx context.Context, sev beamlog.Severity, calldepth int, msg string) {
	if sev >= l.min {
		fmt.Fprintf(os.Stderr, "beam %s: %s\n", sevName(sev), msg)
	}
}

func sevName(s beamlog.Severity) string {
	switch s {
	case beamlog.SevDebug:
		return "debug"
	case beamlog.SevInfo:
		return "info"
	case beamlog.SevWarn:
		return "warn"
	case beamlog.SevError:
		return "error"
	}
	return "fatal"
}

func sdkSeverity(l slog.Level) beamlog.Severity {
	switch {
	case l <= slog.LevelDebug:
		return beamlog.SevDebug
	case l <= slog.LevelInfo:
		return beamlog.SevInfo
	case l <= slog.LevelWarn:
		return beamlog.SevWarn
	}
	return beamlog.SevError
}
