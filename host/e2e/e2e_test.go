package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

// pipelines are the pipelines compared with Prism; each writes its output
// to the file it is given.
var pipelines = []struct {
	name  string
	build func(out string) *beam.Pipeline
	// want, if set, is the exact output (sorted lines), which Prism's
	// must be too.
	want func() []string
	// notPrism skips Prism, whose output of the pipeline is not always
	// the pipeline's (want says what it is).
	notPrism bool
}{
	{"wordcount", wordcountPipeline, nil, false},
	{"multi", multiPipeline, nil, false},
	{"readfiles", readFilesPipeline, nil, false},
	{"hotkey", hotKeyPipeline, nil, false},
	{"hotsessions", hotSessionsPipeline, nil, false},
	{"hotside", hotSidePipeline, hotSideWant, false},
	{"hotsidegroups", hotSideOfGroupsPipeline, func() []string { return hotSideWantWith("ccch") }, false},
	{"hotstateful", hotStatefulPipeline, func() []string { return hotSideWantWith("st") }, false},
	{"sdfside", sdfSidePipeline, sdfSideWant, false},
	{"windowedstateful", windowedStatefulPipeline, windowedStatefulWant, false},
	// Prism hands the ParDo some windows' panes before the side input is
	// complete for them ("of 0" in 1 run of 4 on 2026-12-07).
	{"windowedside", windowedSidePipeline, windowedSideWant, true},
}

// runToLines runs build's pipeline on client and returns the sorted lines
// it wrote.
func runToLines(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, build func(string) *beam.Pipeline, opts map[string]string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.txt")
	runDone(ctx, t, client, marshal(t, build(out)), opts)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the output: %v", err)
	}
	return sortedLines(string(b))
}

func diffLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	inWant := map[string]int{}
	for _, l := range want {
		inWant[l]++
	}
	var extra []string
	for _, l := range got {
		if inWant[l] > 0 {
			inWant[l]--
		} else {
			extra = append(extra, l)
		}
	}
	var missing []string
	for _, l := range want {
		if inWant[l] > 0 {
			inWant[l]--
			missing = append(missing, l)
		}
	}
	t.Errorf("output differs from Prism's: %d lines, want %d; missing %d %q; unexpected %d %q",
		len(got), len(want), len(missing), head(missing), len(extra), head(extra))
}

func head(s []string) []string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

// broker is a Kafka broker a job runs on. bootstrap "" means the job
// server's embedded broker.
type broker struct {
	name      string
	bootstrap string
}

// brokers are the embedded broker, a `ksrunner broker` process and the
// kafkatest broker (the real one when KSRUNNER_TEST_BOOTSTRAP is set).
func brokers(t *testing.T) []broker {
	kt := "kfake"
	if kafkatest.IsReal() {
		kt = "real"
	}
	return []broker{
		{"embedded", ""},
		{"process", brokerProcess(t)},
		{kt, kafkatest.Broker(t)},
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// ksrunnerBinary builds cmd/ksrunner once per test run and returns its path.
func ksrunnerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ksrunner")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/ksrunner/ksrunner/cmd/ksrunner").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ksrunner: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// brokerProcess builds cmd/ksrunner once per test run, starts `ksrunner
// broker --port 0` and returns its address; the process is killed by
// t.Cleanup.
func brokerProcess(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(ksrunnerBinary(t), "broker", "--port", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`^broker: (\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("ksrunner broker did not print its address in 30s")
	}
	return ""
}

// TestMatchesPrism runs each pipeline on Prism, then on ksrunner on every
// broker with internal_parallelism 1 and 4, and requires the same output.
// The runs at internal_parallelism 1 send one element per internal record
// (record_pack_bytes=0), those at 4 pack them (packPar4, small enough that
// a cycle's output takes several packs): packing changes records, not
// results.
// On brokers the test can reach it also checks that the job used its
// application_id and internal_parallelism: the kept repartition topics
// have internal_parallelism partitions.
func TestMatchesPrism(t *testing.T) {
	// The brokers first: starting them may build cmd/ksrunner, which on a
	// cold build cache takes minutes that are not the jobs' time.
	bs := brokers(t)
	for _, pl := range pipelines {
		t.Run(pl.name, func(t *testing.T) {
			// A bound per pipeline, which runs on Prism and then on each
			// broker at two parallelisms (up to 9 jobs), so that adding
			// pipelines does not eat into the others' time.
			ctx := testContext(t, 3*time.Minute)
			var want []string
			if pl.notPrism {
				want = pl.want()
			} else if want = runToLines(ctx, t, reference, pl.build, nil); len(want) == 0 {
				t.Fatal("Prism wrote no output")
			}
			if pl.want != nil && !pl.notPrism {
				if exact := pl.want(); strings.Join(want, "\n") != strings.Join(exact, "\n") {
					t.Fatalf("Prism's output is not the pipeline's: %d lines, want %d (first %q, want %q)", len(want), len(exact), head(want), head(exact))
				}
			}
			for _, b := range bs {
				for _, par := range []int{1, 4} {
					pack := recordPackBytes(par)
					t.Run(fmt.Sprintf("%s/parallelism=%d/record_pack_bytes=%d", b.name, par, pack), func(t *testing.T) {
						appID := kafkatest.UniqueName(t, "e2e")
						opts := map[string]string{
							"application_id":       appID,
							"internal_parallelism": strconv.Itoa(par),
							"record_pack_bytes":    strconv.Itoa(pack),
						}
						if b.bootstrap != "" {
							opts["bootstrap_servers"] = b.bootstrap
							opts["keep_internal_topics"] = "true"
						}
						got := runToLines(ctx, t, ksrunner, pl.build, opts)
						diffLines(t, got, want)
						if b.bootstrap != "" {
							if (pl.name == "readfiles" || pl.name == "sdfside") && par > 1 {
								checkSpreadRestrictions(t, b.bootstrap, appID)
							}
							checkRepartitionTopics(ctx, t, b.bootstrap, appID, par) // deletes the topics
						}
					})
				}
			}
		})
	}
}

// recordPackBytes is the record_pack_bytes of the runs at internal
// parallelism par: none at 1, small packs at 4.
func recordPackBytes(par int) int {
	if par == 1 {
		return 0
	}
	return 512
}

// checkRepartitionTopics requires that the job of appID left repartition
// topics with par partitions each, then deletes its topics.
func checkRepartitionTopics(ctx context.Context, t *testing.T, bootstrap, appID string, par int) {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatalf("listing topics: %v", err)
	}
	prefix := "__beam_" + appID + "_"
	var mine, repartition []string
	for name, d := range topics {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		mine = append(mine, name)
		if strings.HasSuffix(name, "-repartition") {
			repartition = append(repartition, name)
			if len(d.Partitions) != par {
				t.Errorf("topic %s has %d partitions, want internal_parallelism=%d", name, len(d.Partitions), par)
			}
		}
	}
	if len(repartition) == 0 {
		t.Errorf("no repartition topics %s*-repartition kept (topics of the job: %q): were application_id, internal_parallelism and keep_internal_topics applied?", prefix, mine)
	}
	if len(mine) > 0 {
		if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
			t.Logf("deleting topics of %s: %v", appID, err)
		}
	}
}

// TestUnsupportedFailsAtSubmission: what translate refuses today is refused
// by Run, before anything runs, with an error naming the transform (for a
// pipeline requirement, the requirement) and what is unsupported. Each case
// edits one transform of statefulPipeline, found by its unique name. The
// accepted cases make edits translate supports, on the same pipeline and
// transforms, and require the job to run to DONE: so a refusal comes from
// its own edit, not from the pipeline around it or from how the test edits
// it, and time-sorted input is refused only where it is unsupported (a DoFn
// without user state or timers), not on the stateful DoFn, whose input the
// host sorts.
func TestUnsupportedFailsAtSubmission(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const (
		stateless = "Pair/e2e.withOne"
		stateful  = "UsesState/e2e.statefulFn"
		sideInput = "UsesSideInput/e2e.withSide"
		group     = "Group/CoGBK"
	)
	timeSorted := func(t *testing.T, pipe *pipepb.Pipeline, tr *pipepb.PTransform) {
		if err := pipelinetest.RequireTimeSortedInput(pipe, tr.GetUniqueName()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		target string // unique name of the transform edited; "" for the pipeline
		edit   func(t *testing.T, pipe *pipepb.Pipeline, tr *pipepb.PTransform)
		issue  string // what the error must say; "" if the edit is supported
	}{
		{"unknown URN", stateful, func(_ *testing.T, _ *pipepb.Pipeline, tr *pipepb.PTransform) {
			tr.Spec.Urn = "beam:transform:ksrunner_e2e_unknown:v1"
		}, "unsupported URN beam:transform:ksrunner_e2e_unknown:v1"},
		{"time-sorted input on a stateless DoFn", stateless, timeSorted,
			"time-sorted input is supported for stateful DoFns"},
		{"time-sorted input on a stateful DoFn", stateful, timeSorted, ""},
		{"on-window-expiration", stateful, func(t *testing.T, pipe *pipepb.Pipeline, tr *pipepb.PTransform) {
			editParDo(t, tr, func(pd *pipepb.ParDoPayload) { pd.OnWindowExpirationTimerFamilySpec = "expiry" })
			pipe.Requirements = append(pipe.Requirements, "beam:requirement:pardo:on_window_expiration:v1")
		}, "on-window-expiration is not supported yet"},
		{"side input access pattern", sideInput, func(t *testing.T, _ *pipepb.Pipeline, tr *pipepb.PTransform) {
			editParDo(t, tr, func(pd *pipepb.ParDoPayload) {
				if len(pd.GetSideInputs()) != 1 {
					t.Fatalf("%s has side inputs %v, want one", tr.GetUniqueName(), pd.GetSideInputs())
				}
				for _, si := range pd.GetSideInputs() {
					si.AccessPattern.Urn = "beam:side_input:ksrunner_e2e_unknown:v1"
				}
			})
		}, `unsupported access pattern "beam:side_input:ksrunner_e2e_unknown:v1"`},
		{"custom window coder", group, func(t *testing.T, pipe *pipepb.Pipeline, tr *pipepb.PTransform) {
			pipe.Components.Coders["ksrunner_e2e_window"] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: "beam:coder:ksrunner_e2e_window:v1"}}
			inputStrategy(t, pipe, tr).WindowCoderId = "ksrunner_e2e_window"
		}, "window coder beam:coder:ksrunner_e2e_window:v1 is not supported yet"},
		{"retracting accumulation", group, func(t *testing.T, pipe *pipepb.Pipeline, tr *pipepb.PTransform) {
			inputStrategy(t, pipe, tr).AccumulationMode = pipepb.AccumulationMode_RETRACTING
		}, "RETRACTING accumulation mode is not supported"},
		{"accumulating panes", group, func(t *testing.T, pipe *pipepb.Pipeline, tr *pipepb.PTransform) {
			inputStrategy(t, pipe, tr).AccumulationMode = pipepb.AccumulationMode_ACCUMULATING
		}, ""},
		{"unknown pipeline requirement", "", func(_ *testing.T, pipe *pipepb.Pipeline, _ *pipepb.PTransform) {
			pipe.Requirements = append(pipe.Requirements, "beam:requirement:ksrunner_e2e_unknown:v1")
		}, "unknown pipeline requirement beam:requirement:ksrunner_e2e_unknown:v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pipe := marshal(t, statefulPipeline())
			var target *pipepb.PTransform
			if tc.target != "" {
				target = transformNamed(t, pipe, tc.target)
			}
			tc.edit(t, pipe, target)
			opts := map[string]string{"application_id": kafkatest.UniqueName(t, "e2e")}
			if tc.issue == "" {
				runDone(ctx, t, ksrunner, pipe, opts)
				return
			}
			id, err := submit(ctx, t, ksrunner, pipe, opts)
			if err == nil {
				t.Fatalf("Run accepted the pipeline (job %s); want it refused", id)
			}
			if !strings.Contains(err.Error(), tc.target) || !strings.Contains(err.Error(), tc.issue) {
				t.Fatalf("Run error %q does not name transform %q and %q", err, tc.target, tc.issue)
			}
		})
	}
}

// transformNamed returns the leaf transform of pipe with the given unique
// name.
func transformNamed(t *testing.T, pipe *pipepb.Pipeline, name string) *pipepb.PTransform {
	t.Helper()
	var names []string
	for _, tr := range pipe.GetComponents().GetTransforms() {
		if tr.GetUniqueName() == name && len(tr.GetSubtransforms()) == 0 {
			return tr
		}
		names = append(names, tr.GetUniqueName())
	}
	sort.Strings(names)
	t.Fatalf("no leaf transform named %q among %q", name, names)
	return nil
}

// editParDo rewrites the ParDoPayload of tr with edit.
func editParDo(t *testing.T, tr *pipepb.PTransform, edit func(*pipepb.ParDoPayload)) {
	t.Helper()
	var pd pipepb.ParDoPayload
	if err := proto.Unmarshal(tr.GetSpec().GetPayload(), &pd); err != nil {
		t.Fatalf("%s: %v", tr.GetUniqueName(), err)
	}
	edit(&pd)
	b, err := proto.Marshal(&pd)
	if err != nil {
		t.Fatal(err)
	}
	tr.Spec.Payload = b
}

// inputStrategy gives the single input of tr a copy of its windowing
// strategy of its own, so that editing it touches that PCollection only,
// and returns it.
func inputStrategy(t *testing.T, pipe *pipepb.Pipeline, tr *pipepb.PTransform) *pipepb.WindowingStrategy {
	t.Helper()
	if len(tr.GetInputs()) != 1 {
		t.Fatalf("%s has inputs %v, want one", tr.GetUniqueName(), tr.GetInputs())
	}
	comps := pipe.GetComponents()
	for _, in := range tr.GetInputs() {
		pc := comps.GetPcollections()[in]
		ws := proto.Clone(comps.GetWindowingStrategies()[pc.GetWindowingStrategyId()]).(*pipepb.WindowingStrategy)
		pc.WindowingStrategyId = "ksrunner_e2e_ws"
		comps.WindowingStrategies[pc.WindowingStrategyId] = ws
		return ws
	}
	return nil
}

// TestDoFnPanicFailsJob: a panicking DoFn fails the job, with the panic's
// text in the message stream.
func TestDoFnPanicFailsJob(t *testing.T) {
	ctx := testContext(t, time.Minute)
	msg := "e2e deliberate panic " + kafkatest.UniqueName(t, "")
	id, err := submit(ctx, t, ksrunner, marshal(t, panicPipeline(msg)), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e")})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	r, err := wait(ctx, ksrunner, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != jobpb.JobState_FAILED {
		t.Fatalf("job ended %v, want FAILED", r.State)
	}
	if !strings.Contains(strings.Join(r.Errors, "\n"), msg) {
		t.Errorf("no error message contains the panic text %q; errors: %q", msg, r.Errors)
	}
	st, err := ksrunner.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id})
	if err != nil || st.GetState() != jobpb.JobState_FAILED {
		t.Errorf("GetState = %v, %v; want FAILED", st.GetState(), err)
	}
}

// TestOneOffApplicationTopics: a bounded job that fails deletes its
// internal topics when its application_id was made for its submission
// (nothing can resume it), and keeps them when the application was named
// (a resubmission under the name goes on from them).
func TestOneOffApplicationTopics(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	topicsOf := func(prefix string) []string {
		t.Helper()
		// A new client each time: kadm answers from franz-go's metadata
		// cache, up to 5 s old.
		listed, err := kadm.NewClient(kafkatest.Client(t, bootstrap)).ListTopics(ctx)
		if err != nil {
			t.Fatalf("listing topics: %v", err)
		}
		var mine []string
		for name := range listed {
			if strings.HasPrefix(name, prefix) {
				mine = append(mine, name)
			}
		}
		return mine
	}
	pipe := marshal(t, panicPipeline("e2e deliberate panic "+kafkatest.UniqueName(t, "")))
	stores := func(dir string) []string {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	// The job server names the application after the job (jobtest: the
	// test's name) and a random suffix.
	oneOffDir := t.TempDir()
	runFailed(ctx, t, ksrunner, pipe, map[string]string{"bootstrap_servers": bootstrap, "state_dir": oneOffDir})
	if left := topicsOf("__beam_" + strings.ToLower(t.Name()) + "-"); len(left) > 0 {
		t.Errorf("a failed job of an application made for its submission left its topics: %q", left)
	}
	if left := stores(oneOffDir); len(left) > 0 {
		t.Errorf("a failed job of an application made for its submission left its store in state_dir: %q", left)
	}

	app := kafkatest.UniqueName(t, "e2e")
	namedDir := t.TempDir()
	runFailed(ctx, t, ksrunner, pipe, map[string]string{"bootstrap_servers": bootstrap, "application_id": app, "state_dir": namedDir})
	kept := topicsOf("__beam_" + app + "_")
	if len(kept) == 0 {
		t.Errorf("a failed job of application %s (named) deleted its topics", app)
	}
	if got := stores(namedDir); !slices.Equal(got, []string{app}) {
		t.Errorf("a failed job of application %s (named) left %q in its state_dir, want its store", app, got)
	}
	if _, err := kadm.NewClient(kafkatest.Client(t, bootstrap)).DeleteTopics(ctx, kept...); err != nil {
		t.Logf("deleting topics of %s: %v", app, err)
	}
}

// TestCancelRunningJob: Cancel on a job whose DoFn is busy reaches CANCELLED
// and stops its SDK worker, so the DoFn's context ends and it stops
// processing. The worker pool lives as long as the test binary, so only
// ksrunner stopping the worker can end that context.
func TestCancelRunningJob(t *testing.T) {
	ctx := testContext(t, time.Minute)
	token := kafkatest.UniqueName(t, "block")
	b := newBlocker(token)
	id, err := submit(ctx, t, ksrunner, marshal(t, blockPipeline(token)), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e")})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	type ended struct {
		jobtest.Result
		err error
	}
	done := make(chan ended, 1)
	go func() { r, err := wait(ctx, ksrunner, id); done <- ended{r, err} }()
	select {
	case <-b.started:
	case r := <-done:
		t.Fatalf("job ended %v (errors %q, %v) before its DoFn started", r.State, r.Errors, r.err)
	case <-ctx.Done():
		t.Fatal("the DoFn did not start")
	}
	if st, err := ksrunner.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id}); err != nil || st.GetState() != jobpb.JobState_RUNNING {
		t.Errorf("GetState while the DoFn runs = %v, %v; want RUNNING", st.GetState(), err)
	}
	if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.State != jobpb.JobState_CANCELLED {
			t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", r.State, r.Errors, r.err)
		}
	case <-ctx.Done():
		st, _ := ksrunner.GetState(context.Background(), &jobpb.GetJobStateRequest{JobId: id})
		t.Fatalf("job did not end after Cancel; GetState = %v; DoFn ticks %d", st.GetState(), b.ticks.get())
	}
	if st, err := ksrunner.GetState(ctx, &jobpb.GetJobStateRequest{JobId: id}); err != nil || st.GetState() != jobpb.JobState_CANCELLED {
		t.Errorf("GetState after Cancel = %v, %v; want CANCELLED", st.GetState(), err)
	}
	select {
	case err := <-b.returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the DoFn is still processing 20s after the job was CANCELLED (ticks %d): its SDK worker was not stopped", b.ticks.get())
	}
}

// TestDockerRefusedAtRun: a DOCKER environment cannot start here, so Run
// refuses the job, naming the environment, before anything runs.
func TestDockerRefusedAtRun(t *testing.T) {
	ctx := testContext(t, time.Minute)
	pipe := marshal(t, statefulPipeline())
	var envID string
	for id, env := range pipe.GetComponents().GetEnvironments() {
		env.Urn = "beam:env:docker:v1"
		env.Payload = nil
		envID = id
	}
	id, err := submit(ctx, t, ksrunner, pipe, map[string]string{"application_id": kafkatest.UniqueName(t, "e2e")})
	if err == nil {
		t.Fatalf("Run accepted a DOCKER pipeline (job %s)", id)
	}
	if !strings.Contains(err.Error(), "DOCKER") || !strings.Contains(err.Error(), envID) {
		t.Fatalf("Run error %q does not name the DOCKER environment %q", err, envID)
	}
}

// checkSpreadRestrictions checks that the file reads of readFilesPipeline
// were spread over several partitions of their redistribute topic, so
// several tasks read the files.
func checkSpreadRestrictions(t *testing.T, bootstrap, appID string) {
	t.Helper()
	for topic, parts := range jobtest.CommittedData(t, bootstrap, appID) {
		if !strings.HasSuffix(topic, "SpreadRestrictions-repartition") {
			continue
		}
		used := 0
		for _, n := range parts {
			if n > 0 {
				used++
			}
		}
		// The restrictions (8 files of about the same size; 24 ranges of
		// 2 to 8 positions) outnumber the partitions twice at least, so
		// spread by size (host/internal/task/spread.go) each partition
		// gets some.
		if used < len(parts) {
			t.Errorf("the restrictions went to %d of the %d partitions of %s: %v", used, len(parts), topic, parts)
		}
		return
	}
	t.Errorf("no SpreadRestrictions topic among the job's topics")
}

// TestBoundedEndNeedsNoPoll: a bounded job ends on its tasks' final
// statuses, which go out in the cycle after the one that reached the
// maximum watermark. That cycle must run at once, not after a poll for
// input that will never come: with read_max_poll_time_ms at 10 minutes,
// the job must still end (every other cycle of it is driven by records
// arriving). Without the fix it ends 10 minutes later, past the deadline.
func TestBoundedEndNeedsNoPoll(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	want := runToLines(ctx, t, reference, wordcountPipeline, nil)
	got := runToLines(ctx, t, ksrunner, wordcountPipeline, map[string]string{
		"read_max_poll_time_ms": "600000",
		"internal_parallelism":  "4",
	})
	diffLines(t, got, want)
}
