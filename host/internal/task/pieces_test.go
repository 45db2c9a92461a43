package task

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// piecesFixture is sharedGroupsWithSidePipeline's GroupByKey task and the
// task of the side input's reader, which reads the groups from "-main".
type piecesFixture struct {
	te         *testEnv
	gbk, main  *translate.SubTopology
	side       string // the reader's side input topic
	mainTopic  string // full name
	readerExec *fakeExec
}

func newPiecesFixture(t *testing.T) *piecesFixture {
	te := newTestEnv(t, marshal(t, sharedGroupsWithSidePipeline()), 1)
	f := &piecesFixture{te: te, gbk: te.sub(translate.RootGroupByKey)}
	for _, st := range te.plan.SubTopologies {
		if strings.HasSuffix(st.Input, "-main") {
			f.main = st
		}
	}
	if f.main == nil || len(f.main.Stages) != 1 || !f.main.Stages[0].PagedGroups || len(f.main.Stages[0].SideInputs) != 1 {
		t.Fatalf("no -main sub-topology whose one stage reads paged groups and a side input: %+v", f.main)
	}
	var sink *translate.Sink
	for i := range f.gbk.Sinks {
		if f.gbk.Sinks[i].Topic == f.main.Input {
			sink = &f.gbk.Sinks[i]
		}
	}
	if !f.gbk.Root.PagedGroups || sink == nil || !sink.PagedGroups {
		t.Fatalf("the GroupByKey does not send its groups to %s in pieces (root paged %v, sink %+v)", f.main.Input, f.gbk.Root.PagedGroups, sink)
	}
	f.side = f.main.Stages[0].SideInputs[0].Topic
	f.mainTopic = te.env.Topics.Full(f.main.Input)
	f.readerExec = te.exec(f.main)
	return f
}

// groupRecords runs the GroupByKey task over vals on key k in window
// [0, 60000) and returns the records it wrote to the "-main" topic.
func (f *piecesFixture) groupRecords(t *testing.T, k string, vals []string) []*kgo.Record {
	t.Helper()
	tk := f.te.task(f.gbk, 0)
	in := f.te.input(f.gbk, 0)
	var recs []*kgo.Record
	for _, v := range vals {
		recs = append(recs, in.data(wv(1000, kv(k, v), interval(0, 60000)))...)
	}
	f.te.cycle(tk, recs...)
	f.te.cycle(tk, in.wm(f.te.producer(f.gbk, 0), 70000))
	var out []*kgo.Record
	for _, r := range f.te.take() {
		if r.Topic == f.mainTopic {
			out = append(out, r)
		}
	}
	tk.Abort()
	return out
}

// stored counts the reader task's keys of kind.
func (f *piecesFixture) stored(t *testing.T, kind state.Kind) int {
	t.Helper()
	return countKeys(t, f.te.env.DB, f.main.ID, kind)
}

// checkReads checks that every read got all of vals, in order.
func checkReads(t *testing.T, got [][]string, vals []string) {
	t.Helper()
	for _, vs := range got {
		if !slices.Equal(vs, vals) {
			t.Errorf("read %d values, want %d in order (first differing at %d)", len(vs), len(vals), firstDiff(vs, vals))
		}
	}
}

// A group too large to travel inline crosses the "-main" topic to a
// ParDo with side inputs that shares the groups with another reader in
// pieces of whole values, none near the record limit, and its end record
// after them. The reader stores the pieces as they come, across cycles
// and a restart, parks the group until its side input is ready, and reads
// it whole, in order, in pages; nothing of it is left in the store after.
func TestGroupsInPieces(t *testing.T) {
	f := newPiecesFixture(t)
	const size = 100 << 10
	vals := bigValues(41, size)
	recs := f.groupRecords(t, "k", vals)
	maxVal := 0
	for _, v := range vals {
		maxVal = max(maxVal, len(v))
	}
	var pieces, ends int
	for i, r := range recs {
		switch r.Value[0] {
		case shuffle.KindGroupPiece:
			if ends > 0 {
				t.Errorf("record %d: a piece after the end record", i)
			}
			pieces++
			if len(r.Value) > maxStoredValue+maxVal+64 {
				t.Errorf("a piece of %d bytes", len(r.Value))
			}
		case shuffle.KindGroupEnd:
			ends++
			if len(r.Value) > 1024 {
				t.Errorf("an end record of %d bytes, want the element without its values", len(r.Value))
			}
		case shuffle.KindData, shuffle.KindDataPacked:
			t.Errorf("record %d: a data record of %d bytes; want the group in pieces only", i, len(r.Value))
		}
	}
	if pieces < 10 || ends != 1 {
		t.Fatalf("%d pieces and %d end records on %s, want the 4 MB group in pieces of at most 256 KiB and one end", pieces, ends, f.mainTopic)
	}

	ctx := context.Background()
	var got [][]string
	f.readerExec.each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		for range 2 { // the SDK may iterate a group twice
			vs, inline, tok, err := sdkGroup(ctx, b, in.Elem)
			if err != nil {
				return err
			}
			if !bytes.HasPrefix(tok, []byte("group/")) || inline != 0 {
				return fmt.Errorf("a group read with %d values inline and token %q; want all in pages of the cycle", inline, tok)
			}
			got = append(got, vs)
		}
		return nil
	}
	f.te.setSideWatermark(f.side, minWatermark)
	half := len(recs) / 2
	tk := f.te.task(f.main, 0)
	f.te.cycle(tk, recs[:half]...)
	came := 0
	for _, r := range recs[:half] {
		if r.Value[0] == shuffle.KindGroupPiece {
			came++
		}
	}
	if n := f.stored(t, state.GatePages); n != came || came == 0 {
		t.Fatalf("%d pieces stored after %d came", n, came)
	}
	tk.Abort()
	tk = f.te.task(f.main, 0) // the pieces so far outlive the task
	f.te.cycle(tk, recs[half:]...)
	if len(got) != 0 {
		t.Fatalf("%d group reads before the side input is ready", len(got))
	}
	if n := f.stored(t, state.Pieces); n != 0 {
		t.Errorf("%d unfinished groups in pieces after the end record", n)
	}
	f.te.setSideWatermark(f.side, 60000)
	f.te.cycle(tk)
	if len(got) != 2 {
		t.Fatalf("%d group reads once the side input is ready, want the group read twice", len(got))
	}
	checkReads(t, got, vals)
	if n := f.stored(t, state.GatePages); n != 0 {
		t.Errorf("%d pieces left in the store after the group was read", n)
	}
}

// The reader skips a group's records it took already (redelivered after
// its state committed ahead of its offsets, at_least_once: pieces again,
// an end record again after the group was parked) and drops an
// unfinished group when its producer starts another (it failed mid-group
// and sends the group again): the group is read once, whole.
func TestGroupsInPiecesRedelivered(t *testing.T) {
	f := newPiecesFixture(t)
	vals := bigValues(21, 100<<10)
	recs := f.groupRecords(t, "k", vals)
	var data []*kgo.Record // pieces and end, then the rest
	for _, r := range recs {
		if r.Value[0] == shuffle.KindGroupPiece || r.Value[0] == shuffle.KindGroupEnd {
			data = append(data, r)
		}
	}
	if len(data) < 4 {
		t.Fatalf("%d records of the group, want it in pieces", len(data))
	}
	// A producer's first attempt: its first pieces, under another seq.
	gaveUp := make([]*kgo.Record, 2)
	for i := range gaveUp {
		p, err := shuffle.DecodeGroupPiece(data[i].Value)
		if err != nil {
			t.Fatal(err)
		}
		gaveUp[i] = &kgo.Record{Value: shuffle.EncodeGroupPiece(shuffle.KindGroupPiece, p.Producer, p.Seq+100, p.N, p.Data)}
	}
	var feed []*kgo.Record
	feed = append(feed, gaveUp...)
	feed = append(feed, data[:3]...)
	feed = append(feed, data[1:]...)           // pieces 1 and 2 again
	feed = append(feed, data...)               // the whole group again, after its end
	feed = append(feed, data[len(data)-2:]...) // its last piece and end again
	var rest []*kgo.Record
	for _, r := range recs {
		if r.Value[0] != shuffle.KindGroupPiece && r.Value[0] != shuffle.KindGroupEnd {
			rest = append(rest, r)
		}
	}
	in := f.te.input(f.main, 0)
	var renumbered []*kgo.Record
	for _, r := range append(feed, rest...) {
		renumbered = append(renumbered, in.rec(r.Value))
	}
	ctx := context.Background()
	var got [][]string
	f.readerExec.each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		vs, _, _, err := sdkGroup(ctx, b, in.Elem)
		got = append(got, vs)
		return err
	}
	f.te.setSideWatermark(f.side, maxWatermark)
	tk := f.te.task(f.main, 0)
	f.te.cycle(tk, renumbered[:5]...)
	if n := f.stored(t, state.GatePages); n != 3 {
		t.Errorf("%d pieces stored after a group given up and 3 pieces of its retry, want 3", n)
	}
	f.te.cycle(tk, renumbered[5:]...)
	f.te.cycle(tk)
	f.te.cycle(tk)
	// The whole group sent again after its end is a group of its own
	// (at_least_once duplicates), read once more.
	if len(got) != 2 {
		t.Fatalf("%d group reads, want the group and its resend", len(got))
	}
	checkReads(t, got, vals)
	if n := f.stored(t, state.GatePages); n != 0 {
		t.Errorf("%d pieces left in the store", n)
	}
}

// A value larger than the topic's records, which no piece can hold, fails
// the GroupByKey's task naming the group's PCollection and the topic,
// rather than the producer's MESSAGE_TOO_LARGE naming the topic alone.
func TestGroupPieceTooLarge(t *testing.T) {
	f := newPiecesFixture(t)
	f.te.env.Topics.MaxMessageBytes[f.mainTopic] = 1 << 20
	f.te.env.Topics.MaxMessageBytes[f.te.env.Topics.Full(topics.ChangelogTopic(f.gbk.ID))] = 8 << 20
	tk := f.te.task(f.gbk, 0)
	in := f.te.input(f.gbk, 0)
	recs := in.data(wv(1000, kv("k", strings.Repeat("x", 2<<20)), interval(0, 60000)), wv(1000, kv("k", "y"), interval(0, 60000)))
	ctx := context.Background()
	if err := tk.Handle(ctx, recs); err != nil {
		t.Fatal(err)
	}
	f.te.cycle(tk)
	err := tk.Handle(ctx, []*kgo.Record{in.wm(f.te.producer(f.gbk, 0), 70000)})
	if err == nil {
		err = tk.PrepareCommit(ctx)
	}
	for _, want := range []string{"output of transform", "sending a group in pieces to " + f.mainTopic, "does not fit in a record of the topic, which takes at most 1048576 bytes", "internal_max_message_bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v; want %q in it", err, want)
		}
	}
	for _, r := range f.te.take() {
		if len(r.Value) > 1<<20 {
			t.Errorf("a record of %d bytes produced to %s", len(r.Value), r.Topic)
		}
	}
}

// Under exactly_once nothing a task took comes again, so a piece out of
// line is a fault: the task fails naming the record and what it expected,
// rather than skipping it as an at_least_once redelivery.
func TestGroupPieceOutOfLineExactlyOnce(t *testing.T) {
	cases := []struct {
		name string
		pick func(data []*kgo.Record) []*kgo.Record
		want string
	}{
		{"a piece again", func(d []*kgo.Record) []*kgo.Record { return []*kgo.Record{d[0], d[1], d[1]} },
			"while its group 0 awaits piece 2"},
		{"a piece skipped", func(d []*kgo.Record) []*kgo.Record { return []*kgo.Record{d[0], d[2]} },
			"while its group 0 awaits piece 1"},
		{"no piece 0", func(d []*kgo.Record) []*kgo.Record { return []*kgo.Record{d[1]} },
			"of which no piece 0 came"},
		{"an end too early", func(d []*kgo.Record) []*kgo.Record { return []*kgo.Record{d[0], d[len(d)-1]} },
			"the end of group 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newPiecesFixture(t)
			f.te.env.ExactlyOnce = true
			var data []*kgo.Record
			for _, r := range f.groupRecords(t, "k", bigValues(21, 100<<10)) {
				if r.Value[0] == shuffle.KindGroupPiece || r.Value[0] == shuffle.KindGroupEnd {
					data = append(data, r)
				}
			}
			if len(data) < 4 {
				t.Fatalf("%d records of the group, want it in pieces", len(data))
			}
			in := f.te.input(f.main, 0)
			var feed []*kgo.Record
			for _, r := range c.pick(data) {
				feed = append(feed, in.rec(r.Value))
			}
			f.te.setSideWatermark(f.side, maxWatermark)
			err := f.te.task(f.main, 0).Handle(context.Background(), feed)
			last := feed[len(feed)-1]
			for _, want := range []string{fmt.Sprintf("topic %s partition 0 offset %d", last.Topic, last.Offset), c.want, "out of line under exactly_once"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%v; want %q in it", err, want)
				}
			}
		})
	}
}
