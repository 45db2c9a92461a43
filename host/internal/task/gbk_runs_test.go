package task

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/ksrunner/ksrunner/host/internal/state"
)

// runTestValue is one buffered value and the offset of its record.
type runTestValue struct {
	off int64
	v   string
}

// runTestStore builds the stored run of one key and window from the values of
// one commit interval, as buffer and flushBuffered do.
func runTestStore(t *testing.T, vals ...runTestValue) (first int64, data []byte) {
	t.Helper()
	var g gbkRuns
	for _, v := range vals {
		g.add([]byte("k"), nil, []byte(v.v), v.off)
	}
	if len(g.runs) != 1 {
		t.Fatalf("%d runs for one key and window", len(g.runs))
	}
	for _, r := range g.runs {
		return r.first, r.data
	}
	return 0, nil
}

// runTestRead reads stored runs back in key (first offset) order, as emitGroup
// does. Runs with the same first offset are one state key: the later wins.
func runTestRead(t *testing.T, runs ...[]runTestValue) []string {
	t.Helper()
	stored := map[int64][]byte{}
	for _, r := range runs {
		first, data := runTestStore(t, r...)
		stored[first] = data
	}
	var out []byte
	n, last := 0, int64(-1)
	for _, first := range slices.Sorted(maps.Keys(stored)) {
		var m int
		var err error
		if out, m, _, _, err = appendRun(out, stored[first], first, 0, &last, math.MaxInt); err != nil {
			t.Fatal(err)
		}
		n += m
	}
	var got []string
	for i := 0; i < n; i++ {
		got = append(got, string(out[i]))
	}
	return got
}

func TestGBKRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs [][]runTestValue // the runs of one key, as committed, in commit order
		want string
	}{
		{"one run", [][]runTestValue{{{10, "a"}, {12, "b"}, {400, "c"}}}, "abc"},
		{"intervals", [][]runTestValue{{{10, "a"}, {12, "b"}}, {{20, "c"}}, {{35, "d"}, {36, "e"}}}, "abcde"},
		{"offset 0", [][]runTestValue{{{0, "a"}, {1, "b"}}}, "ab"},
		// State applied, offsets not committed: the interval is delivered
		// again, from the same offset, maybe cut elsewhere.
		{"redelivered whole", [][]runTestValue{{{10, "a"}, {12, "b"}}, {{10, "a"}, {12, "b"}}, {{20, "c"}}}, "abc"},
		{"redelivered shorter", [][]runTestValue{{{10, "a"}, {12, "b"}}, {{10, "a"}}, {{12, "b"}, {20, "c"}}}, "abc"},
		{"redelivered longer", [][]runTestValue{{{10, "a"}, {12, "b"}}, {{10, "a"}, {12, "b"}, {20, "c"}}, {{30, "d"}}}, "abcd"},
		// The key's first record of the redelivered interval comes after the
		// first of the stored run: another state key, overlapping.
		{"overlap", [][]runTestValue{{{5, "x"}, {12, "b"}, {14, "c"}}, {{12, "b"}, {14, "c"}, {20, "d"}}}, "xbcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runTestRead(t, tc.runs...)
			if s := fmt.Sprint(got); s != fmt.Sprint(runTestChars(tc.want)) {
				t.Errorf("values %s, want %v", s, runTestChars(tc.want))
			}
		})
	}
}

func runTestChars(s string) []string {
	var out []string
	for _, c := range s {
		out = append(out, string(c))
	}
	return out
}

func TestGBKRunsWindowsAndKeys(t *testing.T) {
	var g gbkRuns
	g.add([]byte("k1"), []byte("w1"), []byte("a"), 7)
	g.add([]byte("k1"), []byte("w2"), []byte("a"), 7)
	g.add([]byte("k2"), []byte("w1"), []byte("b"), 8)
	g.add([]byte("k1"), []byte("w1"), []byte("c"), 9)
	want := map[string]string{
		string(state.AppendLP(state.AppendLP(nil, []byte("k1")), []byte("w1"))): "ac",
		string(state.AppendLP(state.AppendLP(nil, []byte("k1")), []byte("w2"))): "a",
		string(state.AppendLP(state.AppendLP(nil, []byte("k2")), []byte("w1"))): "b",
	}
	if len(g.runs) != len(want) {
		t.Fatalf("%d runs, want %d", len(g.runs), len(want))
	}
	for kw, w := range want {
		r := g.runs[kw]
		if r == nil {
			t.Fatalf("no run for %q", kw)
		}
		last := int64(-1)
		out, n, _, _, err := appendRun(nil, r.data, r.first, 0, &last, math.MaxInt)
		if err != nil || string(out) != w || n != len(w) {
			t.Errorf("run %q: %q, %d values, %v; want %q", kw, out, n, err, w)
		}
	}
}

func TestAppendRunCorrupt(t *testing.T) {
	last := int64(-1)
	for _, run := range [][]byte{{0x80}, {0, 5, 'a'}, {0}} {
		if _, _, _, _, err := appendRun(nil, run, 0, 0, &last, math.MaxInt); err == nil {
			t.Errorf("run %x: no error", run)
		}
	}
}
