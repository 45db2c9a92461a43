package host_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/wasmabi/wasmtest"
)

var (
	env    *jobtest.Env
	broker *host.EmbeddedBroker
	// onStuck is the stuck-bundle policy of the test in progress.
	onStuck atomic.Pointer[func(msg string)]
)

func TestMain(m *testing.M) {
	flag.Parse()
	beam.Init()
	var err error
	if broker, err = host.StartEmbeddedBroker(0); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		os.Exit(1)
	}
	opts := host.DefaultOptions()
	opts.BootstrapServers = broker.Bootstrap()
	if env, err = jobtest.Start(opts, host.WithStuckBundlePolicy(func(msg string) {
		if f := onStuck.Load(); f != nil {
			(*f)(msg)
		}
	})); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		os.Exit(1)
	}
	code := m.Run()
	env.Close()
	broker.Close()
	os.Exit(code)
}

func init() {
	register.Function1x1(passThrough)
	register.Function1x0(drop)
}

// passThrough is the Go version of the WASM DoFns the tests map it to.
func passThrough(s string) string { return s }
func drop(string)                 {}

// faultPipeline is Create(elems) -> Faulty/host_test.passThrough -> a
// harness ParDo.
func faultPipeline(t *testing.T, elems ...string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	out := beam.ParDo(s.Scope("Faulty"), passThrough, beam.CreateList(s, elems))
	beam.ParDo0(s, drop, out)
	return p
}

var guest struct {
	once sync.Once
	path string
	dir  string
}

// testGuest builds wasmabi's test module (a DoFn per fault) once.
func testGuest(t *testing.T) string {
	guest.once.Do(func() {
		dir, err := os.MkdirTemp("", "host-wasm-test-")
		if err != nil {
			t.Fatal(err)
		}
		guest.dir = dir
		guest.path = jobtest.BuildWASM(t, dir, "github.com/ksrunner/ksrunner/wasmabi/testdata/guest")
	})
	if guest.path == "" {
		t.Fatal("test guest did not build")
	}
	return guest.path
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestWASMSubmissionErrors: a bad stage_wasm fails the job at submission,
// with an error naming the cause.
func TestWASMSubmissionErrors(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	mod := testGuest(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := write("v2.wasm", wasmtest.RawModule(2, nil))
	noProcess := write("noprocess.wasm", wasmtest.RawModule(1, nil, "ksr_process"))
	junk := write("junk.wasm", []byte("not wasm"))
	for _, c := range []struct{ name, stageWASM, want string }{
		{"syntax", "Faulty", "option stage_wasm: \"Faulty\": want PATTERN=MODULE[#DOFN]"},
		{"bad glob", "Faulty/[=x.wasm", "bad pattern"},
		{"no match", "Nothing*=" + mod + "#Upper", "\"Nothing*=" + mod + "#Upper\" matches no transform that runs as a WASM DoFn"},
		{"no match of a non-ParDo", "Faulty/*=" + mod + "#Upper,Impulse=" + mod, "matches no transform"},
		{"missing file", "Faulty/*=/nonexistent/m.wasm", "module /nonexistent/m.wasm: open /nonexistent/m.wasm: no such file or directory"},
		{"file URL missing", "Faulty/*=file:///nonexistent/m.wasm", "no such file or directory"},
		{"no artifact", "Faulty/*=artifact:m.wasm", "no artifact staged as \"m.wasm\""},
		{"not wasm", "Faulty/*=" + junk, "module junk.wasm: compile"},
		{"ABI version", "Faulty/*=" + v2, "module v2.wasm: module does not implement the ABI: exports ABI version 2, host supports 1"},
		{"missing export", "Faulty/*=" + noProcess, "module noprocess.wasm: module does not implement the ABI: missing export ksr_process"},
		{"unknown DoFn", "Faulty/*=" + mod + "#Nope", "no DoFn registered as \"Nope\""},
		{"default DoFn name", "Faulty/*=" + mod, "no DoFn registered as \"host_test.passThrough\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := env.Submit(ctx, t, env.Marshal(t, faultPipeline(t, "a")), map[string]string{"stage_wasm": c.stageWASM})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("submit: %v\nwant an error containing %q", err, c.want)
			}
		})
	}
}

// TestWASMFaults: a failing guest fails its job with the module's message
// and no commit of the failed input; the process and other jobs go on.
func TestWASMFaults(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	mod := testGuest(t)
	for _, c := range []struct {
		name, dofn string
		opts       map[string]string
		want       []string
	}{
		{"error", "Fail", nil, []string{"module guest.wasm", "DoFn failed", "(DoFn Fail): bad element: bad"}},
		{"panic", "Panic", nil, []string{"module guest.wasm", "DoFn panicked", "(DoFn Panic): panic: boom on bad"}},
		{"nil dereference", "NilDeref", nil, []string{"DoFn panicked", "nil pointer dereference"}},
		{"trap", "Fatal", nil, []string{"module guest.wasm", "module trapped", "fatal on another goroutine"}},
		{"memory", "Hog", map[string]string{"wasm_memory_limit_mb": "64"}, []string{"module guest.wasm, stage stage-", "module trapped", "out of memory"}},
		{"infinite loop, interruptible by default", "Spin", map[string]string{"wasm_bundle_deadline": "1s"},
			[]string{"module guest.wasm", "bundle deadline exceeded (1s): guest interrupted"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			app := "wasm-fault-" + strings.ToLower(c.dofn)
			opts := map[string]string{"stage_wasm": "Faulty/*=" + mod + "#" + c.dofn, "application_id": app}
			for k, v := range c.opts {
				opts[k] = v
			}
			id, r := env.Run(ctx, t, env.Marshal(t, faultPipeline(t, "a", "b", "bad", "c")), opts)
			if r.State != jobpb.JobState_FAILED {
				t.Fatalf("job %s ended %v, want FAILED", id, r.State)
			}
			msg := strings.Join(r.Errors, "\n")
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("job errors %q\nwant them to contain %q", msg, w)
				}
			}
			checkUncommitted(ctx, t, app)
		})
	}
	// The process survived every fault: a healthy WASM job still runs.
	id, r := env.Run(ctx, t, env.Marshal(t, faultPipeline(t, "a", "bad")), map[string]string{"stage_wasm": "Faulty/*=" + mod + "#Upper"})
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("healthy job %s ended %v: %q", id, r.State, r.Errors)
	}
}

// checkUncommitted checks that the failed job's consumer group did not
// commit the impulse that fed the failing stage: its input is not lost, a
// new run would process it again.
func checkUncommitted(ctx context.Context, t *testing.T, group string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(broker.Bootstrap(), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetching offsets of group %s: %v", group, err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if strings.HasSuffix(o.Topic, "impulse-0") && o.At > 0 {
			t.Errorf("group %s committed %s/%d up to %d: the failed stage's input was committed", group, o.Topic, o.Partition, o.At)
		}
	})
}

// TestWASMWatchdog: a non-interruptible bundle past wasm_bundle_deadline
// makes the host log the stage and module and exit (here: report).
func TestWASMWatchdog(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	mod := testGuest(t)
	stuck := make(chan string, 1)
	report := func(msg string) { stuck <- msg }
	onStuck.Store(&report)
	defer onStuck.Store(nil)
	id, r := env.Run(ctx, t, env.Marshal(t, faultPipeline(t, "3s")), map[string]string{
		"stage_wasm": "Faulty/*=" + mod + "#Sleepy", "wasm_bundle_deadline": "500ms", "wasm_interruptible": "false",
	})
	select {
	case msg := <-stuck:
		for _, w := range []string{"stage stage-", "WASM module guest.wasm", "past wasm_bundle_deadline (500ms)", "the process exits"} {
			if !strings.Contains(msg, w) {
				t.Errorf("stuck message %q does not contain %q", msg, w)
			}
		}
	default:
		t.Errorf("the watchdog did not report the stuck bundle")
	}
	// Here the process did not exit, and the bundle returned late: it fails.
	if r.State != jobpb.JobState_FAILED || !strings.Contains(strings.Join(r.Errors, "\n"), "bundle deadline exceeded") {
		t.Errorf("job %s ended %v with %q, want FAILED with a deadline error", id, r.State, r.Errors)
	}
}

// TestWASMMemoryLimit: a guest growing past wasm_memory_limit_mb fails its
// job with "out of memory", naming the module and the stage, and the memory
// it held is given back: the server's RSS returns to within 100 MB of where
// it was before the job, though the guest had made hundreds of MB resident.
func TestWASMMemoryLimit(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc/self/status:", err)
	}
	ctx := testContext(t, 3*time.Minute)
	mod := testGuest(t)
	const limitMB = 512
	opts := map[string]string{"stage_wasm": "Faulty/*=" + mod + "#Hog", "wasm_memory_limit_mb": strconv.Itoa(limitMB)}
	// A healthy run of the same job first, so that the baseline includes
	// what any WASM job leaves behind (compilation cache, pools).
	if id, r := env.Run(ctx, t, env.Marshal(t, faultPipeline(t, "a")), opts); r.State != jobpb.JobState_DONE {
		t.Fatalf("healthy job %s ended %v: %q", id, r.State, r.Errors)
	}
	before := residentMB(t, "VmRSS")
	// Reset the peak (VmHWM) so that it measures the failing job.
	peakReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil

	id, r := env.Run(ctx, t, env.Marshal(t, faultPipeline(t, "a", "bad", "c")), opts)
	if r.State != jobpb.JobState_FAILED {
		t.Fatalf("job %s ended %v, want FAILED", id, r.State)
	}
	msg := strings.Join(r.Errors, "\n")
	for _, w := range []string{"module guest.wasm, stage stage-", "module trapped", "out of memory"} {
		if !strings.Contains(msg, w) {
			t.Errorf("job errors %q\nwant them to contain %q", msg, w)
		}
	}
	after := residentMB(t, "VmRSS")
	t.Logf("RSS before the job %d MB, after %d MB", before, after)
	if peakReset {
		peak := residentMB(t, "VmHWM")
		t.Logf("peak RSS during the job %d MB", peak)
		if peak-before < limitMB/2 {
			t.Errorf("peak RSS %d MB, baseline %d MB: the guest did not make its memory resident, the test shows nothing", peak, before)
		}
	}
	if after-before > 100 {
		t.Errorf("RSS %d MB after the job, %d MB before: the guest's memory was not released", after, before)
	}
}

// residentMB returns a field of /proc/self/status (VmRSS, VmHWM) in MB,
// after a garbage collection that returns freed memory to the OS.
func residentMB(t *testing.T, field string) int {
	t.Helper()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("/proc/self/status %s: %v", line, err)
			}
			return kb >> 10
		}
	}
	t.Fatalf("/proc/self/status has no %s", field)
	return 0
}

// TestWASMPipelineOptions: how pipelines set stage_wasm and the WASM
// options: a Go SDK pipeline sends its flags (and beam.PipelineOptions.Set
// values) as strings under beam:option:go_options:v1; Python and Java send
// list values under beam:option:<name>:v1.
func TestWASMPipelineOptions(t *testing.T) {
	def := host.DefaultOptions()
	def.StageWASM = []string{"Server=/s.wasm"}
	goOpts, err := structpb.NewStruct(map[string]any{"beam:option:go_options:v1": map[string]any{"options": map[string]any{
		"stage_wasm": "A*=/a.wasm#F,B=/b.wasm", "wasm_interruptible": "false", "wasm_bundle_deadline": "45s",
		"wasm_memory_limit_mb": "64",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := def.WithPipelineOptions(goOpts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.StageWASM, []string{"A*=/a.wasm#F", "B=/b.wasm"}) || o.WASMInterruptible || o.WASMBundleDeadline != 45*time.Second || o.WASMMemoryLimitMB != 64 {
		t.Errorf("Go options: %q %v %v %v", o.StageWASM, o.WASMInterruptible, o.WASMBundleDeadline, o.WASMMemoryLimitMB)
	}
	if !def.WASMInterruptible || def.WASMMemoryLimitMB != 256 {
		t.Errorf("defaults: wasm_interruptible %v, wasm_memory_limit_mb %d", def.WASMInterruptible, def.WASMMemoryLimitMB)
	}
	pyOpts, _ := structpb.NewStruct(map[string]any{"beam:option:stage_wasm:v1": []any{"P=/p.wasm", "Q=/q.wasm"}})
	if o, err = def.WithPipelineOptions(pyOpts); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.StageWASM, []string{"P=/p.wasm", "Q=/q.wasm"}) {
		t.Errorf("list option: %q", o.StageWASM)
	}
	if o, _ = def.WithPipelineOptions(nil); !slices.Equal(o.StageWASM, def.StageWASM) {
		t.Errorf("server default: %q", o.StageWASM)
	}
	for v, want := range map[[2]string]string{
		{"wasm_bundle_deadline", "soon"}:  `pipeline option wasm_bundle_deadline: "soon" is not a duration`,
		{"wasm_bundle_deadline", "-1s"}:   "pipeline option wasm_bundle_deadline: -1s, must not be negative",
		{"wasm_memory_limit_mb", "lots"}:  `pipeline option wasm_memory_limit_mb: "lots" is not an integer`,
		{"wasm_memory_limit_mb", "0"}:     "pipeline option wasm_memory_limit_mb: 0, must be 1 to 4096",
		{"wasm_memory_limit_mb", "4097"}:  "pipeline option wasm_memory_limit_mb: 4097, must be 1 to 4096",
		{"wasm_interruptible", "perhaps"}: `pipeline option wasm_interruptible: "perhaps" is not a boolean`,
	} {
		bad, _ := structpb.NewStruct(map[string]any{"beam:option:go_options:v1": map[string]any{"options": map[string]any{v[0]: v[1]}}})
		if _, err := def.WithPipelineOptions(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: %v, want an error containing %q", v[0], v[1], err, want)
		}
	}
}
