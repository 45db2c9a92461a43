package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
)

// `bench jobs` measures what a long-lived job server keeps per job: it
// starts a job server process (a ksrunner binary, as deployed, or `bench
// jobserver`), runs small jobs against it one after another (the lifted
// combine of bench gbk over --elements, checked like it) and prints the
// server's resident memory every --every jobs. A job server that keeps
// its memory flat (job_history) shows a level line once its history is
// full; one that keeps every job grows with the count.

func runBenchJobs(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench jobs")
	jobs := fs.Int("jobs", 150, "jobs to run, one after another")
	every := fs.Int("every", 10, "print the job server's memory every this many jobs")
	n := fs.Int64("elements", 1000, "elements of each job")
	bootstrap := fs.String("bootstrap_servers", "embedded", `the job server's Kafka brokers, or "embedded" (in its process: it keeps every job's consumer group and transactional id, which a real broker's memory holds otherwise)`)
	ksrunnerBinary := fs.String("ksrunner_binary", "", "run the job server as `KSRUNNER_BINARY jobserver` (default: `ksrunner-bench jobserver`)")
	logLevel := fs.String("log_level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jobs < 1 || *every < 1 || *n < 1 {
		return fmt.Errorf("bench jobs: --jobs, --every and --elements must be at least 1")
	}
	if _, err := benchLogger("bench jobs", *logLevel); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench jobs: %w", err)
	}
	js, err := startJobServerChild(ctx, *ksrunnerBinary, self, []string{"--log_level=" + *logLevel, "--bootstrap_servers=" + *bootstrap}, nil)
	if err != nil {
		return fmt.Errorf("bench jobs: %w", err)
	}
	defer js.kill()
	*jobopts.EnvironmentType = "LOOPBACK"
	flag.Set("environment_type", "LOOPBACK")
	*jobopts.Endpoint = js.endpoint

	const keys = 10
	fmt.Fprintf(stdout, "%6s %10s %12s %10s\n", "jobs", "rss_mib", "peak_mib", "last_job_s")
	report := func(done int, last time.Duration) error {
		rss, peak, err := procMemoryKiB(js.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("bench jobs: job server memory: %w", err)
		}
		fmt.Fprintf(stdout, "%6d %10.1f %12.1f %10.3f\n", done, float64(rss)/1024, float64(peak)/1024, last.Seconds())
		return nil
	}
	if err := report(0, 0); err != nil {
		return err
	}
	for i := 1; i <= *jobs; i++ {
		start := time.Now()
		res, err := universal.Execute(ctx, buildGBKBench(*n, keys, true, 0))
		if err != nil {
			return fmt.Errorf("bench jobs: job %d: %w", i, err)
		}
		if err := readBenchCounts(res.Metrics()).verify(*n, keys, true); err != nil {
			return fmt.Errorf("bench jobs: job %d: wrong result: %w", i, err)
		}
		if i%*every == 0 || i == *jobs {
			if err := report(i, time.Since(start)); err != nil {
				return err
			}
		}
	}
	_, _, err = js.stop()
	return err
}

// procMemoryKiB reads a process's resident and peak resident memory
// (Linux /proc, KiB).
func procMemoryKiB(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", name, value, err)
		}
		if name == "VmRSS" {
			rss = kib
		} else {
			peak = kib
		}
	}
	return rss, peak, nil
}
