package task

import (
	"context"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// pairInMinutes is a fake of pairFn and WindowInto(fixed minutes): each
// string s becomes KV(s, s) in its minute.
func pairInMinutes(in shuffle.WindowedValue) [][]byte {
	start := in.Timestamp - in.Timestamp%60000
	return [][]byte{wv(in.Timestamp, append(append([]byte(nil), in.Elem...), in.Elem...), interval(start, start+60000))}
}

// The TestStream task runs the events once its record arrived, in order,
// in one cycle: elements go to the stage, a watermark advance closes the
// bundles and reports the watermark after their output, a processing-time
// advance sends the synthetic clock after the output before it; after the
// last event the watermark is +inf. A redelivered record, or one
// delivered to a task reopened after the commit, runs nothing again.
func TestTestStreamRoot(t *testing.T) {
	cfg := teststream.NewConfig()
	cfg.AddElements(1000, "a", "b")
	cfg.AdvanceWatermark(60000)
	cfg.AdvanceProcessingTime(5000)
	cfg.AddElements(70000, "c")
	te := newTestEnv(t, marshal(t, testStreamPipeline(cfg)), 2)
	sub := te.sub(translate.RootTestStream)
	te.exec(sub).setFn(pairInMinutes)
	tk := te.task(sub, 0)
	rec := te.input(sub, 0).data(nil)[0]
	start := time.Now().UnixMilli()
	te.cycle(tk, rec)
	checkLines(t, "stage input", te.exec(sub).inputs(), []string{`"a" @1000 GW nofiring`, `"b" @1000 GW nofiring`, `"c" @70000 GW nofiring`})
	out := te.take()
	checkLines(t, "produced", te.describe(out), lines(
		te.broadcast(tk, "pt "+tk.ID()),
		`CoGBK-repartition/0 key "\x01a" "a":"a" @1000 [0,60000) nofiring`,
		`CoGBK-repartition/0 key "\x01b" "b":"b" @1000 [0,60000) nofiring`,
		te.broadcast(tk, "wm "+tk.ID()+" 60000"),
		te.broadcast(tk, "pt "+tk.ID()),
		`CoGBK-repartition/0 key "\x01c" "c":"c" @70000 [60000,120000) nofiring`,
		te.reports(tk, "+inf")))
	var clocks []int64
	for _, r := range out {
		if r.Value[0] == shuffle.KindProcessingTime && r.Partition == 0 {
			_, pt, _ := shuffle.DecodeProcessingTime(r.Value)
			clocks = append(clocks, pt)
		}
	}
	if len(clocks) != 2 || clocks[0] < start || clocks[1]-clocks[0] != 5000 {
		t.Errorf("clocks %v, want the wall clock at the start (>= %d), then 5000 ms later", clocks, start)
	}

	te.cycle(tk, rec)
	checkLines(t, "redelivered: produced", te.describe(te.take()), nil)
	tk.Abort()
	tk = te.task(sub, 0)
	te.cycle(tk, rec)
	// A reopened task reports at once, and forwards its clock.
	out = te.take()
	checkLines(t, "reopened: produced", te.describe(out), lines(te.broadcast(tk, "wm "+tk.ID()+" +inf"), te.broadcast(tk, "pt "+tk.ID()), "status "+tk.ID()+" +inf"))
	if _, pt, _ := shuffle.DecodeProcessingTime(out[2].Value); len(clocks) == 2 && pt != clocks[1] {
		t.Errorf("reopened: clock %d, want the last one, %d", pt, clocks[1])
	}
	checkLines(t, "stage input again", te.exec(sub).inputs(), nil)
}

// In a TestStream pipeline every task runs on the synthetic clock that
// comes in band (PROCESSING_TIME records, the least over the producers),
// reacts to each clock and watermark advance at once (fires, closes
// bundles, reports) and forwards its clock after what it emitted before.
// A processing-time trigger fires on that clock.
func TestSyntheticProcessingTime(t *testing.T) {
	cfg := teststream.NewConfig()
	cfg.AddElements(1000, "a")
	te := newTestEnv(t, marshal(t, testStreamPipeline(cfg,
		beam.Trigger(trigger.Repeat(trigger.AfterProcessingTime().PlusDelay(10*time.Second))), beam.PanesDiscard())), 1)
	f := newGroupFixtureIn(t, te, 0)
	pt := func(ms int64) *kgo.Record { return f.in.rec(shuffle.EncodeProcessingTime(f.prod, ms)) }
	const t0 = 1_000_000
	w := interval(0, 60000)
	recs := []*kgo.Record{pt(t0)}
	recs = append(recs, f.in.data(wv(1000, kv("k", "a"), w))...)
	recs = append(recs, pt(t0+5000), pt(t0+4000), pt(t0+10000))
	recs = append(recs, f.in.data(wv(2000, kv("k", "b"), w))...)
	recs = append(recs, f.in.wm(f.prod, 60000))
	if err := f.tk.Handle(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	checkLines(t, "stage input", te.exec(f.sub).inputs(), []string{
		`"k":["a"] @59999 [0,60000) early#0 first`,
		`"k":["b"] @59999 [0,60000) ontime#1 last`,
	})
	ptLine := "pt " + f.tk.ID()
	checkLines(t, "produced", te.describe(te.take()), lines(
		te.broadcast(f.tk, "wm "+f.tk.ID()+" -inf"), // the first reaction reports
		te.broadcast(f.tk, ptLine),                  // t0
		te.broadcast(f.tk, ptLine),                  // t0+5000; t0+4000 is behind it
		te.sunk(f.sub, `"k" @59999 [0,60000) early#0 first`),
		te.broadcast(f.tk, ptLine), // t0+10000
		te.sunk(f.sub, `"k" @59999 [0,60000) ontime#1 last`),
		te.broadcast(f.tk, "wm "+f.tk.ID()+" 60000"),
	))
}
