package harness_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/harness"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startHarness starts a harness and its environment "go", a PROCESS worker
// (processEnv).
func startHarness(t testing.TB, cfg harness.Config) *harness.Harness {
	t.Helper()
	return startHarnessEnv(t, cfg, processEnv(t))
}

// startHarnessEnv is startHarness with the environment env. Make env before
// the call (as an argument does): cleanups run last-in first-out, and a
// LOOPBACK worker pool must outlive the harness.
func startHarnessEnv(t testing.TB, cfg harness.Config, env *pipepb.Environment) *harness.Harness {
	t.Helper()
	if cfg.JobID == "" {
		cfg.JobID = "job-" + strings.ReplaceAll(t.Name(), "/", "_")
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ctx := context.Background()
	h, err := harness.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := h.StartEnvironment(ctx, "go", env); err != nil {
		t.Fatalf("StartEnvironment: %v", err)
	}
	return h
}

func numbered(prefix string, n int) [][]byte {
	elems := make([][]byte, n)
	for i := range elems {
		elems[i] = fmt.Appendf(nil, "%s%06d", prefix, i)
	}
	return elems
}

func asStrings(elems [][]byte) []string {
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = string(e)
	}
	return out
}

func TestRoundTripBigBatches(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStage(t, echoFn, 1)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	// Several bundles on one stage: the descriptor is registered once and
	// reused.
	for round := range 2 {
		c := newCollector(t)
		b, err := stage.StartBundle(ctx, c.emit)
		if err != nil {
			t.Fatalf("StartBundle: %v", err)
		}
		var want []string
		// 50k elements in batches of 10k, and one batch above
		// MaxDataChunk, which Process sends whole.
		for batch := range 5 {
			elems := numbered(fmt.Sprintf("r%d-b%d-", round, batch), 10_000)
			want = append(want, asStrings(elems)...)
			if err := b.Process(encodeElements(t, elems...)); err != nil {
				t.Fatalf("Process: %v", err)
			}
		}
		big := numbered(fmt.Sprintf("r%d-big-%s-", round, strings.Repeat("x", 200)), 25_000)
		if data := encodeElements(t, big...); len(data) <= harness.MaxDataChunk {
			t.Fatalf("big batch is only %d bytes", len(data))
		}
		want = append(want, asStrings(big)...)
		if err := b.Process(encodeElements(t, big...)); err != nil {
			t.Fatalf("Process: %v", err)
		}
		res, err := b.Finish()
		if err != nil {
			t.Fatalf("Finish: %v", err)
		}
		if got := c.elements(spec.order[0]); !slices.Equal(got, want) {
			t.Fatalf("round %d: got %d elements, want %d (first got %q)", round, len(got), len(want), first(got))
		}
		if len(res.MonitoringInfos) == 0 {
			t.Errorf("no monitoring infos")
		}
		if !hasElementCount(res.MonitoringInfos, len(want)) {
			t.Errorf("no element count of %d among %d monitoring infos", len(want), len(res.MonitoringInfos))
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return "<none>"
	}
	return s[0]
}

// hasElementCount looks for a beam:metric:element_count:v1 of n.
func hasElementCount(mis []*pipepb.MonitoringInfo, n int) bool {
	for _, mi := range mis {
		if mi.GetUrn() != "beam:metric:element_count:v1" {
			continue
		}
		// beam:coder:varint:v1 payload.
		var v, shift uint64
		for _, b := range mi.GetPayload() {
			v |= uint64(b&0x7f) << shift
			shift += 7
			if b < 0x80 {
				break
			}
		}
		if int(v) == n {
			return true
		}
	}
	return false
}

func TestProcessElementsNeverSplitsElements(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStage(t, echoFn, 1)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	c := newCollector(t)
	b, err := stage.StartBundle(ctx, c.emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	var elems [][]byte
	var want []string
	for i := range 5 {
		e := fmt.Appendf(nil, "%d%s", i, strings.Repeat("y", 1<<20+i)) // ~1MiB each: packs 3 per message
		want = append(want, string(e))
		elems = append(elems, encodeElements(t, e))
	}
	if err := b.ProcessElements(elems); err != nil {
		t.Fatalf("ProcessElements: %v", err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := c.elements(spec.order[0]); !slices.Equal(got, want) {
		t.Fatalf("got %d elements, want %d", len(got), len(want))
	}
}

func TestMultipleOutputs(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStage(t, splitFn, 2)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	c := newCollector(t)
	b, err := stage.StartBundle(ctx, c.emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	as, others := numbered("a", 1000), numbered("z", 500)
	if err := b.Process(encodeElements(t, slices.Concat(as, others)...)); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := c.elements(spec.order[0]); !slices.Equal(got, asStrings(as)) {
		t.Errorf("first output: got %d elements, want %d", len(got), len(as))
	}
	if got := c.elements(spec.order[1]); !slices.Equal(got, asStrings(others)) {
		t.Errorf("second output: got %d elements, want %d", len(got), len(others))
	}
}

func TestDoFnPanicSurfacesFromFinish(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStage(t, panicFn, 1)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	b, err := stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	// Process may already fail if the SDK answered first; Finish must.
	_ = b.Process(encodeElements(t, []byte("fine"), []byte("boom"), []byte("never")))
	_, err = b.Finish()
	if err == nil {
		t.Fatal("Finish succeeded; want the DoFn's panic")
	}
	var sdkErr *harness.SDKError
	if !errors.As(err, &sdkErr) {
		t.Errorf("error %v is not an SDKError", err)
	}
	for _, want := range []string{"panicFn exploded on purpose", stage.ID(), b.ID()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}

	// The worker survives a failed bundle.
	c := newCollector(t)
	b2, err := stage.StartBundle(ctx, c.emit)
	if err != nil {
		t.Fatalf("StartBundle after failure: %v", err)
	}
	if err := b2.Process(encodeElements(t, []byte("ok"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b2.Finish(); err != nil {
		t.Fatalf("Finish after failure: %v", err)
	}
	if got := c.elements(spec.order[0]); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("got %q", got)
	}
}

func TestEmitErrorFailsBundle(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStage(t, echoFn, 1)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	sentinel := errors.New("host store is full")
	b, err := stage.StartBundle(ctx, func(string, []byte) error { return sentinel })
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	_ = b.Process(encodeElements(t, numbered("e", 100)...))
	if _, err := b.Finish(); !errors.Is(err, sentinel) {
		t.Fatalf("Finish: got %v, want %v", err, sentinel)
	}
	// The SDK's side of the failed bundle was told its input ended, so the
	// worker still serves bundles.
	c := newCollector(t)
	b2, err := stage.StartBundle(ctx, c.emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := b2.Process(encodeElements(t, []byte("after"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b2.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

func TestConcurrentBundles(t *testing.T) {
	h := startHarness(t, harness.Config{})
	ctx := context.Background()
	echo := buildStage(t, echoFn, 1)
	split := buildStage(t, splitFn, 2)
	echoStage, err := h.Stage(ctx, "go", echo.desc, echo.input, echo.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	splitStage, err := h.Stage(ctx, "go", split.desc, split.input, split.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Go(func() {
			prefix := fmt.Sprintf("a%d-", i) // splitFn routes these to its first output
			stage, spec := echoStage, echo
			if i%2 == 1 {
				stage, spec = splitStage, split
			}
			c := newCollector(t)
			b, err := stage.StartBundle(ctx, c.emit)
			if err != nil {
				errs <- err
				return
			}
			var want []string
			for batch := range 5 {
				elems := numbered(fmt.Sprintf("%s%d-", prefix, batch), 5000)
				want = append(want, asStrings(elems)...)
				if err := b.Process(encodeElements(t, elems...)); err != nil {
					errs <- err
					return
				}
			}
			if _, err := b.Finish(); err != nil {
				errs <- err
				return
			}
			if got := c.elements(spec.order[0]); !slices.Equal(got, want) {
				errs <- fmt.Errorf("bundle %d: got %d elements, want %d", i, len(got), len(want))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestBundleContextCancel(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStage(t, echoFn, 1)
	stage, err := h.Stage(context.Background(), "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	b, err := stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := b.Process(encodeElements(t, []byte("x"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	cause := errors.New("task revoked")
	cancel(cause)
	if err := b.Process(encodeElements(t, []byte("y"))); !errors.Is(err, cause) {
		t.Errorf("Process after cancel: got %v, want %v", err, cause)
	}
	if _, err := b.Finish(); !errors.Is(err, cause) {
		t.Errorf("Finish after cancel: got %v, want %v", err, cause)
	}
	// The worker is still usable.
	c := newCollector(t)
	b2, err := stage.StartBundle(context.Background(), c.emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := b2.Process(encodeElements(t, []byte("z"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b2.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

func TestLogsReachOnLog(t *testing.T) {
	var mu sync.Mutex
	var messages []string
	h := startHarness(t, harness.Config{OnLog: func(e *fnpb.LogEntry) {
		mu.Lock()
		messages = append(messages, e.GetMessage())
		mu.Unlock()
	}})
	spec := buildStage(t, logFn, 1)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	b, err := stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := b.Process(encodeElements(t, []byte("hello-log"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	// The SDK sends logs asynchronously on their own stream: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		found := slices.ContainsFunc(messages, func(m string) bool { return strings.Contains(m, "logFn saw hello-log") })
		mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DoFn's log entry never reached OnLog; got %q", messages)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCloseStopsWorkerAndGoroutines(t *testing.T) {
	ctx := context.Background()
	h, err := harness.Start(ctx, harness.Config{JobID: "close", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	env, workerPID := processEnvWithPID(t)
	if err := h.StartEnvironment(ctx, "go", env); err != nil {
		t.Fatalf("StartEnvironment: %v", err)
	}
	worker, err := os.FindProcess(workerPID())
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Release()
	spec := buildStage(t, stuckFn, 1)
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	// A bundle in flight when Close is called fails with ErrClosed rather
	// than hanging, even though its DoFn never returns.
	b, err := stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := b.Process(encodeElements(t, []byte("block"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	finished := make(chan error, 1)
	go func() {
		_, err := b.Finish()
		finished <- err
	}()
	if err := worker.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("worker process %d is not running before Close: %v", worker.Pid, err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// Close has stopped the stuck worker: its process has exited and been
	// waited for (a zombie would still take the signal).
	if err := worker.Signal(syscall.Signal(0)); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("worker process %d after Close: signalling it got %v, want %v", worker.Pid, err, os.ErrProcessDone)
	}
	if err := <-finished; !errors.Is(err, harness.ErrClosed) {
		t.Errorf("in-flight bundle: got %v, want ErrClosed", err)
	}
	checkNoHarnessGoroutines(t)

	if err := h.StartEnvironment(ctx, "other", processEnv(t)); !errors.Is(err, harness.ErrClosed) {
		t.Errorf("StartEnvironment after Close: got %v, want ErrClosed", err)
	}
	if _, err := stage.StartBundle(ctx, newCollector(t).emit); err == nil {
		t.Errorf("StartBundle after Close succeeded")
	}
}

func TestDockerRefused(t *testing.T) {
	h, err := harness.Start(context.Background(), harness.Config{JobID: "docker", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	payload, _ := proto.Marshal(&pipepb.DockerPayload{ContainerImage: "apache/beam_go_sdk:2.77.0"})
	err = h.StartEnvironment(context.Background(), "env-docker-1", &pipepb.Environment{Urn: harness.URNEnvDocker, Payload: payload})
	if err == nil {
		t.Fatal("docker environment started")
	}
	for _, want := range []string{"env-docker-1", "Docker is not available"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	err = h.StartEnvironment(context.Background(), "env-x", &pipepb.Environment{Urn: "beam:env:teleport:v1"})
	if err == nil || !strings.Contains(err.Error(), "env-x") || !strings.Contains(err.Error(), "beam:env:teleport:v1") {
		t.Errorf("unknown URN: got %v, want an error naming env-x and the URN", err)
	}
}

func TestStartEnvironmentIdempotent(t *testing.T) {
	env := processEnv(t)
	h := startHarnessEnv(t, harness.Config{}, env)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := h.StartEnvironment(context.Background(), "go", env); err != nil {
				t.Errorf("StartEnvironment again: %v", err)
			}
		})
	}
	wg.Wait()
	if _, err := h.Stage(context.Background(), "nope", buildStage(t, echoFn, 1).desc, "source", nil); err == nil ||
		!strings.Contains(err.Error(), "not started") {
		t.Errorf("Stage on unknown environment: got %v", err)
	}
}

func TestStageValidation(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStage(t, splitFn, 2)
	ctx := context.Background()
	if _, err := h.Stage(ctx, "go", spec.desc, "no-such-source", spec.outputs); err == nil || !strings.Contains(err.Error(), "no-such-source") {
		t.Errorf("unknown input: got %v", err)
	}
	partial := map[string]string{}
	for k, v := range spec.outputs {
		partial[k] = v
		break
	}
	if _, err := h.Stage(ctx, "go", spec.desc, spec.input, partial); err == nil || !strings.Contains(err.Error(), "has no PCollection") {
		t.Errorf("missing output: got %v", err)
	}
}

func TestProcessEnvironmentThatNeverConnects(t *testing.T) {
	h, err := harness.Start(context.Background(), harness.Config{JobID: "timeout", Logger: quietLogger(), ConnectTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	script := filepath.Join(t.TempDir(), "idle.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	payload, _ := proto.Marshal(&pipepb.ProcessPayload{Command: script})
	start := time.Now()
	err = h.StartEnvironment(context.Background(), "idle", &pipepb.Environment{Urn: harness.URNEnvProcess, Payload: payload})
	if err == nil || !strings.Contains(err.Error(), "did not connect") || !strings.Contains(err.Error(), "idle") {
		t.Errorf("got %v, want an error saying the worker of environment idle did not connect", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("StartEnvironment took %v; the idle process was not killed promptly", d)
	}

	// A command that exits at once is reported as exiting, not as a timeout.
	payload, _ = proto.Marshal(&pipepb.ProcessPayload{Command: "/bin/false"})
	err = h.StartEnvironment(context.Background(), "false", &pipepb.Environment{Urn: harness.URNEnvProcess, Payload: payload})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("process that exits: got %v, want an error saying it exited", err)
	}
}

// TestNoProcessEnvironments: with PROCESS environments off, the harness
// runs no command, alone or as an ANYOF alternative, and says which
// environment it refused.
func TestNoProcessEnvironments(t *testing.T) {
	h, err := harness.Start(context.Background(), harness.Config{JobID: "noproc", Logger: quietLogger(), NoProcessEnvironments: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "touch.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	payload, _ := proto.Marshal(&pipepb.ProcessPayload{Command: script})
	process := &pipepb.Environment{Urn: harness.URNEnvProcess, Payload: payload}
	err = h.StartEnvironment(context.Background(), "proc", process)
	if err == nil || !strings.Contains(err.Error(), `environment "proc" is a PROCESS environment`) || !strings.Contains(err.Error(), "allow_process_environments") {
		t.Errorf("PROCESS: got %v, want a refusal naming the environment", err)
	}
	anyOf, _ := proto.Marshal(&pipepb.AnyOfEnvironmentPayload{Environments: []*pipepb.Environment{process}})
	err = h.StartEnvironment(context.Background(), "any", &pipepb.Environment{Urn: harness.URNEnvAnyOf, Payload: anyOf})
	if err == nil || !strings.Contains(err.Error(), `environment "any"`) || !strings.Contains(err.Error(), "allow_process_environments") {
		t.Errorf("ANYOF of a PROCESS: got %v, want a refusal naming the environment", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the PROCESS command ran")
	}
}

// TestProcessEnvironment runs this test binary as a PROCESS environment: a
// real Go SDK harness in its own process, started with the boot flags.
func TestProcessEnvironment(t *testing.T) {
	ctx := context.Background()
	h, err := harness.Start(ctx, harness.Config{JobID: "process", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.StartEnvironment(ctx, "proc", processEnv(t)); err != nil {
		t.Fatalf("StartEnvironment: %v", err)
	}
	spec := buildStage(t, echoFn, 1)
	stage, err := h.Stage(ctx, "proc", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	c := newCollector(t)
	b, err := stage.StartBundle(ctx, c.emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	elems := numbered("p", 10_000)
	if err := b.Process(encodeElements(t, elems...)); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := c.elements(spec.order[0]); !slices.Equal(got, asStrings(elems)) {
		t.Fatalf("got %d elements, want %d", len(got), len(elems))
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	checkNoHarnessGoroutines(t)
}
