package task

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
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

// An element larger than the internal topic it goes to takes fails the
// task where it is routed, naming its PCollection, the transform making it
// and the topic, rather than in the producer (which would name only the
// topic, failing the whole cycle); the same element fits a topic with a
// larger max.message.bytes (internal_max_message_bytes).
func TestElementTooLargeForTopic(t *testing.T) {
	const size = 2 << 20
	for _, limit := range []int32{1 << 20, 8 << 20} {
		te := newTestEnv(t, marshal(t, groupingPipeline(t)), 3)
		for _, tp := range groupTask(t, te).Sinks {
			te.env.Topics.MaxMessageBytes[te.env.Topics.Full(tp.Topic)] = limit
		}
		f := newGroupFixtureIn(t, te, 2)
		big := strings.Repeat("x", size)
		f.te.exec(f.sub).fn = func(in shuffle.WindowedValue) [][]byte {
			return [][]byte{wv(1000, strEl(big), interval(0, 60000))}
		}
		w := interval(0, 60000)
		ctx := context.Background()
		if err := f.tk.Handle(ctx, f.in.data(wv(1000, kv("k", "v"), w))); err != nil {
			t.Fatal(err)
		}
		err := f.tk.Handle(ctx, []*kgo.Record{f.in.wm(f.prod, maxWatermark)})
		if err == nil {
			err = f.tk.PrepareCommit(ctx)
		}
		if limit > size {
			if err != nil {
				t.Errorf("limit %d: %v", limit, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "does not fit in a record of topic "+f.te.env.Topics.Full(f.sub.Sinks[0].Topic)) || !strings.Contains(err.Error(), "output of transform") || !strings.Contains(err.Error(), "internal_max_message_bytes") {
			t.Errorf("limit %d: %v, want the element's PCollection, its transform, the topic and internal_max_message_bytes named", limit, err)
		}
	}
}

// A stored value larger than the task's changelog takes (here input
// parked for a side input) fails ProduceChangelog naming what it is and
// the changelog (the cycle then aborts), rather than the producer failing
// it naming only the topic.
func TestStoredValueTooLargeForChangelog(t *testing.T) {
	const size = 2 << 20
	for _, limit := range []int32{1 << 20, 8 << 20} {
		te := newTestEnv(t, marshal(t, groupingPipeline(t)), 1)
		sub, _ := te.subWithSideInput()
		changelog := te.env.Topics.Full(te.env.Topics.Changelogs[sub.ID])
		te.env.Topics.MaxMessageBytes[changelog] = limit
		tk := te.task(sub, 0)
		in := te.input(sub, 0)
		ctx := context.Background()
		if err := tk.Handle(ctx, in.data(wv(1000, strEl(strings.Repeat("y", size)), interval(0, 60000)))); err != nil {
			t.Fatal(err)
		}
		if err := tk.PrepareCommit(ctx); err != nil {
			t.Fatal(err)
		}
		err := tk.ProduceChangelog(ctx)
		produced := len(te.takeChangelog())
		if limit > size {
			if err != nil || produced == 0 {
				t.Errorf("limit %d: %v, %d records", limit, err, produced)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "input parked for side inputs") || !strings.Contains(err.Error(), "changelog "+changelog+", which takes at most 1048576 bytes") {
			t.Errorf("limit %d: %v, want the parked input and the changelog named", limit, err)
		}
	}
}
