package harness_test

// Helpers that run the real Go SDK harness against the runner side: DoFns,
// descriptors built from Go SDK pipelines, element encoding, and the
// TestMain hook that lets this test binary act as a PROCESS environment.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	sdkharness "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/harness"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/hooks"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/grpcx"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/harness"
)

// workerModeEnv makes this test binary run as an SDK worker (processEnv
// points a PROCESS environment's command at the test binary itself).
const workerModeEnv = "KSRUNNER_HARNESS_TEST_WORKER"

// workerPIDFileEnv names the file a test worker writes its process id to
// before it connects.
const workerPIDFileEnv = "KSRUNNER_HARNESS_TEST_WORKER_PID_FILE"

func TestMain(m *testing.M) {
	// A Go SDK program does this when it submits a job (the universal
	// runner); without it the in-process SDK harness enables no hooks, so
	// its logs would not go to the logging service.
	hooks.SerializeHooksToOptions()
	if os.Getenv(workerModeEnv) == "1" {
		os.Exit(runWorker())
	}
	os.Exit(m.Run())
}

// runWorker implements the Beam boot contract's flags for the Go SDK
// harness, as a container's boot program would after provisioning.
func runWorker() int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	id := fs.String("id", "", "worker id")
	control := fs.String("control_endpoint", "", "")
	logging := fs.String("logging_endpoint", "", "")
	fs.String("artifact_endpoint", "", "")
	fs.String("provision_endpoint", "", "")
	if err := fs.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *id == "" || *control == "" || *logging == "" {
		fmt.Fprintln(os.Stderr, "missing --id, --control_endpoint or --logging_endpoint")
		return 2
	}
	if f := os.Getenv(workerPIDFileEnv); f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	fmt.Println("test worker", *id, "starting")
	ctx := grpcx.WriteWorkerID(context.Background(), *id)
	if err := sdkharness.MainWithOptions(ctx, *logging, *control, sdkharness.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "worker failed:", err)
		return 1
	}
	return 0
}

func init() {
	register.Function3x0(echoFn)
	register.Function4x0(splitFn)
	register.Function3x0(panicFn)
	register.Function3x0(logFn)
	register.Function3x0(stuckFn)
	register.Emitter1[[]byte]()
}

// echoFn is the identity.
func echoFn(_ context.Context, elem []byte, emit func([]byte)) { emit(elem) }

// splitFn sends elements starting with "a" to its first output, the rest to
// its second.
func splitFn(_ context.Context, elem []byte, a, other func([]byte)) {
	if bytes.HasPrefix(elem, []byte("a")) {
		a(elem)
	} else {
		other(elem)
	}
}

// panicFn panics on "boom".
func panicFn(_ context.Context, elem []byte, emit func([]byte)) {
	if string(elem) == "boom" {
		panic("panicFn exploded on purpose")
	}
	emit(elem)
}

// logFn logs every element through the SDK's logging.
func logFn(ctx context.Context, elem []byte, emit func([]byte)) {
	log.Infof(ctx, "logFn saw %s", elem)
	emit(elem)
}

// stuckFn never returns from "block": only for PROCESS environments, whose
// worker the harness kills.
func stuckFn(_ context.Context, elem []byte, emit func([]byte)) {
	if string(elem) == "block" {
		select {}
	}
	emit(elem)
}

// stageSpec is a descriptor made from a Go SDK pipeline: data source ->
// ParDo(fn) -> one data sink per ParDo output.
type stageSpec struct {
	desc    *fnpb.ProcessBundleDescriptor
	input   string            // data source transform id
	outputs map[string]string // data sink transform id -> PCollection id
	order   []string          // output PCollection ids, in ParDo output order
}

// buildStage marshals Impulse -> ParDo(fn) with the Go SDK and keeps the
// ParDo, replacing the impulse with a data source and the consumers of its
// outputs with data sinks, as the translate package would for a fused stage.
func buildStage(t testing.TB, fn any, outputs int) stageSpec {
	t.Helper()
	return buildStageFrom(t, func(s beam.Scope, imp beam.PCollection) {
		switch outputs {
		case 1:
			beam.ParDo(s, fn, imp)
		case 2:
			beam.ParDo2(s, fn, imp)
		default:
			t.Fatalf("buildStage: %d outputs not supported", outputs)
		}
	})
}

// buildStageFrom is buildStage for a pipeline where apply adds the one
// ParDo to an impulse output. Side inputs of the ParDo are left to the
// state API.
func buildStageFrom(t testing.TB, apply func(s beam.Scope, imp beam.PCollection)) stageSpec {
	t.Helper()
	return buildStageWhere(t, apply, func(*pipepb.PTransform) bool { return true })
}

// buildStageWhere is buildStageFrom for a pipeline with several ParDos:
// the stage keeps the one pick accepts.
func buildStageWhere(t testing.TB, apply func(s beam.Scope, imp beam.PCollection), pick func(*pipepb.PTransform) bool) stageSpec {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	apply(s, beam.Impulse(s))
	edges, _, err := p.Build()
	if err != nil {
		t.Fatalf("building pipeline: %v", err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: harness.URNEnvExternal}})
	if err != nil {
		t.Fatalf("marshalling pipeline: %v", err)
	}
	comps := pipe.GetComponents()
	var pardoID string
	for id, tr := range comps.GetTransforms() {
		if tr.GetSpec().GetUrn() == "beam:transform:pardo:v1" && pick(tr) {
			if pardoID != "" {
				t.Fatalf("several ParDos in marshalled pipeline: %q and %q", pardoID, id)
			}
			pardoID = id
		}
	}
	if pardoID == "" {
		t.Fatalf("no ParDo in marshalled pipeline")
	}
	pardo := comps.GetTransforms()[pardoID]
	var pardoPayload pipepb.ParDoPayload
	if err := proto.Unmarshal(pardo.GetSpec().GetPayload(), &pardoPayload); err != nil {
		t.Fatalf("decoding ParDoPayload: %v", err)
	}
	desc := &fnpb.ProcessBundleDescriptor{
		Id:                  "test-stage",
		Transforms:          map[string]*pipepb.PTransform{pardoID: pardo},
		Pcollections:        map[string]*pipepb.PCollection{},
		WindowingStrategies: comps.GetWindowingStrategies(),
		Coders:              maps.Clone(comps.GetCoders()),
		Environments:        comps.GetEnvironments(),
	}
	// wvCoder adds the windowed-value coder of a PCollection: data ports
	// carry windowed values.
	wvCoder := func(pcollID string) string {
		pc := comps.GetPcollections()[pcollID]
		ws := comps.GetWindowingStrategies()[pc.GetWindowingStrategyId()]
		id := "wv-" + pcollID
		desc.Coders[id] = &pipepb.Coder{
			Spec:              &pipepb.FunctionSpec{Urn: "beam:coder:windowed_value:v1"},
			ComponentCoderIds: []string{pc.GetCoderId(), ws.GetWindowCoderId()},
		}
		desc.Pcollections[pcollID] = pc
		return id
	}
	port := func(coderID string) []byte {
		b, err := proto.Marshal(&fnpb.RemoteGrpcPort{CoderId: coderID})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	spec := stageSpec{desc: desc, input: "source", outputs: map[string]string{}}
	for local, in := range pardo.GetInputs() {
		if _, ok := pardoPayload.GetSideInputs()[local]; ok {
			desc.Pcollections[in] = comps.GetPcollections()[in]
			continue
		}
		desc.Transforms["source"] = &pipepb.PTransform{
			UniqueName: "source",
			Spec:       &pipepb.FunctionSpec{Urn: harness.URNDataSource, Payload: port(wvCoder(in))},
			Outputs:    map[string]string{"o": in},
		}
	}
	for _, local := range slices.Sorted(maps.Keys(pardo.GetOutputs())) {
		out := pardo.GetOutputs()[local]
		sink := "sink-" + local
		desc.Transforms[sink] = &pipepb.PTransform{
			UniqueName: sink,
			Spec:       &pipepb.FunctionSpec{Urn: harness.URNDataSink, Payload: port(wvCoder(out))},
			Inputs:     map[string]string{"i": out},
		}
		spec.outputs[sink] = out
		spec.order = append(spec.order, out)
	}
	return spec
}

// encodeElements encodes byte-slice elements as windowed values in the
// global window, concatenated, as the host would send them.
func encodeElements(t testing.TB, elems ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := exec.MakeWindowEncoder(coder.NewGlobalWindow())
	for _, e := range elems {
		if err := exec.EncodeWindowedValueHeader(enc, window.SingleGlobalWindow, mtime.ZeroTimestamp, typex.NoFiringPane(), &buf); err != nil {
			t.Fatal(err)
		}
		if err := coder.EncodeBytes(e, &buf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// decodeElements decodes concatenated global-window windowed byte values.
func decodeElements(t testing.TB, data []byte) []string {
	t.Helper()
	var out []string
	r := bytes.NewReader(data)
	dec := exec.MakeWindowDecoder(coder.NewGlobalWindow())
	for r.Len() > 0 {
		if _, _, _, err := exec.DecodeWindowedValueHeader(dec, r); err != nil {
			t.Fatalf("decoding windowed value header: %v", err)
		}
		b, err := coder.DecodeBytes(r)
		if err != nil {
			t.Fatalf("decoding element: %v", err)
		}
		out = append(out, string(b))
	}
	return out
}

// collector gathers a bundle's output per PCollection, checking that emit
// is never called concurrently.
type collector struct {
	mu     sync.Mutex
	busy   bool
	t      testing.TB
	byColl map[string]*bytes.Buffer
}

func newCollector(t testing.TB) *collector {
	return &collector{t: t, byColl: map[string]*bytes.Buffer{}}
}

func (c *collector) emit(pcoll string, data []byte) error {
	c.mu.Lock()
	if c.busy {
		c.mu.Unlock()
		c.t.Errorf("emit called concurrently for one bundle")
		return nil
	}
	c.busy = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}()
	buf := c.byColl[pcoll]
	if buf == nil {
		buf = &bytes.Buffer{}
		c.byColl[pcoll] = buf
	}
	buf.Write(data)
	return nil
}

func (c *collector) elements(pcoll string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := c.byColl[pcoll]
	if buf == nil {
		return nil
	}
	return decodeElements(c.t, buf.Bytes())
}

// processEnv runs this test binary as a PROCESS environment worker. Tests
// that run bundles use it rather than loopbackEnv: the race detector
// watches only this process, and the Go SDK harness has data races of its
// own (issue 10) that are not ours to fix.
func processEnv(t testing.TB) *pipepb.Environment {
	env, _ := processEnvWithPID(t)
	return env
}

// processEnvWithPID is processEnv with a way to learn the process id of
// the worker last started from it: pid may be called once StartEnvironment
// has returned.
func processEnvWithPID(t testing.TB) (env *pipepb.Environment, pid func() int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "worker.pid")
	payload, _ := proto.Marshal(&pipepb.ProcessPayload{Command: exe, Env: map[string]string{
		workerModeEnv:    "1",
		workerPIDFileEnv: pidFile,
	}})
	pid = func() int {
		t.Helper()
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatalf("worker process id: %v", err)
		}
		n, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatalf("worker process id: %v", err)
		}
		return n
	}
	return &pipepb.Environment{Urn: harness.URNEnvProcess, Payload: payload}, pid
}

// loopbackEnv starts the Go SDK's LOOPBACK worker pool in this process and
// returns the external environment pointing at it.
func loopbackEnv(t testing.TB) *pipepb.Environment {
	t.Helper()
	ctx := context.Background()
	pool, err := extworker.StartLoopback(ctx, 0)
	if err != nil {
		t.Fatalf("starting loopback worker pool: %v", err)
	}
	t.Cleanup(func() { pool.Stop(ctx) })
	payload, err := proto.Marshal(&pipepb.ExternalPayload{Endpoint: &pipepb.ApiServiceDescriptor{Url: pool.EnvironmentConfig(ctx)}})
	if err != nil {
		t.Fatal(err)
	}
	return &pipepb.Environment{Urn: harness.URNEnvExternal, Payload: payload}
}

// checkNoHarnessGoroutines fails t if goroutines of the harness package are
// still running a while after Close.
func checkNoHarnessGoroutines(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "ksrunner/harness.") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d harness goroutines still running after Close:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var _ io.Writer = (*bytes.Buffer)(nil)

func init() {
	register.Function3x0(exitFn)
	register.Function4x0(sideFn)
	register.Iter1[[]byte]()
}

// sideFn appends the values of its side input to every element.
func sideFn(_ context.Context, elem []byte, side func(*[]byte) bool, emit func([]byte)) {
	out := slices.Clone(elem)
	var v []byte
	for side(&v) {
		out = append(append(out, '|'), v...)
	}
	emit(out)
}

// exitFn kills its worker process on "exit"; only for PROCESS environments.
func exitFn(_ context.Context, elem []byte, emit func([]byte)) {
	if string(elem) == "exit" {
		os.Exit(3)
	}
	emit(elem)
}
