package state

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/shuffle"
)

// entry is one value of an ordered list state: its sort key and a string.
type entry struct {
	ts int64
	v  string
}

// orderedEntries encodes entries as an SDK sends and reads them: a varint
// sort key, then the element (here in the string_utf8 coder).
func orderedEntries(t testing.TB, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, e := range es {
		if err := coder.EncodeVarInt(e.ts, &b); err != nil {
			t.Fatal(err)
		}
		if err := coder.EncodeStringUTF8(e.v, &b); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// testOrdered is the ordered list splitter the task builds, for the string
// ordered list states of the tests (every transform and state id of cells).
func testOrdered(t testing.TB) map[[2]string]func([]byte) (int, error) {
	t.Helper()
	coders := map[string]*pipepb.Coder{"s": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:string_utf8:v1"}}}
	f, err := shuffle.ValueLength(coders, "s")
	if err != nil {
		t.Fatal(err)
	}
	m := map[[2]string]func([]byte) (int, error){}
	for _, id := range [][2]string{{"t1", "s1"}, {"t2", "s1"}, {"t1", "s2"}, {"t", "1s1"}} {
		m[id] = f
	}
	return m
}

// sortedIn is what an ordered list of es returns for [start, end): the
// entries in the range, by sort key, ties in append order.
func sortedIn(es []entry, start, end int64) []entry {
	var out []entry
	for _, e := range es {
		if e.ts >= start && e.ts < end {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b entry) int { return cmp.Compare(a.ts, b.ts) })
	return out
}

func TestOrderedListState(t *testing.T) {
	base, nb := cells(t)
	type rng struct{ start, end int64 }
	tests := []struct {
		name    string
		appends [][]entry // one Append each
		reads   []rng
	}{
		{
			name:    "sorted by sort key, ties in append order",
			appends: [][]entry{{{5, "a"}, {1, "b"}}, {{5, "c"}, {-3, "d"}}, {{1, "e"}}},
			reads:   []rng{{-10, 10}, {1, 5}, {5, 6}, {-3, -2}, {-2, 1}, {6, 100}, {5, 5}, {math.MinInt64, math.MaxInt64}},
		},
		{
			name:    "the range is [start, end)",
			appends: [][]entry{{{0, "zero"}, {10, "ten"}, {9, "nine"}, {11, "eleven"}}},
			reads:   []rng{{0, 10}, {1, 10}, {0, 11}, {10, 11}, {9, 9}},
		},
		{
			name: "extreme sort keys",
			appends: [][]entry{{
				{int64(mtime.MaxTimestamp), "max"}, {int64(mtime.MinTimestamp), "min"},
				{math.MinInt64, "minint"}, {math.MaxInt64 - 1, "maxint-1"}, {-1, "-1"}, {0, "0"},
			}},
			reads: []rng{{math.MinInt64, math.MaxInt64}, {math.MinInt64, 0}, {0, math.MaxInt64}, {int64(mtime.MinTimestamp), int64(mtime.MaxTimestamp) + 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewStageHandler(newUser(t, memDB(t), testPrefix), nil, testOrdered(t))
			var all []entry
			for _, es := range tc.appends {
				mustAppend(t, h, base.ordered(0, 0), orderedEntries(t, es...))
				all = append(all, es...)
			}
			// A neighbour's entries in the same ranges never show up.
			mustAppend(t, h, nb["other key"].ordered(0, 0), orderedEntries(t, entry{0, "other"}, entry{5, "other"}))
			for _, r := range tc.reads {
				want := orderedEntries(t, sortedIn(all, r.start, r.end)...)
				if got := mustGet(t, h, base.ordered(r.start, r.end)); !bytes.Equal(got, want) {
					t.Errorf("range [%d, %d) = %x, want %x", r.start, r.end, got, want)
				}
			}
		})
	}
}

// FuzzOrderedList: for any appends, an ordered list returns the entries of
// a range sorted by sort key (ties in append order), before and after a
// commit, and a range Clear removes exactly that range.
func FuzzOrderedList(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 2, 3, 4, 5})
	f.Add([]byte{0x80, 0x7f, 5, 'a', 0, 5, 'b', 1, 0xfb, 'c', 0})
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		b := make([]byte, 3+r.IntN(90))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		// The first two bytes are a range, the rest entries of three
		// bytes: sort key, value, and whether a new Append starts after it.
		lo, hi := int64(int8(b[0])), int64(int8(b[1]))
		base, _ := cells(t)
		db := memDB(t)
		u := newUser(t, db, testPrefix)
		h := NewStageHandler(u, nil, testOrdered(t))
		var all, pending []entry
		flush := func() {
			if len(pending) > 0 {
				mustAppend(t, h, base.ordered(0, 0), orderedEntries(t, pending...))
				pending = nil
			}
		}
		for b = b[2:]; len(b) >= 3; b = b[3:] {
			e := entry{int64(int8(b[0])), string(rune('a' + b[1]%26))}
			all, pending = append(all, e), append(pending, e)
			if b[2]&1 == 1 {
				flush()
			}
		}
		flush()
		check := func(when string, h *StageHandler, es []entry) {
			for _, r := range [][2]int64{{math.MinInt64, math.MaxInt64}, {lo, hi}} {
				want := orderedEntries(t, sortedIn(es, r[0], r[1])...)
				if got := mustGet(t, h, base.ordered(r[0], r[1])); !bytes.Equal(got, want) {
					t.Fatalf("%s: range [%d, %d) = %x, want %x", when, r[0], r[1], got, want)
				}
			}
		}
		check("before commit", h, all)
		if err := u.Commit(); err != nil {
			t.Fatal(err)
		}
		h = NewStageHandler(newUser(t, db, testPrefix), nil, testOrdered(t))
		check("after commit", h, all)
		mustClear(t, h, base.ordered(lo, hi))
		kept := slices.DeleteFunc(slices.Clone(all), func(e entry) bool { return e.ts >= lo && e.ts < hi })
		check("after clearing the range", h, kept)
	})
}
