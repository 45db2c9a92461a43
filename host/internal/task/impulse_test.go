package task

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/windowing"
)

// impulseTask is the impulse task of groupingPipeline whose stage feeds the
// GroupByKey: the fake stage emits two KVs for the impulse's element.
func impulseTask(t *testing.T, partitions int) (*testEnv, *translate.SubTopology) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), partitions)
	sub := te.find("writing a repartition topic from an impulse", func(st *translate.SubTopology) bool {
		return st.Root.Kind == translate.RootImpulse && te.writes(st, translate.TopicRepartition)
	})
	te.exec(sub).setFn(func(shuffle.WindowedValue) [][]byte {
		return [][]byte{wv(1000, kv("k1", "a"), interval(0, 60000)), wv(2000, kv("k2", "b"), interval(0, 60000))}
	})
	return te, sub
}

// impulseInput is how the stage sees the impulse's element. (The pane is
// the one the task encodes: see TestImpulseElementPane.)
func impulseInput(t *testing.T) string {
	p, err := windowing.DecodePane(impulseElement[len(impulseElement)-2 : len(impulseElement)-1])
	if err != nil {
		t.Fatal(err)
	}
	return `"" @-inf GW ` + renderPane(p)
}

// The impulse task emits the impulse's element once, then reports the
// maximum watermark to every partition of its output topic after the
// data; however often its record is delivered while the task lives, and
// after a commit in any task reopened from the store. After an abort the
// element is emitted again: the output was not committed either.
func TestImpulseOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run delivers the impulse record to tk (or tasks reopened from
		// its store) in cycles.
		run        func(te *testEnv, sub *translate.SubTopology, tk *Task, rec *kgo.Record)
		deliveries int // how often the stage gets the element
		reports    int // how often the watermark is reported
	}{{
		name: "same cycle",
		run: func(te *testEnv, _ *translate.SubTopology, tk *Task, rec *kgo.Record) {
			te.cycle(tk, rec, rec)
		},
		deliveries: 1, reports: 1,
	}, {
		name: "after commit",
		run: func(te *testEnv, _ *translate.SubTopology, tk *Task, rec *kgo.Record) {
			te.cycle(tk, rec)
			te.cycle(tk, rec)
		},
		deliveries: 1, reports: 1,
	}, {
		name: "reopened after commit",
		run: func(te *testEnv, sub *translate.SubTopology, tk *Task, rec *kgo.Record) {
			te.cycle(tk, rec)
			tk.Abort() // the task moves away; its cycle had committed
			te.cycle(te.task(sub, 0), rec)
		},
		deliveries: 1, reports: 2, // a new task reports at once
	}, {
		name: "reopened after abort",
		run: func(te *testEnv, sub *translate.SubTopology, tk *Task, rec *kgo.Record) {
			if err := tk.Handle(context.Background(), []*kgo.Record{rec}); err != nil {
				t.Fatal(err)
			}
			if err := tk.PrepareCommit(context.Background()); err != nil {
				t.Fatal(err)
			}
			te.take() // produced in a transaction that aborts
			tk.Abort()
			te.cycle(te.task(sub, 0), rec)
		},
		deliveries: 2, reports: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			te, sub := impulseTask(t, 3)
			tk := te.task(sub, 0)
			tc.run(te, sub, tk, te.input(sub, 0).data(nil)[0])
			var inputs, produced []string
			for range tc.deliveries {
				inputs = append(inputs, impulseInput(t))
			}
			produced = lines(
				`CoGBK-repartition/0 key "\x02k1" "k1":"a" @1000 [0,60000) nofiring`,
				`CoGBK-repartition/0 key "\x02k2" "k2":"b" @2000 [0,60000) nofiring`,
				te.reports(tk, "+inf"))
			for range tc.reports - 1 {
				produced = append(produced, produced[2:]...)
			}
			checkLines(t, "stage input", te.exec(sub).inputs(), inputs)
			checkLines(t, "produced", te.describe(te.take()), produced)
		})
	}
}

// The impulse's element has the no-firing pane, as in Beam's other
// runners (Prism's ElementManager.Impulse uses typex.NoFiringPane()).
func TestImpulseElementPane(t *testing.T) {
	got := impulseInput(t)
	if want := `"" @-inf GW nofiring`; got != want {
		t.Errorf("impulse element %s, want %s", got, want)
	}
}
