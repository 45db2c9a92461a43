package main

// The instances of `bench rescale`: processes of the ksrunner binary, each
// with a state_dir of its own and an SDK worker pool process of its own,
// started and killed by the plan.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// goSDKEnvironment is the id the Go SDK gives its environment (graphx's
// defaultEnvId): a worker's --sdk_worker_pool names it.
const goSDKEnvironment = "go"

// benchProc is a process of the ksrunner binary, its stderr in a log file.
type benchProc struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
}

// The lines processes print on stdout once they serve: a job server, a
// worker and an SDK worker pool.
var (
	jobEndpointLine = regexp.MustCompile(`^job endpoint: (\S+)`)
	workerLine      = regexp.MustCompile(`^worker: application (\S+)`)
	sdkPoolLine     = regexp.MustCompile(`^sdk worker pool: (\S+)`)
)

// startProc starts binary with args, its stderr to logPath, and waits up to
// a minute for it to print a line matching ready, whose first group it
// returns.
func startProc(ctx context.Context, binary, logPath string, args []string, ready *regexp.Regexp) (*benchProc, string, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	p := &benchProc{cmd: exec.Command(binary, args...), logPath: logPath, exited: make(chan struct{})}
	p.cmd.Stderr = lf
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, "", err
	}
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, "", fmt.Errorf("starting %s: %w", binary, err)
	}
	first := make(chan string, 1)
	go func() {
		// Reads stdout to its end, so Wait can finish.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case first <- m[1]:
				default:
				}
			}
		}
		p.waitErr = p.cmd.Wait()
		lf.Close()
		close(p.exited)
	}()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case s := <-first:
		return p, s, nil
	case <-p.exited:
		return nil, "", fmt.Errorf("%s exited before serving: %v (log: %s)", args[0], p.waitErr, logPath)
	case <-t.C:
		p.kill()
		return nil, "", fmt.Errorf("%s not serving after a minute (no line matching %s; log: %s)", args[0], ready, logPath)
	case <-ctx.Done():
		p.kill()
		return nil, "", ctx.Err()
	}
}

func (p *benchProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill is kill -9, and waits for the process to be gone.
func (p *benchProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop asks the process to stop (SIGTERM) and kills it if it has not in
// 30 s; it reports whether it had to.
func (p *benchProc) stop() (killed bool) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-p.exited:
		return false
	case <-t.C:
		p.kill()
		return true
	}
}

// cpu is the CPU time the process used (once it has exited).
func (p *benchProc) cpu() time.Duration {
	if ps := p.cmd.ProcessState; ps != nil {
		return ps.UserTime() + ps.SystemTime()
	}
	return 0
}

// benchInstance is one instance: its process and its SDK worker pool's.
type benchInstance struct {
	n        int
	stateDir string
	proc     *benchProc
	pool     *benchProc
	endpoint string     // its job endpoint (a job server)
	job      chan error // its submission's Execute result (nil: not submitted)
	// startedAt is when its start began; killedAt when it was killed.
	startedAt, killedAt time.Time
}

func (in *benchInstance) alive() bool { return in.proc.alive() }

// startInstance starts the next instance of the application, with a
// state_dir of its own (so a stable identity) and an SDK worker pool
// process of its own (`ksrunner-bench sdk-pool`), so that an instance added
// brings the SDK capacity for its share of the harness stages, and an
// instance killed takes its SDK workers with it, as when a machine dies.
// The first instance is a `ksrunner jobserver` to which the bench submits
// the pipeline under the application's id. Each later one is, per
// --add_as, another job server the same pipeline is resubmitted to (which
// makes it a member of the application's consumer group), or a `ksrunner
// worker` joining the application from its pipeline topic.
func (b *rescaleBench) startInstance(ctx context.Context, stdout io.Writer) (*benchInstance, error) {
	in := &benchInstance{n: len(b.instances) + 1, startedAt: time.Now()}
	in.stateDir = filepath.Join(b.workDir, fmt.Sprintf("instance-%d", in.n))
	name := fmt.Sprintf("instance %d", in.n)
	if err := os.MkdirAll(in.stateDir, 0o755); err != nil {
		return nil, err
	}
	start := time.Now()
	pool, poolAddr, err := startProc(ctx, b.cfg.SDKBinary, filepath.Join(b.workDir, fmt.Sprintf("instance-%d-sdk.log", in.n)),
		[]string{"sdk-pool", "--log_level=" + b.cfg.InstanceLogLevel}, sdkPoolLine)
	if err != nil {
		return nil, fmt.Errorf("%s: SDK worker pool: %w", name, err)
	}
	in.pool = pool
	worker := in.n > 1 && b.cfg.AddAs == addAsWorker
	args := []string{"jobserver", "--job_port=0", "--expansion_port=0", "--status_port=0",
		"--bootstrap_servers=" + b.bootstrap, "--application_id=" + b.appID, "--state_dir=" + in.stateDir,
		"--commit_interval_ms=" + strconv.Itoa(b.cfg.CommitMs), "--log_level=" + b.cfg.InstanceLogLevel}
	args = append(args, b.cfg.InstanceFlags...)
	ready := jobEndpointLine
	if worker {
		// The job's options come from its pipeline topic.
		args = []string{"worker", "--application_id=" + b.appID, "--bootstrap_servers=" + b.bootstrap,
			"--state_dir=" + in.stateDir, "--log_level=" + b.cfg.InstanceLogLevel,
			"--sdk_worker_pool=" + goSDKEnvironment + "=" + poolAddr}
		ready = workerLine
	}
	proc, endpoint, err := startProc(ctx, b.cfg.Binary, filepath.Join(b.workDir, fmt.Sprintf("instance-%d.log", in.n)), args, ready)
	if err != nil {
		pool.kill()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	in.proc = proc
	b.instances = append(b.instances, in)
	if worker {
		b.event(stdout, start, "instance %d started: ksrunner worker (pid %d, state_dir %s, SDK worker pool pid %d)", in.n, proc.cmd.Process.Pid, in.stateDir, pool.cmd.Process.Pid)
		return in, nil
	}
	in.endpoint = endpoint
	if in.job, err = b.submit(ctx, in, poolAddr); err != nil {
		return nil, fmt.Errorf("%s: %w (log: %s)", name, err, proc.logPath)
	}
	b.event(stdout, start, "instance %d started: ksrunner jobserver (pid %d, state_dir %s, SDK worker pool pid %d), job RUNNING after %.1fs",
		in.n, proc.cmd.Process.Pid, in.stateDir, pool.cmd.Process.Pid, time.Since(start).Seconds())
	return in, nil
}

// kill kills in, its SDK worker pool too, as a machine dying would.
func (in *benchInstance) kill() {
	in.proc.kill()
	in.pool.kill()
}

// submit submits the pipeline to in's job server under the application's
// id and job name, its environment EXTERNAL, the SDK worker pool at
// poolAddr, and waits until the job is RUNNING.
func (b *rescaleBench) submit(ctx context.Context, in *benchInstance, poolAddr string) (chan error, error) {
	// The SDK stages a worker binary for any environment but LOOPBACK,
	// building one if it must; the pool is this binary, already running,
	// so (as the SDK does for LOOPBACK) an empty file stands in.
	unused := filepath.Join(b.workDir, "unused-worker-binary")
	if err := os.WriteFile(unused, nil, 0o644); err != nil {
		return nil, err
	}
	// The SDK reads its options from flags: set them, and wait for the job
	// to run before any other submission changes them.
	*jobopts.Endpoint = in.endpoint
	*jobopts.EnvironmentType = "EXTERNAL"
	*jobopts.EnvironmentConfig = poolAddr
	*jobopts.WorkerBinary = unused
	flag.Set("job_name", b.jobID)
	beam.PipelineOptions.Set("application_id", b.appID)
	p := rescalePipeline(b.bootstrap, b.in, b.out)
	done := make(chan error, 1)
	go func() {
		_, err := universal.Execute(b.jobsCtx, p)
		done <- err
	}()
	cc, err := grpc.NewClient(in.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return done, err
	}
	defer cc.Close()
	js := jobpb.NewJobServiceClient(cc)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for {
		jobs, err := js.GetJobs(ctx, &jobpb.GetJobsRequest{})
		if err != nil {
			return done, fmt.Errorf("listing jobs: %w", err)
		}
		for _, j := range jobs.GetJobInfo() {
			if j.GetJobName() == b.jobID {
				switch j.GetState() {
				case jobpb.JobState_RUNNING:
					return done, nil
				case jobpb.JobState_FAILED, jobpb.JobState_CANCELLED, jobpb.JobState_DONE:
					return done, fmt.Errorf("job %s is %v before running", j.GetJobId(), j.GetState())
				}
			}
		}
		select {
		case err := <-done:
			done <- err // for whoever waits on the job later
			return done, fmt.Errorf("submission ended before the job ran: %v", err)
		case <-in.proc.exited:
			return done, fmt.Errorf("exited before the job ran: %v", in.proc.waitErr)
		case <-deadline.C:
			return done, errors.New("job not RUNNING after 2 minutes")
		case <-ctx.Done():
			return done, ctx.Err()
		case <-tick.C:
		}
	}
}

// stopInstances ends every instance still running: its job cancelled, then
// it and its SDK worker pool stopped, and every submission's Execute.
// Safe to call twice.
func (b *rescaleBench) stopInstances(stdout io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, in := range b.instances {
		if !in.alive() {
			continue
		}
		if in.job != nil {
			if err := cancelBenchJob(ctx, in.endpoint, b.jobID, in.job); err != nil {
				b.cfg.Logger.Warn("bench rescale: cancelling the job", "instance", in.n, "err", err)
			}
			in.job = nil
		}
		if in.proc.stop() {
			b.cfg.Logger.Warn("bench rescale: instance did not exit on SIGTERM in 30 s; killed it", "instance", in.n)
		}
	}
	for _, in := range b.instances {
		if in.pool.alive() {
			in.pool.stop()
		}
	}
	if b.stopJobs != nil {
		b.stopJobs()
		for _, in := range b.instances {
			if in.job != nil {
				<-in.job // a killed instance's submission ends with its connection
				in.job = nil
			}
		}
	}
}

// runSDKPool runs `ksrunner-bench sdk-pool`: a Beam Go SDK worker pool
// (the one the SDK starts in-process for LOOPBACK) in a process of its
// own, for one instance of `bench rescale`; this binary holds the bench's
// DoFns. It prints its address and serves until it is signalled.
func runSDKPool(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench sdk-pool")
	port := fs.Int("port", 0, "port to listen on (0 picks a free port)")
	logLevel := fs.String("log_level", "warn", "SDK log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := benchLogger("bench sdk-pool", *logLevel); err != nil {
		return err
	}
	pool, err := extworker.StartLoopback(ctx, *port)
	if err != nil {
		return fmt.Errorf("bench sdk-pool: %w", err)
	}
	fmt.Fprintf(stdout, "sdk worker pool: %s\n", pool.EnvironmentConfig(ctx))
	<-ctx.Done()
	return pool.Stop(context.Background())
}

// ksrunnerBinary finds the ksrunner binary the instances run: ksrunner next
// to this binary, else on PATH, else one built now from this module (the
// benchmarks run from the source tree: `go run ./cmd/ksrunner-bench`).
func ksrunnerBinary(ctx context.Context, logger *slog.Logger) (string, error) {
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "ksrunner"); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("ksrunner"); err == nil {
		return p, nil
	}
	dir := filepath.Join(os.TempDir(), "ksrunner-bench-bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "ksrunner")
	logger.Info("building the ksrunner binary for the instances", "to", out)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/ksrunner/ksrunner/cmd/ksrunner")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/ksrunner for the instances (give --ksrunner=PATH): %v\n%s", err, msg)
	}
	return out, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
