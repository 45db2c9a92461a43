package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	beamlog "github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host"
)

// `ksrunner-bench rescale`: one application, several processes, measured
// while it runs. Three parts share the bench process:
//
//   - the generator produces --rate records/s to an input topic of
//     --partitions partitions, keys k00000... spread round-robin over --keys
//     keys, each record's timestamp the wall clock when it is made (the
//     event time), and keeps the count of each (window, key) it produced;
//   - the pipeline, a Go SDK job run by ksrunner instances (separate
//     processes of the ksrunner binary, each with its own state_dir and an
//     SDK worker pool process of its own, bench_rescale_instance.go):
//     kafkaio.Read (CreateTime) → 1 s fixed windows → CombinePerKey(count),
//     which ksrunner lifts (precombine, shuffle, merge) → "windowStartMs,
//     count" keyed by the key → kafkaio.Write to an output topic. Window
//     assignment and the precombine run on the Fn API harness: a WASM DoFn
//     can neither assign windows nor emit from FinishBundle (wasmabi's ABI
//     v1), so WASM stages have nothing here to take over;
//   - the checker reads the output topic read_committed. A window is
//     complete when every key produced in it has its count exactly and no
//     result came twice; its skew is the wall clock when its last result
//     became readable minus the window's end.
//
// Meanwhile --plan starts instances and kills them (SIGKILL). The report
// gives, per phase of the plan, the windows complete, incomplete and
// duplicated and the skew p50/p99/max; the sustained rate; and for each
// kill the handover windows and the failover time (from the kill to the
// completion of the first window that starts after it), and the same for
// each instance started while the generator runs (a join hands tasks over
// too: revoked, restored from their changelogs, resumed elsewhere); each
// phase's p50/p99 is given also without the handover windows. The command fails
// if any window is incomplete or duplicated, or a result names a window or
// key nothing was produced in.

func init() {
	register.Combiner2[int64, []byte](&countFn{})
	register.Function3x2(formatWindowCount)
}

// countFn counts the elements of a key (in a window): the bench's combine,
// which ksrunner lifts, so the shuffle carries one accumulator per key and
// bundle, not every element.
type countFn struct{}

func (*countFn) CreateAccumulator() int64           { return 0 }
func (*countFn) AddInput(n int64, _ []byte) int64   { return n + 1 }
func (*countFn) MergeAccumulators(a, b int64) int64 { return a + b }

// formatWindowCount is a key's result: the key, and "windowStartMs,count".
func formatWindowCount(w beam.Window, k []byte, n int64) ([]byte, []byte) {
	v := strconv.AppendInt(nil, int64(w.(window.IntervalWindow).Start), 10)
	v = append(v, ',')
	return k, strconv.AppendInt(v, n, 10)
}

// rescalePipeline is the job every instance runs.
func rescalePipeline(bootstrap, in, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	recs := kafkaio.Read(s, "", bootstrap, []string{in},
		kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"}),
		kafkaio.TimestampPolicy(kafkaio.CreateTime))
	counts := beam.CombinePerKey(s, &countFn{}, beam.WindowInto(s, window.NewFixedWindows(rescaleWindow), recs))
	lines := beam.ParDo(s, formatWindowCount, counts)
	kafkaio.Write(s, "", bootstrap, out, beam.WindowInto(s, window.NewGlobalWindows(), lines))
	return p
}

// The values of --add_as.
const (
	addAsJobServer = "jobserver"
	addAsWorker    = "worker"
)

// rescaleWindow is the size of the counted windows.
const rescaleWindow = time.Second

// primeRate is the generator's rate (at most) until the pipeline runs, and
// primeTimeout how long that may take.
const (
	primeRate    = 1000
	primeTimeout = 2 * time.Minute
)

// rescaleConfig is what a bench rescale run does.
type rescaleConfig struct {
	Rate, Keys, ValueBytes int
	Partitions             int32
	// Duration is how long the generator produces; Warmup how much of its
	// start is reported apart (instances still settling); Grace how long
	// the checker may wait after the generator stops for the last windows.
	Duration, Warmup, Grace time.Duration
	// Late is the skew over which a window counts as late.
	Late time.Duration
	Plan []planStep
	// Binary is the ksrunner binary the instances run; SDKBinary the one
	// their SDK worker pools run (`bench sdk-pool`), which must hold the
	// pipeline's DoFns: this process's own.
	Binary, SDKBinary string
	// CommitMs is the instances' commit_interval_ms; InstanceFlags are
	// more flags for every instance.
	CommitMs      int
	InstanceFlags []string
	// AddAs is what the instances after the first are: addAsJobServer or
	// addAsWorker.
	AddAs string
	// WorkDir holds the instances' state_dirs and logs; empty: a temporary
	// directory, removed after a run that passed.
	WorkDir          string
	InstanceLogLevel string
	Logger           *slog.Logger
}

// planStep is one step of --plan: at At after the generator starts, start a
// new instance (Kill 0) or SIGKILL instance Kill (-1: the newest live one).
type planStep struct {
	At   time.Duration
	Kill int
}

func (s planStep) String() string {
	switch s.Kill {
	case 0:
		return "start@" + s.At.String()
	case -1:
		return "kill@" + s.At.String()
	}
	return fmt.Sprintf("kill%d@%s", s.Kill, s.At)
}

// parsePlan parses --plan: comma-separated ACTION@OFFSET steps in time
// order, ACTION start, kill (the newest live instance) or killN (instance
// N, counting starts from 1).
func parsePlan(s string) ([]planStep, error) {
	var plan []planStep
	live := map[int]bool{}
	started := 0
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		action, at, ok := strings.Cut(f, "@")
		d, err := time.ParseDuration(at)
		if !ok || err != nil || d < 0 {
			return nil, fmt.Errorf("--plan: step %q: want ACTION@OFFSET, e.g. start@0s or kill@30s", f)
		}
		if len(plan) > 0 && d < plan[len(plan)-1].At {
			return nil, fmt.Errorf("--plan: step %q comes before the step ahead of it", f)
		}
		step := planStep{At: d}
		switch {
		case action == "start":
			started++
			live[started] = true
		case action == "kill":
			step.Kill = -1
			newest := 0
			for n := range live {
				newest = max(newest, n)
			}
			if newest == 0 {
				return nil, fmt.Errorf("--plan: step %q: no instance is running then", f)
			}
			delete(live, newest)
		case strings.HasPrefix(action, "kill"):
			n, err := strconv.Atoi(strings.TrimPrefix(action, "kill"))
			if err != nil || !live[n] {
				return nil, fmt.Errorf("--plan: step %q: instance %s is not running then (instances are numbered from 1 in start order)", f, strings.TrimPrefix(action, "kill"))
			}
			step.Kill = n
			delete(live, n)
		default:
			return nil, fmt.Errorf("--plan: step %q: unknown action %q (want start, kill or killN)", f, action)
		}
		plan = append(plan, step)
	}
	if len(plan) == 0 || plan[0].Kill != 0 || plan[0].At != 0 {
		return nil, errors.New("--plan: the first step must be start@0s")
	}
	return plan, nil
}

func runBenchRescale(ctx context.Context, args []string, stdout io.Writer) error {
	def := host.DefaultOptions()
	fs := newFlagSet("bench rescale")
	rate := fs.Int("rate", 200_000, "records/s the generator produces")
	keys := fs.Int("keys", 2000, "distinct keys, produced round-robin")
	valueBytes := fs.Int("value_bytes", 100, "bytes per record value")
	parts := fs.Int32("partitions", 8, "partitions of the input and output topics")
	duration := fs.Duration("duration", 90*time.Second, "how long the generator produces")
	warmup := fs.Duration("warmup", 5*time.Second, "windows ending this early in the run are reported apart, as warm-up")
	grace := fs.Duration("grace", 2*time.Minute, "how long to wait for the last windows after the generator stops")
	late := fs.Duration("late", 2*time.Second, "a window whose skew is over this is late")
	plan := fs.String("plan", "start@0s,start@30s,kill@60s", "instances: comma-separated ACTION@OFFSET from the generator's start; ACTION start, kill (the newest live instance) or killN (the Nth started); instances at 0s start before the generator")
	bootstrap := fs.String("bootstrap_servers", "embedded", `Kafka brokers, or "embedded" (an in-memory broker in this process)`)
	binary := fs.String("ksrunner", "", "the ksrunner binary the instances run (default: ksrunner next to this binary, else on PATH, else built from this module with `go build`)")
	commitMs := fs.Int("commit_interval_ms", def.CommitIntervalMs, "the instances' commit_interval_ms")
	instanceFlags := fs.StringArray("instance_flag", nil, "a flag for every instance's `ksrunner jobserver`, e.g. --instance_flag=--transaction_timeout_ms=10000 (repeatable)")
	addAs := fs.String("add_as", addAsWorker, "what instances after the first are: jobserver (a job server of their own, the pipeline resubmitted to it) or worker (`ksrunner worker`, joining from the pipeline topic)")
	workDir := fs.String("work_dir", "", "directory of the instances' state_dirs and logs (default: a temporary one, removed after a run that passed)")
	logLevel := fs.String("log_level", "warn", "this process's log level (embedded broker)")
	instanceLogLevel := fs.String("instance_log_level", "info", "the instances' and their SDK worker pools' log level (their logs go to the work directory)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (generator, checker, embedded broker) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	steps, err := parsePlan(*plan)
	if err != nil {
		return fmt.Errorf("bench rescale: %w", err)
	}
	logger, err := benchLogger("bench rescale", *logLevel)
	if err != nil {
		return err
	}
	var lvl slog.Level
	lvl.UnmarshalText([]byte(*logLevel)) // checked by benchLogger
	beamlog.SetLogger(sdkLogger{min: sdkSeverity(lvl)})
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench rescale: finding this binary (it runs the SDK worker pools): %w", err)
	}
	if *binary == "" {
		if *binary, err = ksrunnerBinary(ctx, logger); err != nil {
			return fmt.Errorf("bench rescale: %w", err)
		}
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	cfg := rescaleConfig{
		Rate: *rate, Keys: *keys, ValueBytes: *valueBytes, Partitions: *parts,
		Duration: *duration, Warmup: *warmup, Grace: *grace, Late: *late, Plan: steps,
		Binary: *binary, SDKBinary: self, CommitMs: *commitMs, InstanceFlags: *instanceFlags, AddAs: *addAs,
		WorkDir: *workDir, InstanceLogLevel: *instanceLogLevel, Logger: logger,
	}
	_, err = benchRescale(ctx, cfg, *bootstrap, stdout)
	return err
}

// rescaleBench is one run's shared state.
type rescaleBench struct {
	cfg                   rescaleConfig
	bootstrap             string
	embedded              bool // the broker is this process's
	nonce                 string
	appID, in, out, jobID string // jobID: the job name every submission uses
	workDir               string
	check                 *windowChecker
	produceLatency        msHistogram // record made (its timestamp) to acked
	lag                   *lagSampler

	// jobsCtx is the context of every submission's Execute; stopJobs ends
	// them all (after their jobs were cancelled).
	jobsCtx  context.Context
	stopJobs context.CancelFunc

	// Owned by the goroutine running the plan until it returns.
	instances []*benchInstance
	genStart  time.Time     // zero until the generator starts at full rate
	primed    time.Duration // how long it primed before
	events    []string
}

// event logs a timeline line, at its offset from the generator's start.
func (b *rescaleBench) event(stdout io.Writer, at time.Time, format string, args ...any) {
	off := "   (before)"
	if !b.genStart.IsZero() {
		off = fmt.Sprintf("%+9.1fs", at.Sub(b.genStart).Seconds())
	}
	line := off + "  " + fmt.Sprintf(format, args...)
	b.events = append(b.events, line)
	fmt.Fprintln(stdout, line)
}

// rescaleResult is what a run measured.
type rescaleResult struct {
	Produced   int64   // at full rate
	Primed     int64   // before, while priming
	GenRate    float64 // records/s the generator achieved
	Windows    []windowResult
	Phases     []phaseResult
	Incomplete int
	Duplicated int
	Unexpected int // windows with results but nothing produced in them
	Kills      []killResult
	// Joins are the instances started while the generator ran: their
	// tasks are handed over from the running instances (revoked,
	// restored from their changelogs, resumed), as a kill's are.
	Joins []killResult
}

// phaseResult is one phase of the plan (or the warm-up) over the windows
// whose end falls in [From, To) after the generator's start.
type phaseResult struct {
	Label                  string
	From, To               time.Duration
	Windows, Complete      int
	Incomplete, Duplicated int
	P50, P99, Max          time.Duration // skew of its complete windows
	Late                   int           // complete windows with a skew over cfg.Late
	HandoverExcluded       int           // windows left out as handover windows
	P50Steady, P99Steady   time.Duration // skew without the handover windows
	// LagP50, LagMax are the group's input lag (in seconds of input at
	// the rate) sampled while the phase's windows ended.
	LagP50, LagMax float64
	Elements       int64
}

// killResult is one kill's failover.
type killResult struct {
	Instance int
	At       time.Duration // after the generator's start
	// Failover is from the kill to the completion of the first window
	// starting after it; -1 if that window never completed.
	Failover time.Duration
	// FailoverInexact: that window was not exact; Failover runs to when
	// every key of it had a result.
	FailoverInexact bool
	// Handover are the windows in flight at the kill (not complete then)
	// that end before that completion; HandoverComplete of them
	// completed, the latest with a skew of HandoverMaxSkew.
	Handover, HandoverComplete int
	HandoverMaxSkew            time.Duration
}

// benchRescale runs the bench on bootstrap ("embedded": a broker in this
// process) and prints the report to stdout; it fails if a window is
// incomplete or duplicated.
func benchRescale(ctx context.Context, cfg rescaleConfig, bootstrap string, stdout io.Writer) (res *rescaleResult, err error) {
	switch {
	case cfg.Rate < 1 || cfg.Keys < 1 || cfg.Partitions < 1 || cfg.CommitMs < 1:
		return nil, errors.New("bench rescale: --rate, --keys, --partitions and --commit_interval_ms must be at least 1")
	case cfg.Keys > 99999:
		return nil, fmt.Errorf("bench rescale: --keys %d: at most 99999 (keys are k00000 to k99999)", cfg.Keys)
	case cfg.Duration < rescaleWindow:
		return nil, fmt.Errorf("bench rescale: --duration %v: at least one window (%v)", cfg.Duration, rescaleWindow)
	case len(cfg.Plan) == 0:
		return nil, errors.New("bench rescale: --plan: no steps")
	case cfg.AddAs != addAsJobServer && cfg.AddAs != addAsWorker:
		return nil, fmt.Errorf("bench rescale: --add_as %q: want %s or %s", cfg.AddAs, addAsJobServer, addAsWorker)
	}
	bootstrap, where, closeBroker, err := benchBroker(bootstrap)
	if err != nil {
		return nil, err
	}
	defer closeBroker()
	b := &rescaleBench{cfg: cfg, bootstrap: bootstrap, embedded: where != bootstrap, nonce: strconv.FormatInt(time.Now().UnixNano(), 36), check: newWindowChecker(cfg.Keys)}
	b.appID = "bench-rescale-" + b.nonce
	b.jobID = b.appID
	b.in, b.out = b.appID+"-in", b.appID+"-out"
	b.workDir = cfg.WorkDir
	if b.workDir == "" {
		if b.workDir, err = os.MkdirTemp("", "ksrunner-bench-rescale-"); err != nil {
			return nil, err
		}
		defer func() {
			if err == nil {
				os.RemoveAll(b.workDir)
			} else {
				fmt.Fprintf(stdout, "instance logs and state kept in %s\n", b.workDir)
			}
		}()
	} else if err := os.MkdirAll(b.workDir, 0o755); err != nil {
		return nil, fmt.Errorf("bench rescale: --work_dir: %w", err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(max(2*cfg.Rate, 10_000)))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createBenchTopics(ctx, cl, cfg.Partitions, nil, b.in, b.out); err != nil {
		return nil, fmt.Errorf("bench rescale: %w", err)
	}
	defer b.cleanUp(adm)

	var plan []string
	for _, s := range cfg.Plan {
		plan = append(plan, s.String())
	}
	fmt.Fprintf(stdout, "bench rescale: %d records/s over %d keys (%d-byte values) into %d partitions for %v; 1 s windows counted per key; plan %s; on %s; instances after the first: %s; instances' flags: commit_interval_ms=%d %s; GOMAXPROCS=%d\n",
		cfg.Rate, cfg.Keys, cfg.ValueBytes, cfg.Partitions, cfg.Duration, strings.Join(plan, ","), where, cfg.AddAs, cfg.CommitMs, strings.Join(cfg.InstanceFlags, " "), runtime.GOMAXPROCS(0))

	// The checker reads from the start of the (new) output topic.
	checkCtx, stopCheck := context.WithCancel(ctx)
	defer stopCheck()
	checkDone := make(chan error, 1)
	go func() { checkDone <- b.check.read(checkCtx, bootstrap, b.out) }()
	b.lag = &lagSampler{adm: adm, group: b.appID, topic: b.in}
	lagDone := make(chan struct{})
	go func() { defer close(lagDone); b.lag.run(checkCtx) }()

	b.jobsCtx, b.stopJobs = context.WithCancel(context.Background())
	defer b.stopInstances(stdout)
	cpu0 := processCPU()

	// Instances of step 0 before the generator: the first windows measure
	// the pipeline, not its start-up.
	steps := cfg.Plan
	for len(steps) > 0 && steps[0].At == 0 {
		if err := b.step(ctx, steps[0], stdout); err != nil {
			return nil, err
		}
		steps = steps[1:]
	}

	// Priming: a job RUNNING may still be joining the group and restoring
	// (seconds on a real broker), and at full rate that start-up would be
	// a backlog every later window inherits. So the generator produces
	// slowly until the group has committed offsets on every input
	// partition, i.e. the pipeline runs; those windows are checked like
	// all others and reported apart.
	gen := newGenerator(ctx, cl, b.in, cfg.Keys, cfg.ValueBytes, b.check, &b.produceLatency)
	primeRate, primeStart := min(cfg.Rate, primeRate), time.Now()
	primeCtx, stopPrime := context.WithTimeout(ctx, primeTimeout)
	consuming, waited := make(chan struct{}), make(chan error, 1)
	go func() {
		err := b.lag.waitConsuming(primeCtx)
		if err == nil {
			close(consuming)
		}
		waited <- err
	}()
	primed, err := gen.run(primeCtx, primeRate, primeStart.Add(primeTimeout), consuming)
	stopPrime()
	if werr := <-waited; err == nil {
		err = werr
	}
	if err != nil {
		return nil, fmt.Errorf("bench rescale: priming at %d records/s until the application consumes every input partition: %w", primeRate, err)
	}

	// The generator at full rate and the rest of the plan run side by
	// side; either failing stops the other.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	b.genStart = time.Now()
	b.primed = b.genStart.Sub(primeStart)
	b.event(stdout, primeStart, "priming: %d records at %d records/s until the group had committed offsets on every input partition (%.1fs)", primed, primeRate, b.primed.Seconds())
	b.event(stdout, b.genStart, "generator at %d records/s", cfg.Rate)
	genDone := make(chan error, 1)
	var produced int
	go func() {
		var err error
		if produced, err = gen.run(runCtx, cfg.Rate, b.genStart.Add(cfg.Duration), nil); err == nil {
			err = gen.finish(runCtx)
		}
		genDone <- err
	}()
	planErr := b.runPlan(runCtx, steps, stdout)
	if planErr != nil {
		stopRun()
	}
	genErr := <-genDone
	if err := errors.Join(planErr, genErr); err != nil {
		return nil, fmt.Errorf("bench rescale: %w", err)
	}
	genEnd := time.Now()
	res = &rescaleResult{Produced: int64(produced), Primed: int64(primed), GenRate: float64(produced) / genEnd.Sub(b.genStart).Seconds()}
	b.event(stdout, genEnd, "generator stopped: %d records at full rate, %.0f records/s (target %d)", produced, res.GenRate, cfg.Rate)

	waitCtx, cancelWait := context.WithTimeout(ctx, cfg.Grace)
	waitErr := b.check.waitAll(waitCtx)
	cancelWait()
	if waitErr == nil {
		b.event(stdout, time.Now(), "every window resolved (complete, or a wrong or duplicated result)")
	} else {
		b.event(stdout, time.Now(), "stopped waiting: %v", waitErr)
	}
	stopCheck()
	<-lagDone
	if err := <-checkDone; err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("bench rescale: checker: %w", err)
	}
	b.stopInstances(stdout)
	b.report(res, stdout, processCPU()-cpu0)
	if res.Incomplete > 0 || res.Duplicated > 0 || res.Unexpected > 0 {
		return res, fmt.Errorf("bench rescale: %d incomplete, %d duplicated windows, %d unexpected windows", res.Incomplete, res.Duplicated, res.Unexpected)
	}
	return res, nil
}

// runPlan carries out steps, each at its offset from the generator's start.
func (b *rescaleBench) runPlan(ctx context.Context, steps []planStep, stdout io.Writer) error {
	for _, s := range steps {
		t := time.NewTimer(time.Until(b.genStart.Add(s.At)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil // the generator ended first (its error, if any, is reported)
		case <-t.C:
		}
		if err := b.step(ctx, s, stdout); err != nil {
			return err
		}
	}
	return nil
}

// step carries out one plan step.
func (b *rescaleBench) step(ctx context.Context, s planStep, stdout io.Writer) error {
	if s.Kill == 0 {
		_, err := b.startInstance(ctx, stdout)
		return err
	}
	var victim *benchInstance
	for _, in := range b.instances {
		if in.alive() && (s.Kill == in.n || s.Kill == -1) {
			victim = in // with -1, the newest live one: the last match
		}
	}
	if victim == nil {
		return fmt.Errorf("plan step %s: no such live instance", s)
	}
	at := time.Now()
	victim.kill()
	victim.killedAt = at
	b.event(stdout, at, "instance %d killed (SIGKILL, pid %d, and its SDK worker pool)", victim.n, victim.proc.cmd.Process.Pid)
	return nil
}

// cleanUp deletes the bench's topics, the application's internal topics
// and its consumer group from a real broker (an embedded one goes away).
func (b *rescaleBench) cleanUp(adm *kadm.Client) {
	if b.embedded {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := []string{b.in, b.out}
	if listed, err := adm.ListTopics(ctx); err == nil {
		for _, t := range listed.Names() {
			if strings.HasPrefix(t, "__beam_"+b.appID+"_") {
				topics = append(topics, t)
			}
		}
	}
	if _, err := adm.DeleteTopics(ctx, topics...); err != nil {
		b.cfg.Logger.Warn("bench rescale: deleting topics", "topics", topics, "err", err)
	}
	if _, err := adm.DeleteGroups(ctx, b.appID); err != nil {
		b.cfg.Logger.Warn("bench rescale: deleting the consumer group", "group", b.appID, "err", err)
	}
}

// rescaleKey is key i's bytes: k and five digits.
func rescaleKey(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }

// parseRescaleKey is the index of a rescaleKey, or -1.
func parseRescaleKey(k []byte) int {
	if len(k) != 6 || k[0] != 'k' {
		return -1
	}
	i, err := strconv.Atoi(string(k[1:]))
	if err != nil || i < 0 {
		return -1
	}
	return i
}

// report fills res from the checker and prints it.
func (b *rescaleBench) report(res *rescaleResult, stdout io.Writer, benchCPU time.Duration) {
	res.Windows = b.check.results()
	cfg := b.cfg
	rel := func(t time.Time) time.Duration { return t.Sub(b.genStart) }
	// The sustained rate: what complete windows wholly at full rate hold,
	// per second of window.
	var counted int64
	fullWindows, fullComplete := 0, 0
	for _, w := range res.Windows {
		switch {
		case !w.Published:
			res.Unexpected++
		case w.Duplicated:
			res.Duplicated++
		case !w.Complete:
			res.Incomplete++
		default:
			if !w.Start.Before(b.genStart) && !w.Start.Add(rescaleWindow).After(b.genStart.Add(cfg.Duration)) {
				counted += w.Elements
				fullComplete++
			}
		}
	}

	// Kills and joins: the handover time and the handover windows.
	handover := map[int64]bool{}
	handoverOf := func(n int, at time.Time) killResult {
		k := killResult{Instance: n, At: rel(at), Failover: -1}
		done := time.Time{}
		for _, w := range res.Windows {
			if !w.Start.Before(at) {
				switch {
				case w.Complete:
					done = w.CompleteAt
				case !w.CoveredAt.IsZero():
					// Not exact (wrong or duplicated, reported as such):
					// it still tells when output resumed.
					done, k.FailoverInexact = w.CoveredAt, true
				}
				if !done.IsZero() {
					k.Failover = done.Sub(at)
				}
				break
			}
		}
		for _, w := range res.Windows {
			// In flight at the kill or join (not complete then), and
			// ending before the handover completed.
			end := w.Start.Add(rescaleWindow)
			inFlight := !w.Complete || w.CompleteAt.After(at)
			if inFlight && (done.IsZero() || end.Before(done)) {
				handover[w.Start.UnixMilli()] = true
				k.Handover++
				if w.Complete {
					k.HandoverComplete++
					k.HandoverMaxSkew = max(k.HandoverMaxSkew, w.Skew)
				}
			}
		}
		return k
	}
	for _, in := range b.instances {
		if !in.startedAt.IsZero() && in.startedAt.After(b.genStart) {
			res.Joins = append(res.Joins, handoverOf(in.n, in.startedAt))
		}
		if !in.killedAt.IsZero() {
			res.Kills = append(res.Kills, handoverOf(in.n, in.killedAt))
		}
	}

	// Phases: the warm-up, then one per distinct step time.
	type bound struct {
		at    time.Duration
		label string
	}
	var bounds []bound
	live, label := 0, ""
	for _, s := range cfg.Plan {
		if s.Kill == 0 {
			live++
			label = fmt.Sprintf("%d instance%s", live, plural(live))
		} else {
			live--
			label = fmt.Sprintf("%d instance%s, after a kill", live, plural(live))
		}
		// Steps at one time (or within the warm-up) make one phase, named
		// after the last of them.
		at := max(s.At, cfg.Warmup)
		if len(bounds) > 0 && bounds[len(bounds)-1].at == at {
			bounds = bounds[:len(bounds)-1]
		}
		bounds = append(bounds, bound{at, label})
	}
	phases := []phaseResult{
		{Label: "priming", From: -time.Hour, To: 0},
		{Label: "warm-up", From: 0, To: cfg.Warmup},
	}
	for i, bd := range bounds {
		to := cfg.Duration
		if i+1 < len(bounds) {
			to = bounds[i+1].at
		}
		if to <= bd.at {
			continue
		}
		phases = append(phases, phaseResult{Label: bd.label, From: bd.at, To: to})
	}
	// The window the generator stops in fires only when the idle inputs'
	// watermark follows the wall clock (source_idle_timeout_ms): its skew
	// is not the pipeline's under load.
	phases = append(phases, phaseResult{Label: "generator stopped", From: cfg.Duration, To: 1<<63 - 1})
	for i := range phases {
		p := &phases[i]
		var skews, steady []time.Duration
		for _, w := range res.Windows {
			end := rel(w.Start.Add(rescaleWindow))
			if !w.Published || end < p.From || end >= p.To {
				continue
			}
			p.Windows++
			p.Elements += w.Elements
			switch {
			case w.Duplicated:
				p.Duplicated++
			case !w.Complete:
				p.Incomplete++
			default:
				p.Complete++
				skews = append(skews, w.Skew)
				if w.Skew > cfg.Late {
					p.Late++
				}
				if handover[w.Start.UnixMilli()] {
					p.HandoverExcluded++
				} else {
					steady = append(steady, w.Skew)
				}
			}
		}
		p.P50, p.P99, p.Max = percentiles(skews)
		p.P50Steady, p.P99Steady, _ = percentiles(steady)
		if b.lag != nil {
			to := b.genStart.Add(min(p.To, 24*time.Hour))
			if lags := b.lag.between(b.genStart.Add(p.From), to); len(lags) > 0 {
				slices.Sort(lags)
				p.LagP50 = float64(lags[len(lags)/2]) / float64(cfg.Rate)
				p.LagMax = float64(lags[len(lags)-1]) / float64(cfg.Rate)
			}
		}
	}
	res.Phases = phases

	fmt.Fprintf(stdout, "windows: %d; complete %d, incomplete %d, duplicated %d, unexpected %d\n",
		len(res.Windows), len(res.Windows)-res.Incomplete-res.Duplicated-res.Unexpected, res.Incomplete, res.Duplicated, res.Unexpected)
	fmt.Fprintf(stdout, "%-34s %7s %8s %10s %4s %9s %9s %9s %5s %9s %9s\n", "phase (window ends)", "windows", "complete", "incomplete", "dup", "skew p50", "p99", "max", "late", "lag p50", "lag max")
	for _, p := range phases {
		to := "end"
		if p.To < time.Duration(1<<63-1) {
			to = fmt.Sprintf("%.0fs", p.To.Seconds())
		}
		from := fmt.Sprintf("%.0fs", p.From.Seconds())
		if p.From < 0 {
			from = "start"
		}
		fmt.Fprintf(stdout, "%-34s %7d %8d %10d %4d %9s %9s %9s %5d %8.2fs %8.2fs\n", fmt.Sprintf("%s [%s, %s)", p.Label, from, to),
			p.Windows, p.Complete, p.Incomplete, p.Duplicated, secs(p.P50), secs(p.P99), secs(p.Max), p.Late, p.LagP50, p.LagMax)
		if p.HandoverExcluded > 0 && p.HandoverExcluded < p.Complete {
			fmt.Fprintf(stdout, "%-34s %7s %8d %10s %4s %9s %9s\n", "  without the handover windows", "", p.Complete-p.HandoverExcluded, "", "", secs(p.P50Steady), secs(p.P99Steady))
		}
	}
	for _, k := range res.Kills {
		fo := "never (the first window after it did not complete)"
		if k.Failover >= 0 {
			fo = secs(k.Failover)
		}
		if k.FailoverInexact {
			fo += " (that window was not exact: up to when each of its keys had a result)"
		}
		fmt.Fprintf(stdout, "kill of instance %d at %+.1fs: failover %s (to the completion of the first window starting after the kill); %d handover windows (in flight at the kill, ending before then), %d complete, skew up to %s\n",
			k.Instance, k.At.Seconds(), fo, k.Handover, k.HandoverComplete, secs(k.HandoverMaxSkew))
	}
	for _, k := range res.Joins {
		ho := "never (the first window after it did not complete)"
		if k.Failover >= 0 {
			ho = secs(k.Failover)
		}
		fmt.Fprintf(stdout, "join of instance %d at %+.1fs: handover %s (to the completion of the first window starting after its start); %d handover windows (in flight at its start, ending before then), %d complete, skew up to %s\n",
			k.Instance, k.At.Seconds(), ho, k.Handover, k.HandoverComplete, secs(k.HandoverMaxSkew))
	}
	for _, w := range res.Windows {
		if w.Published && (w.Duplicated || !w.Complete) {
			fmt.Fprintf(stdout, "  window %s (%+.0fs): %d keys, %d without a result, %d with a wrong first result; keys with several results: %d adding up to the count (fired in several panes), %d repeating it (written twice)\n",
				w.Start.UTC().Format("15:04:05"), rel(w.Start).Seconds(), w.Keys, w.Missing, w.Wrong, w.Split, w.Repeated)
		} else if !w.Published {
			fmt.Fprintf(stdout, "  window %s (%+.0fs): results, but nothing was produced in it\n", w.Start.UTC().Format("15:04:05"), rel(w.Start).Seconds())
		}
	}
	fmt.Fprintf(stdout, "lag: the group's committed offsets behind the input's end, sampled each second, in seconds of input at %d records/s\n", cfg.Rate)
	fmt.Fprintf(stdout, "produce latency (record made to acked by the broker): p50 %s, p99 %s, max %s\n",
		secs(b.produceLatency.quantile(0.5)), secs(b.produceLatency.quantile(0.99)), secs(b.produceLatency.quantile(1)))
	genSecs := cfg.Duration.Seconds()
	for _, w := range res.Windows {
		if w.Published && !w.Start.Before(b.genStart) && !w.Start.Add(rescaleWindow).After(b.genStart.Add(cfg.Duration)) {
			fullWindows++
		}
	}
	fmt.Fprintf(stdout, "sustained: %.0f elements/s produced (target %d); %.0f elements/s in the %d complete windows wholly at full rate (of %d)\n",
		res.GenRate, cfg.Rate, float64(counted)/max(float64(fullComplete), 1)/rescaleWindow.Seconds(), fullComplete, fullWindows)
	cpu := fmt.Sprintf("CPU: this process %.1fs (generator, checker", benchCPU.Seconds())
	if b.embedded {
		cpu += ", embedded broker"
	}
	cpu += ")"
	for _, in := range b.instances {
		cpu += fmt.Sprintf(", instance %d %.1fs + its SDK workers %.1fs", in.n, in.proc.cpu().Seconds(), in.pool.cpu().Seconds())
	}
	fmt.Fprintf(stdout, "%s over %.0fs of generation\n", cpu, genSecs)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// percentiles are the p50, p99 and max of ds (zero if empty).
func percentiles(ds []time.Duration) (p50, p99, mx time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)*99/100, len(s)-1)], s[len(s)-1]
}
