package task

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// A ParDo with side inputs behind a windowed GroupByKey stays in its
// sub-topology and parks the panes its side input is not ready for. A
// paged pane parked is read whole, in order, when released in a later
// cycle, also by a task opened again meanwhile (the copy of its values is
// in the store and its changelog), and the copy is gone after that cycle;
// a pane the side input is ready for goes on at once, with the cycle's
// token; one parked waits for the next cycle even when the side input is
// ready before its cycle ends (its copy is not in the DB before).
func TestParkedPanesPaged(t *testing.T) {
	te := newTestEnv(t, marshal(t, windowedGroupsWithSidePipeline()), 1)
	sub := te.sub(translate.RootGroupByKey)
	if !sub.Root.Windowed || !sub.Root.PagedGroups || len(sub.Root.SideInputTopics) != 0 || len(sub.Stages) != 1 ||
		len(sub.Stages[0].SideInputs) != 1 || !sub.Stages[0].PagedGroups || sub.Root.WaitsForSides(sub.Stages[0]) {
		t.Fatalf("the side input reader does not park paged panes in the windowed GroupByKey's sub-topology (windowed %v, paged %v, root waits for %q, %d stages)",
			sub.Root.Windowed, sub.Root.PagedGroups, sub.Root.SideInputTopics, len(sub.Stages))
	}
	if te.plan.Layout != translate.LayoutGatedPanes {
		t.Fatalf("layout %d, want %d", te.plan.Layout, translate.LayoutGatedPanes)
	}
	side := sub.Stages[0].SideInputs[0].Topic
	ctx := context.Background()
	const size = 100 << 10
	vals := bigValues(41, size)
	w0, w1 := interval(0, 60000), interval(60000, 120000)
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	prod := te.producer(sub, 0)
	var recs []*kgo.Record
	for _, v := range vals {
		recs = append(recs, in.data(wv(1000, kv("k", v), w0))...)
	}
	type read struct {
		vals  []string
		token []byte
	}
	var got []read
	te.exec(sub).each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		for range 2 { // the SDK may iterate a pane twice
			vs, inline, tok, err := sdkGroup(ctx, b, in.Elem)
			if err != nil {
				return err
			}
			if tok == nil || inline >= len(vs) {
				return fmt.Errorf("a pane of %d values: %d inline, token %q; want paged", len(vs), inline, tok)
			}
			got = append(got, read{vs, slices.Clone(tok)})
		}
		return nil
	}
	check := func(step string, want []string) {
		t.Helper()
		if len(got) != 2 {
			t.Fatalf("%s: %d pane reads, want one pane read twice", step, len(got))
		}
		for _, r := range got {
			if !slices.Equal(r.vals, want) {
				t.Errorf("%s: %d values, want %d in order (first differing at %d)", step, len(r.vals), len(want), firstDiff(r.vals, want))
			}
			if !bytes.HasPrefix(r.token, []byte("group/")) {
				t.Errorf("%s: the stage read token %q, want one of the cycle's groups", step, r.token)
			}
		}
		got = nil
	}
	parkedPages := func() int {
		t.Helper()
		return countKeys(t, te.env.DB, sub.ID, state.GatePages)
	}

	te.setSideWatermark(side, minWatermark)
	te.cycle(tk, append(slices.Clone(recs[:20]), in.wm(prod, 30000))...)
	te.cycle(tk, append(slices.Clone(recs[20:40]), in.wm(prod, 70000))...) // the on-time pane: parked
	if len(got) != 0 {
		t.Fatalf("%d pane reads before the side input is ready", len(got))
	}
	if n := parkedPages(); n < 10 {
		t.Fatalf("%d pieces of the parked pane's values in the store, want its 3.9 MB past the inline part", n)
	}
	tk.Abort()
	tk = te.task(sub, 0) // the parked pane outlives the task
	te.setSideWatermark(side, 60000)
	te.cycle(tk)
	check("released", vals[:40])
	if n := parkedPages(); n != 0 {
		t.Errorf("%d pieces of a released pane's values left in the store", n)
	}
	te.cycle(tk, recs[40]) // late, the side input ready: at once
	check("late", vals)

	// w1's pane is parked as the cycle fires it, and stays parked when the
	// side input moves before the stage's input is flushed again in that
	// cycle (its copy is only in the cycle's batch): the next cycle
	// releases it.
	var recs1 []*kgo.Record
	for _, v := range vals[:20] {
		recs1 = append(recs1, in.data(wv(61000, kv("j", v), w1))...)
	}
	if err := tk.Handle(ctx, append(recs1, in.wm(prod, 130000))); err != nil {
		t.Fatal(err)
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("%d pane reads before the side input is ready for w1", len(got))
	}
	te.setSideWatermark(side, maxWatermark)
	if err := tk.flushStages(ctx, true); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("%d pane reads in the cycle that parked the pane", len(got))
	}
	if err := tk.ProduceChangelog(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tk.CommitState(); err != nil {
		t.Fatal(err)
	}
	te.cycle(tk)
	check("released in the next cycle", vals[:20])
	if n := parkedPages(); n != 0 {
		t.Errorf("%d pieces of a released pane's values left in the store", n)
	}
}
