package task

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/shuffle"
)

// sdkGroup reads a grouped element as an SDK does: the values inline, then,
// for a state-backed iterable, every page of the runner state behind its
// token through the bundle's state handler. It returns the string values,
// the number inline, and the token (nil: not paged).
func sdkGroup(ctx context.Context, b *fakeBundle, elem []byte) (vals []string, inline int, token []byte, err error) {
	n, l := binary.Uvarint(elem) // the key, a string
	if l <= 0 {
		return nil, 0, nil, errors.New("bad key")
	}
	b2 := elem[l+int(n):]
	str := func(p []byte) (rest []byte, err error) {
		for len(p) > 0 {
			n, l := binary.Uvarint(p)
			if l <= 0 || uint64(len(p)-l) < n {
				return nil, errors.New("truncated value")
			}
			vals = append(vals, string(p[l:l+int(n)]))
			p = p[l+int(n):]
		}
		return nil, nil
	}
	count := int32(binary.BigEndian.Uint32(b2))
	b2 = b2[4:]
	if count >= 0 {
		_, err := str(b2)
		return vals, len(vals), nil, err
	}
	for {
		cnt, l := binary.Uvarint(b2)
		b2 = b2[l:]
		if cnt == math.MaxUint64 {
			tl, l := binary.Uvarint(b2)
			token = b2[l : l+int(tl)]
			break
		}
		if cnt == 0 {
			return vals, len(vals), nil, nil
		}
		// The values of a block, up to where the next block count is:
		// string values, each uvarint length + bytes.
		for range cnt {
			n, l := binary.Uvarint(b2)
			vals = append(vals, string(b2[l:l+int(n)]))
			b2 = b2[l+int(n):]
		}
	}
	inline = len(vals)
	key := &fnpb.StateKey{Type: &fnpb.StateKey_Runner_{Runner: &fnpb.StateKey_Runner{Key: token}}}
	var cont []byte
	for pages := 0; ; pages++ {
		data, next, err := b.io.State.Get(ctx, key, cont)
		if err != nil {
			return nil, 0, nil, err
		}
		if len(data) > groupPageBytes+(256<<10) {
			return nil, 0, nil, fmt.Errorf("page of %d bytes", len(data))
		}
		if _, err := str(data); err != nil {
			return nil, 0, nil, err
		}
		if next == nil {
			return vals, inline, token, nil
		}
		cont = next
	}
}

// A group of several MB (committed runs, runs of the firing cycle, values
// delivered twice) reaches the stage with about inlineGroupBytes of its
// values inline and the rest behind a token; reading the token's pages
// gives every other value once, in order, as often as the SDK reads them
// (a re-iterable), until the cycle commits.
func TestGroupByKeyPagedGroups(t *testing.T) {
	f := newGroupFixture(t)
	if !f.sub.Root.PagedGroups {
		t.Fatal("the grouping pipeline's GroupByKey does not page its groups")
	}
	ctx := context.Background()
	const size = 100 << 10
	vals := bigValues(40, size)
	w := interval(0, 60000)
	var recs []*kgo.Record
	for _, v := range vals {
		recs = append(recs, f.in.data(wv(1000, kv("k", v), w))...)
	}
	small := f.in.data(wv(1000, kv("small", "x"), w))

	var got [][]string
	var inline []int
	var tokens [][]byte
	var elemSize []int
	f.te.exec(f.sub).each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		for range 2 { // the SDK may iterate a group twice
			vs, n, tok, err := sdkGroup(ctx, b, in.Elem)
			if err != nil {
				return err
			}
			got, inline, tokens, elemSize = append(got, vs), append(inline, n), append(tokens, tok), append(elemSize, len(in.Raw))
		}
		return nil
	}
	f.te.cycle(f.tk, recs[:20]...)                                                                        // committed runs
	f.te.cycle(f.tk, append(append(slices.Clone(recs[10:]), small...), f.in.wm(f.prod, maxWatermark))...) // redelivered, new, and the firing
	if len(got) != 4 {
		t.Fatalf("%d group reads, want 2 groups read twice", len(got))
	}
	var paged int
	for n, vs := range got {
		want := vals
		if len(vs) == 1 && vs[0] == "x" {
			want = []string{"x"}
		}
		if !slices.Equal(vs, want) {
			t.Errorf("read %d: %d values, want %d in order (first differing at %d)", n, len(vs), len(want), firstDiff(vs, want))
		}
		if len(want) == 1 {
			if tokens[n] != nil {
				t.Errorf("a one-value group was paged")
			}
			continue
		}
		paged++
		if tokens[n] == nil {
			t.Fatalf("a group of %d MB sent whole (%d bytes)", len(vals)*size>>20, elemSize[n])
		}
		if inline[n] == 0 || inline[n] >= len(vals) {
			t.Errorf("%d values inline, want some and not all", inline[n])
		}
		if elemSize[n] > inlineGroupBytes+2*size+1024 {
			t.Errorf("a paged element of %d bytes", elemSize[n])
		}
	}
	if paged != 2 {
		t.Errorf("%d paged reads, want 2", paged)
	}
	// The cycle committed: its groups are gone.
	b := &fakeBundle{io: executor.BundleIO{State: f.tk.stages[0].state}}
	key := &fnpb.StateKey{Type: &fnpb.StateKey_Runner_{Runner: &fnpb.StateKey_Runner{Key: tokens[1]}}}
	if _, _, err := b.io.State.Get(ctx, key, nil); err == nil || !strings.Contains(err.Error(), "no such group") {
		t.Errorf("reading a group after its cycle committed: %v, want no such group", err)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if !bytes.Equal([]byte(a[i]), []byte(b[i])) {
			return i
		}
	}
	return min(len(a), len(b))
}

// Continuation tokens round-trip, and malformed ones are refused.
func TestGroupContinuationTokens(t *testing.T) {
	for _, tc := range [][3]int64{{0, 0, -1}, {3, 1 << 20, 1 << 40}, {math.MaxInt32, 7, -5}} {
		r, p, l, from, err := decodeGroupCont(encodeGroupCont(int(tc[0]), int(tc[1]), tc[2], nil))
		if err != nil || from != nil || int64(r) != tc[0] || int64(p) != tc[1] || l != tc[2] {
			t.Errorf("%v: decoded %d %d %d (%v)", tc, r, p, l, err)
		}
	}
	if _, _, _, from, err := decodeGroupCont(encodeGroupCont(2, 0, -1, []byte("key\x00"))); err != nil || string(from) != "key\x00" {
		t.Errorf("a continuation key decoded as %q (%v)", from, err)
	}
	for _, bad := range [][]byte{nil, {0x80}, {1, 2}, append(encodeGroupCont(1, 2, 3, nil), 0), encodeGroupCont(1, 2, 3, []byte("k"))[:4]} {
		if _, _, _, _, err := decodeGroupCont(bad); err == nil {
			t.Errorf("%x decoded", bad)
		}
	}
}

// A windowed pane over inlineGroupBytes is paged like a fast-path group:
// an on-time pane of values committed in an earlier cycle (read from the
// DB) and values of the firing cycle (copied), then, accumulating, a late
// pane of every value; each read whole, in order, twice.
func TestWindowedPanesPaged(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t,
		beam.Trigger(trigger.AfterEndOfWindow().LateFiring(trigger.AfterCount(1))),
		beam.AllowedLateness(time.Minute), beam.PanesAccumulate())), 1)
	f := newGroupFixtureIn(t, te, 0)
	if !f.sub.Root.Windowed || !f.sub.Root.PagedGroups {
		t.Fatalf("the GroupByKey: windowed %v, paged %v; want both", f.sub.Root.Windowed, f.sub.Root.PagedGroups)
	}
	ctx := context.Background()
	const size = 100 << 10
	vals := bigValues(41, size)
	w := interval(0, 60000)
	var recs []*kgo.Record
	for _, v := range vals {
		recs = append(recs, f.in.data(wv(1000, kv("k", v), w))...)
	}
	var got [][]string
	var tokens [][]byte
	f.te.exec(f.sub).each = func(b *fakeBundle, in shuffle.WindowedValue) error {
		for range 2 {
			vs, inline, tok, err := sdkGroup(ctx, b, in.Elem)
			if err != nil {
				return err
			}
			if tok == nil || inline == 0 || inline >= len(vs) {
				return fmt.Errorf("a pane of %d values: %d inline, token %q; want paged", len(vs), inline, tok)
			}
			got, tokens = append(got, vs), append(tokens, tok)
		}
		return nil
	}
	f.te.cycle(f.tk, append(slices.Clone(recs[:20]), f.in.wm(f.prod, 30000))...)
	if len(got) != 0 {
		t.Fatalf("%d panes before the window's end", len(got))
	}
	f.te.cycle(f.tk, append(slices.Clone(recs[20:40]), f.in.wm(f.prod, 60000))...) // on time
	f.te.cycle(f.tk, recs[40])                                                     // late
	if len(got) != 4 {
		t.Fatalf("%d pane reads, want 2 panes read twice", len(got))
	}
	for i, vs := range got {
		want := vals[:40]
		if i >= 2 {
			want = vals
		}
		if !slices.Equal(vs, want) {
			t.Errorf("read %d: %d values, want %d in order (first differing at %d)", i, len(vs), len(want), firstDiff(vs, want))
		}
	}
	b := &fakeBundle{io: executor.BundleIO{State: f.tk.stages[0].state}}
	key := &fnpb.StateKey{Type: &fnpb.StateKey_Runner_{Runner: &fnpb.StateKey_Runner{Key: tokens[3]}}}
	if _, _, err := b.io.State.Get(ctx, key, nil); err == nil || !strings.Contains(err.Error(), "no such group") {
		t.Errorf("reading a pane after its cycle committed: %v, want no such group", err)
	}
}

// paneRuns pages the values the batch shows from where its iterator
// stands: committed ones from the DB, the batch's own copied, never a
// committed value the batch deleted.
func TestPaneRuns(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "p/%04d", i) }
	val := func(i int) []byte { return strEl(strings.Repeat("v", 1000) + strconv.Itoa(i)) }
	const n = 3000
	for i := 0; i < n; i += 2 { // even values committed
		if err := db.Set(key(i), val(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch := db.NewIndexedBatch()
	var want []string
	for i := range n {
		switch {
		case i%2 == 1: // odd values only in the batch
			batch.Set(key(i), val(i), nil)
		case i%10 == 4: // some committed ones deleted
			batch.Delete(key(i), nil)
			continue
		}
		if i >= 100 {
			want = append(want, string(val(i)))
		}
	}
	// runs of committed values only, too
	for i := 2000; i < n; i++ {
		if i%2 == 1 {
			batch.Delete(key(i), nil)
		}
	}
	want = slices.DeleteFunc(want, func(s string) bool {
		i, _ := strconv.Atoi(strings.TrimLeft(s[2:], "v"))
		return i >= 2000 && i%2 == 1
	})
	it, err := batch.NewIter(&pebble.IterOptions{LowerBound: []byte("p/"), UpperBound: []byte("p0")})
	if err != nil {
		t.Fatal(err)
	}
	it.SeekGE(key(100))
	g, err := paneRuns(db, it, []byte("p0"))
	if err != nil {
		t.Fatal(err)
	}
	it.Close()
	pages := &groupPages{db: db}
	token := pages.add(g)
	var got []string
	var cont []byte
	for npages := 0; ; npages++ {
		data, next, err := pages.page(token, cont)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > groupPageBytes+1100 {
			t.Fatalf("a page of %d bytes", len(data))
		}
		for len(data) > 0 {
			l, m := binary.Uvarint(data)
			got = append(got, string(data[:m+int(l)]))
			data = data[m+int(l):]
		}
		if next == nil {
			if npages == 0 {
				t.Errorf("%d values in one page", len(got))
			}
			break
		}
		cont = next
	}
	if !slices.Equal(got, want) {
		t.Errorf("%d values, want %d (first differing at %d)", len(got), len(want), firstDiff(got, want))
	}
	batch.Close()
}
