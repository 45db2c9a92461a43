package main

// The instances of `bench rescale`: processes of the ksrunner binary, each
// with a state_dir of its own, started and killed by the plan.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// benchInstance is one instance process.
type benchInstance struct {
	n                 int
	stateDir, logPath string
	cmd               *exec.Cmd
	exited            chan struct{} // closed when cmd has been waited for
	waitErr           error
	endpoint          string     // its job endpoint
	job               chan error // its submission's Execute result (nil: not submitted)
	killedAt          time.Time
}

func (in *benchInstance) alive() bool {
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

// startInstance starts the next instance of the application, with a
// state_dir of its own (so a stable identity). The first is a `ksrunner
// jobserver` to which the bench submits the pipeline under the
// application's id. Each later one is, per --add_as, another job server
// the same pipeline is resubmitted to (which makes it a member of the
// application's consumer group), or a `ksrunner worker` joining the
// application from its pipeline topic.
func (b *rescaleBench) startInstance(ctx context.Context, stdout io.Writer) (*benchInstance, error) {
	in := &benchInstance{n: len(b.instances) + 1, exited: make(chan struct{})}
	in.stateDir = filepath.Join(b.workDir, fmt.Sprintf("instance-%d", in.n))
	in.logPath = filepath.Join(b.workDir, fmt.Sprintf("instance-%d.log", in.n))
	name := fmt.Sprintf("instance %d", in.n)
	worker := in.n > 1 && b.cfg.AddAs == addAsWorker
	args := []string{"jobserver", "--job_port=0", "--expansion_port=0",
		"--bootstrap_servers=" + b.bootstrap, "--application_id=" + b.appID, "--state_dir=" + in.stateDir,
		"--commit_interval_ms=" + strconv.Itoa(b.cfg.CommitMs), "--log_level=" + b.cfg.InstanceLogLevel}
	args = append(args, b.cfg.InstanceFlags...)
	ready := jobEndpointLine
	if worker {
		// The job's options come from its pipeline topic; its harness
		// stages run in the pipeline's EXTERNAL pool (this process's).
		args = []string{"worker", "--application_id=" + b.appID, "--bootstrap_servers=" + b.bootstrap,
			"--state_dir=" + in.stateDir, "--log_level=" + b.cfg.InstanceLogLevel}
		ready = workerLine
	}
	start := time.Now()
	if err := b.startProcess(ctx, in, args, ready); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b.instances = append(b.instances, in)
	if worker {
		b.event(stdout, start, "instance %d started: ksrunner worker (pid %d, state_dir %s)", in.n, in.cmd.Process.Pid, in.stateDir)
		return in, nil
	}
	var err error
	if in.job, err = b.submit(ctx, in); err != nil {
		return nil, fmt.Errorf("%s: %w (log: %s)", name, err, in.logPath)
	}
	b.event(stdout, start, "instance %d started: ksrunner jobserver (pid %d, state_dir %s), job RUNNING after %.1fs", in.n, in.cmd.Process.Pid, in.stateDir, time.Since(start).Seconds())
	return in, nil
}

// The lines a job server and a worker print on stdout once they serve.
var (
	jobEndpointLine = regexp.MustCompile(`^job endpoint: (\S+)`)
	workerLine      = regexp.MustCompile(`^worker: application (\S+)`)
)

// startProcess starts in's process with args, its stderr to in.logPath,
// and waits for it to print a line matching ready (whose first group, a job
// server's endpoint, goes to in.endpoint).
func (b *rescaleBench) startProcess(ctx context.Context, in *benchInstance, args []string, ready *regexp.Regexp) error {
	if err := os.MkdirAll(in.stateDir, 0o755); err != nil {
		return err
	}
	lf, err := os.Create(in.logPath)
	if err != nil {
		return err
	}
	in.cmd = exec.Command(b.cfg.Binary, args...)
	in.cmd.Stderr = lf
	stdout, err := in.cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return err
	}
	if err := in.cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("starting %s: %w", b.cfg.Binary, err)
	}
	endpoint := make(chan string, 1)
	go func() {
		// Reads stdout to its end, so Wait can finish.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case endpoint <- m[1]:
				default:
				}
			}
		}
		in.waitErr = in.cmd.Wait()
		lf.Close()
		close(in.exited)
	}()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case e := <-endpoint:
		if ready == jobEndpointLine {
			in.endpoint = e
		}
		return nil
	case <-in.exited:
		return fmt.Errorf("exited before serving: %v (log: %s)", in.waitErr, in.logPath)
	case <-t.C:
		return fmt.Errorf("not serving after a minute (no line matching %s; log: %s)", ready, in.logPath)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// submit submits the pipeline to in's job server under the application's
// id and job name, and waits until the job is RUNNING. Without b.pool each
// submission has a LOOPBACK worker pool of its own in this process
// (universal.Execute starts one), so SDK worker ids of two job servers
// never meet in one pool; with it (workers, which need a pool that
// outlives any one job server) the pipeline's environment is EXTERNAL, that
// pool.
func (b *rescaleBench) submit(ctx context.Context, in *benchInstance) (chan error, error) {
	// The SDK reads its options from flags: set them, and wait for the job
	// to run before any other submission changes them.
	*jobopts.Endpoint = in.endpoint
	if b.pool != nil {
		*jobopts.EnvironmentType = "EXTERNAL"
		*jobopts.EnvironmentConfig = b.pool.EnvironmentConfig(ctx)
		// The SDK stages a worker binary for any environment but
		// LOOPBACK, building one if it must; the pool runs the workers
		// in this process, so (as the SDK does for LOOPBACK) an empty
		// file stands in.
		unused := filepath.Join(b.workDir, "unused-worker-binary")
		if err := os.WriteFile(unused, nil, 0o644); err != nil {
			return nil, err
		}
		*jobopts.WorkerBinary = unused
	}
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
		case <-in.exited:
			return done, fmt.Errorf("exited before the job ran: %v", in.waitErr)
		case <-deadline.C:
			return done, errors.New("job not RUNNING after 2 minutes")
		case <-ctx.Done():
			return done, ctx.Err()
		case <-tick.C:
		}
	}
}

// stopInstances ends every instance still running: its job cancelled, then
// SIGTERM (SIGKILL if it does not exit in 30 s), and every submission's
// Execute. Safe to call twice.
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
		in.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(30 * time.Second)
		select {
		case <-in.exited:
		case <-t.C:
			b.cfg.Logger.Warn("bench rescale: instance did not exit on SIGTERM in 30 s; killing it", "instance", in.n)
			in.cmd.Process.Signal(syscall.SIGKILL)
			<-in.exited
		}
		t.Stop()
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
