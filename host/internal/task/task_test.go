package task

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// reshuffleTask is the Reshuffle's task of a grouping pipeline: a
// passthrough root fed by every task of the group-by-key (partitions of
// them), with no stage.
func reshuffleTask(t *testing.T, partitions int) (*testEnv, *translate.SubTopology, *translate.SubTopology) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), partitions)
	sub := te.find("of the Reshuffle", func(st *translate.SubTopology) bool {
		return st.Root.Kind == translate.RootPassthrough && len(st.Stages) == 0
	})
	if n := te.env.Topics.Producers[sub.Input]; n != partitions {
		t.Fatalf("%d producers of the Reshuffle's input, want %d", n, partitions)
	}
	return te, sub, te.sub(translate.RootGroupByKey)
}

// The input watermark is the least of every producer's latest report, at
// the minimum until all have reported; a report behind the producer's
// latest does not count; the reports are state, restored with the task.
func TestInputWatermarkOverProducers(t *testing.T) {
	te, sub, gbk := reshuffleTask(t, 3)
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	p := func(i int32) string { return shuffle.ProducerID(gbk.ID, i) }
	for i, st := range []struct {
		recs     []*kgo.Record
		reopen   bool
		reported string
	}{
		{recs: []*kgo.Record{in.wm(p(0), 50)}, reported: "-inf"}, // the first report is at once
		{recs: []*kgo.Record{in.wm(p(1), 40)}},
		{recs: []*kgo.Record{in.wm(p(2), 60)}, reported: "40"},
		{recs: []*kgo.Record{in.wm(p(1), 30)}}, // behind its latest
		{reopen: true, reported: "40"},
		{recs: []*kgo.Record{in.wm(p(1), 70), in.wm(p(0), 55)}, reported: "55"},
		{reopen: true, reported: "55"},
		{recs: []*kgo.Record{in.wm(p(0), 80)}, reported: "60"},
	} {
		if st.reopen {
			tk.Abort()
			tk = te.task(sub, 0)
		}
		te.cycle(tk, st.recs...)
		var want []string
		if st.reported != "" {
			want = te.reports(tk, st.reported)
		}
		checkLines(t, fmtStep("produced", i), te.describe(te.take()), want)
	}
}

// SendStatus sends the status of the last watermark report, once, and
// nothing when there was none since, but when the watermark stood still
// for statusRefresh: then the status again.
func TestSendStatus(t *testing.T) {
	te, sub, gbk := reshuffleTask(t, 1)
	clock := time.Unix(1000, 0)
	te.env.Now = func() time.Time { return clock }
	tk := te.task(sub, 0)
	ctx := context.Background()
	if tk.SendStatus() {
		t.Error("a status before any watermark report")
	}
	send := func(what string, recs []*kgo.Record, want ...string) {
		t.Helper()
		if err := tk.Handle(ctx, recs); err != nil {
			t.Fatal(err)
		}
		if err := tk.PrepareCommit(ctx); err != nil {
			t.Fatal(err)
		}
		if got := te.describe(te.take()); len(got) > 0 {
			t.Errorf("%s: PrepareCommit produced %v", what, got)
		}
		if sent := tk.SendStatus(); sent != (len(want) > 0) {
			t.Errorf("%s: SendStatus() = %v", what, sent)
		}
		if tk.SendStatus() {
			t.Errorf("%s: a second status", what)
		}
		checkLines(t, what, te.describe(te.take()), want)
	}
	in := te.input(sub, 0)
	send("first", nil, "status "+tk.ID()+" -inf")
	send("no change", nil)
	clock = clock.Add(statusRefresh)
	send("no change for statusRefresh: said again", nil, "status "+tk.ID()+" -inf")
	send("no change since", nil)
	send("report", []*kgo.Record{in.wm(shuffle.ProducerID(gbk.ID, 0), 100)}, "status "+tk.ID()+" 100")
}

// Handle refuses records it cannot read, New a stage without executor.
func TestHandleRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		root translate.RootKind
		rec  []byte
		want string
	}{
		{"empty", translate.RootPassthrough, []byte{}, "empty record"},
		{"unknown kind", translate.RootPassthrough, []byte{9}, "unknown record kind 9"},
		{"truncated watermark", translate.RootPassthrough, shuffle.EncodeWatermark("0/0", 5)[:4], "truncated"},
		{"watermark without producers", translate.RootImpulse, shuffle.EncodeWatermark("0/0", 5), "without producers"},
		{"corrupt element", translate.RootGroupByKey, []byte{shuffle.KindData, 1, 2}, "offset 0"},
		{"not a KV", translate.RootGroupByKey, append([]byte{shuffle.KindData}, wv(0, []byte{0x80}, interval(0, 1))...), "offset 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, marshal(t, groupingPipeline(t)), 1)
			sub := te.sub(tc.root)
			tk := te.task(sub, 0)
			err := tk.Handle(context.Background(), []*kgo.Record{te.input(sub, 0).rec(tc.rec)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Handle: %v, want an error with %q", err, tc.want)
			}
		})
	}
	t.Run("no executor", func(t *testing.T) {
		te := newTestEnv(t, marshal(t, groupingPipeline(t)), 1)
		sub := te.sub(translate.RootGroupByKey)
		delete(te.env.Execs, sub.Stages[0].ID)
		if _, err := New(te.env, sub, 0); err == nil || !strings.Contains(err.Error(), "no executor") {
			t.Errorf("New: %v, want no executor", err)
		}
	})
}

// Errors of a stage's bundles fail the cycle: Process errors, and output
// that ends inside an element.
func TestStageErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*fakeExec)
		want  string
	}{
		{"process", func(f *fakeExec) { f.fail = errors.New("user code failed") }, "user code failed"},
		{"output cut", func(f *fakeExec) {
			f.setFn(func(shuffle.WindowedValue) [][]byte { return [][]byte{wv(0, kv("k", "v"), interval(0, 1))[:14]} })
		}, "ends inside an element"},
		{"finish", func(f *fakeExec) {
			f.finish = func() (executor.Result, error) { return executor.Result{}, errors.New("finish failed") }
		}, "finish failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te, sub := impulseTask(t, 1)
			tk := te.task(sub, 0)
			tc.setup(te.exec(sub))
			ctx := context.Background()
			err := tk.Handle(ctx, te.input(sub, 0).data(nil))
			if err == nil {
				err = tk.PrepareCommit(ctx)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), sub.Stages[0].ID) {
				t.Errorf("%v, want an error of stage %s with %q", err, sub.Stages[0].ID, tc.want)
			}
		})
	}
}

// A bundle's metrics count as attempted at once and as committed once the
// cycle is finalized, when its finalizer runs (residuals: residual_test.go).
func TestBundleResults(t *testing.T) {
	te, sub := impulseTask(t, 1)
	tk := te.task(sub, 0)
	f := te.exec(sub)
	var finalized []int
	metric := hostCounter("t", "n", 3)
	f.finish = func() (executor.Result, error) {
		n := f.finished
		return executor.Result{Metrics: []*pipepb.MonitoringInfo{metric}, Finalize: func(context.Context) error {
			finalized = append(finalized, n)
			return errors.New("finalizing fails: only logged")
		}}, nil
	}
	ctx := context.Background()
	if err := tk.Handle(ctx, te.input(sub, 0).data(nil)); err != nil {
		t.Fatal(err)
	}
	// A bundle closed before PrepareCommit (as by a bundle bound) and one
	// in it.
	if err := tk.flushStages(ctx, true); err != nil {
		t.Fatal(err)
	}
	tk.stages[0].appendPending(wv(5, strEl("more"), globalWindow))
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.takeBundles(); len(got) != 2 {
		t.Errorf("bundles %q, want 2", got)
	}
	if a, c := counter(t, te.env.Metrics.Attempted, "t", "n"), counter(t, te.env.Metrics.Committed, "t", "n"); a != 6 || c != 0 {
		t.Errorf("before the commit: counter attempted %d, committed %d; want 6, 0", a, c)
	}
	if err := tk.CommitState(); err != nil {
		t.Fatal(err)
	}
	if len(finalized) != 0 {
		t.Errorf("finalized %v before Finalize", finalized)
	}
	tk.Finalize(ctx)
	tk.Finalize(ctx) // nothing more
	if len(finalized) != 2 || finalized[0] != 1 || finalized[1] != 2 {
		t.Errorf("finalized bundles %v, want 1 and 2, once", finalized)
	}
	if c := counter(t, te.env.Metrics.Committed, "t", "n"); c != 6 {
		t.Errorf("counter committed %d, want 6", c)
	}
}
