package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/ksrunner/ksrunner/host"
)

// The suite measures ksrunner's job server apart from the SDK workers:
// `bench one` starts it as a child process (`bench jobserver`), and its
// peak RSS and CPU come from the kernel when it exits (wait4's rusage), so
// the table's "ksrunner process" figures are the job server's alone, as a
// deployment runs it (the broker is a process of its own too).

// runBenchJobServer is `ksrunner-bench jobserver`: a job server that
// prints "endpoint ADDR" on stdout and serves until SIGTERM. It is the
// bench binary (Prism and the SDK linked in: more of it resident), so the
// suite runs a ksrunner binary instead; this one can write heap profiles.
func runBenchJobServer(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench jobserver")
	def := host.DefaultOptions()
	pack := fs.Int("record_pack_bytes", def.RecordPackBytes, host.RecordPackBytesHelp)
	guarantee := fs.String("processing_guarantee", def.ProcessingGuarantee, "exactly_once or at_least_once")
	bootstrap := fs.String("bootstrap_servers", def.BootstrapServers, `Kafka brokers, or "embedded"`)
	logLevel := fs.String("log_level", "warn", "log level")
	heapProfile := fs.String("heapprofile", "", "write a heap profile to this file each time the heap in use reaches a new peak (checked every second)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := benchLogger("bench jobserver", *logLevel)
	if err != nil {
		return err
	}
	opts := def
	opts.RecordPackBytes = *pack
	opts.ProcessingGuarantee = *guarantee
	opts.BootstrapServers = *bootstrap
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("bench jobserver: %w", err)
	}
	srv, err := host.NewJobServer("localhost:0", opts, logger)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	profiled := make(chan error, 1)
	go func() { profiled <- profileHeapPeaks(ctx, *heapProfile) }()
	fmt.Fprintf(stdout, "endpoint %s\n", srv.Endpoint())
	select {
	case <-ctx.Done(): // SIGTERM
	case err := <-served:
		return fmt.Errorf("bench jobserver: serve: %w", err)
	}
	srv.Stop()
	cancel()
	if err := <-profiled; err != nil {
		return err
	}
	return <-served
}

// profileHeapPeaks writes a heap profile to path (none if "") whenever the
// heap in use passes its highest so far, until ctx ends: the profile left
// is the one nearest the peak.
func profileHeapPeaks(ctx context.Context, path string) error {
	if path == "" {
		return nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var peak uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse <= peak+peak/20 { // 5% more, not every small rise
			continue
		}
		peak = ms.HeapInuse
		fmt.Fprintf(os.Stderr, "bench jobserver: heap in use %d MiB (sys %d MiB, idle unreleased %d MiB, next GC %d MiB), stacks %d MiB, other sys %d MiB; %s\n",
			ms.HeapInuse>>20, ms.HeapSys>>20, (ms.HeapIdle-ms.HeapReleased)>>20, ms.NextGC>>20, ms.StackSys>>20, (ms.Sys-ms.HeapSys-ms.StackSys)>>20, procRSS())
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("bench jobserver: --heapprofile: %w", err)
		}
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("bench jobserver: --heapprofile: %w", err)
		}
	}
}

// jobServerChild is a running job server process: `ksrunner jobserver`
// (a ksrunner binary, as deployed) or `ksrunner-bench jobserver`.
type jobServerChild struct {
	cmd      *exec.Cmd
	endpoint string
	stopped  bool
}

// startJobServerChild starts `ksrunner jobserver opts...` when ksrunner is
// a binary's path, else `self bench jobserver opts... benchOpts...`, and
// waits for its endpoint. It stops with its parent (Pdeathsig).
func startJobServerChild(ctx context.Context, ksrunner, self string, opts, benchOpts []string) (*jobServerChild, error) {
	args := append([]string{"bench", "jobserver"}, append(opts, benchOpts...)...)
	bin := self
	if ksrunner != "" {
		bin = ksrunner
		args = append([]string{"jobserver", "--job_port=0", "--expansion_port=0", "--status_port=0"}, opts...)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("job server process: %w", err)
	}
	js := &jobServerChild{cmd: cmd}
	// bench jobserver prints "endpoint ADDR", ksrunner "job endpoint: ADDR".
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "endpoint "); ok {
			js.endpoint = e
		} else if e, ok := strings.CutPrefix(line, "job endpoint: "); ok {
			js.endpoint = e
		}
		if js.endpoint != "" {
			break
		}
	}
	if js.endpoint == "" {
		js.kill()
		return nil, fmt.Errorf("job server process %s ended without printing its endpoint (%v)", bin, sc.Err())
	}
	go io.Copy(io.Discard, out) //nolint:errcheck // the rest; ends when the process does
	return js, nil
}

// stop stops the job server (SIGTERM) and returns its peak RSS and CPU
// time.
func (js *jobServerChild) stop() (peakRSSKiB int64, cpu time.Duration, err error) {
	js.stopped = true
	if err := js.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, 0, fmt.Errorf("job server process: %w", err)
	}
	if err := js.cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("job server process: %w", err)
	}
	ru, ok := js.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, 0, fmt.Errorf("job server process: no resource usage")
	}
	return ru.Maxrss, time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// kill ends a job server not stopped (an error path).
func (js *jobServerChild) kill() {
	if js.stopped {
		return
	}
	js.stopped = true
	js.cmd.Process.Kill()
	js.cmd.Wait() //nolint:errcheck // killed
}

// selfPeakRSSKiB is this process's peak RSS (Linux: KiB).
func selfPeakRSSKiB() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss
}

// childrenCPU is the CPU time of this process's waited-for children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procRSS is this process's resident and peak resident set as
// /proc/self/status says ("" elsewhere).
func procRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "VmHWM:") || strings.HasPrefix(l, "RssAnon:") || strings.HasPrefix(l, "RssFile:") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(out, ", ")
}
