package task

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
)

// bigValues are n strings of size bytes: "aaa…", "bbb…", ….
func bigValues(n, size int) []string {
	var out []string
	for i := range n {
		out = append(out, strings.Repeat(string(rune('a'+i)), size))
	}
	return out
}

// checkChangelogSizes fails if a changelog record is larger than a stored
// piece may grow (maxStoredValue and one more value): Kafka refuses
// records of about 1 MB.
func checkChangelogSizes(t *testing.T, recs []*kgo.Record, value int) {
	t.Helper()
	for _, r := range recs {
		if len(r.Value) > maxStoredValue+value+64 {
			t.Errorf("a changelog record of %d bytes", len(r.Value))
		}
	}
}

// Values of a key beyond what one stored run holds go to more runs: each
// is one changelog record of bounded size, and the group has every value
// once, in order.
func TestGroupByKeyLargeRuns(t *testing.T) {
	f := newGroupFixture(t)
	const size = 100 << 10
	vals := bigValues(6, size)
	w := interval(0, 60000)
	var recs []*kgo.Record
	for _, v := range vals {
		recs = append(recs, f.in.data(wv(1000, kv("k", v), w))...)
	}
	f.te.cycle(f.tk, recs...)
	cl := f.te.takeChangelog()
	checkChangelogSizes(t, cl, size)
	runs := 0
	for _, r := range cl {
		if state.Kind(r.Key[state.TaskPrefixLen]) == state.Buffer {
			runs++
		}
	}
	if runs < 2 {
		t.Errorf("%d stored runs for %d bytes of values", runs, len(vals)*size)
	}
	f.te.cycle(f.tk, f.in.wm(f.prod, maxWatermark))
	got := f.te.exec(f.sub).inputs()
	if len(got) != 1 || got[0] != groupLine("k", vals, `@59999 [0,60000) ontime#0 first last`) {
		t.Errorf("%d groups, want one of the %d values in order", len(got), len(vals))
	}
}

// groupLine is a rendered group of key k with vals.
func groupLine(k string, vals []string, rest string) string {
	var q []string
	for _, v := range vals {
		q = append(q, fmt.Sprintf("%q", v))
	}
	return fmt.Sprintf("%q:[%s] %s", k, strings.Join(q, " "), rest)
}

// Input of more than about 1 MB goes to the stage while the task handles
// records, in batches, and a bundle closes at the first batch boundary at
// which it has MaxBundleSize elements; a gated stage's input is parked in
// pieces of bounded size (maxStoredValue: three of these elements), which
// are the batches it gets.
func TestLargeInput(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), 1)
	te.env.MaxBundleSize = 5
	sub, stage := te.subWithSideInput()
	te.setSideWatermark(stage.SideInputs[0].Topic, maxWatermark)
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	const size = 100 << 10
	var recs []*kgo.Record
	for _, v := range bigValues(12, size) {
		recs = append(recs, in.data(wv(1000, strEl(v), interval(0, 60000)))...)
	}
	f := te.exec(sub)
	ctx := context.Background()
	if err := tk.Handle(ctx, recs); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	started, finished := f.started, f.finished
	f.mu.Unlock()
	if started != 2 || finished != 2 {
		t.Errorf("after Handle: %d bundles started, %d finished; want 2 and 2 (of 6 elements each)", started, finished)
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tk.ProduceChangelog(ctx); err != nil {
		t.Fatal(err)
	}
	checkChangelogSizes(t, te.takeChangelog(), size)
	var sizes []int
	for _, b := range f.takeBundles() {
		sizes = append(sizes, len(b))
	}
	if !slices.Equal(sizes, []int{6, 6}) {
		t.Errorf("bundles of %v elements, want 6 and 6", sizes)
	}
}
