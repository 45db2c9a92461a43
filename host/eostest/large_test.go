package eostest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function1x2(toLargeKV)
	register.Function3x1(summarizeLarge)
	register.Function2x1(summarizeLargeStable)
	register.Function2x1(largeGroupKey)
}

// largeGroupKey is a group's key.
func largeGroupKey(k string, _ func(*string) bool) string { return k }

// largeValues is how many values of about 1 KiB toLargeKV makes: nearly
// all on one key, a group of about 4 MB.
const largeValues = 4000

// toLargeKV keys i to "hot", or one of three cold keys, with a value that
// starts with i and goes on in random letters (seeded by i: the same on
// every retry), which compress no better than Kafka's limits count them.
func toLargeKV(i int) (string, string) {
	k := "hot"
	if i%100 == 0 {
		k = fmt.Sprintf("cold%d", i/100%3)
	}
	r := rand.New(rand.NewPCG(uint64(i), 2))
	b := []byte(fmt.Sprintf("%06d", i))
	for range 1000 {
		b = append(b, byte('a'+r.IntN(26)))
	}
	return k, string(b)
}

// largeGroups is how many values each key of toLargeKV's has, and the sum
// of their indices.
func largeGroups() (n, sum map[string]int) {
	n, sum = map[string]int{}, map[string]int{}
	for i := range largeValues {
		k, _ := toLargeKV(i)
		n[k]++
		sum[k] += i
	}
	return n, sum
}

// largeIndices are the indices toLargeKV takes: 0 to largeValues-1.
func largeIndices() []int {
	in := make([]int, largeValues)
	for i := range in {
		in[i] = i
	}
	return in
}

// summarizeLarge counts a group's values and sums their indices (a value
// lost or read twice shows), with the side input's elements.
// summarizeLargeStable is summarizeLarge with the side input "stable".
func summarizeLargeStable(k string, vs func(*string) bool) string {
	done := false
	return summarizeLarge(k, vs, func(v *string) bool {
		if done {
			return false
		}
		*v, done = "stable", true
		return true
	})
}

func summarizeLarge(k string, vs func(*string) bool, side func(*string) bool) string {
	var n, sum int
	var v string
	for vs(&v) {
		i, err := strconv.Atoi(v[:6])
		if err != nil {
			panic(err)
		}
		n, sum = n+1, sum+i
	}
	var sides []string
	for side(&v) {
		sides = append(sides, v)
	}
	slices.Sort(sides)
	return fmt.Sprintf("%s %d %d %s", k, n, sum, strings.Join(sides, ","))
}

// TestLargeGroupsUnderAbortedCycles: groups read by a ParDo with a side
// input, the hot one about 4 MB, with every other commit cycle aborted
// after its records reached the broker; each group must be summarized
// exactly once, complete. With a side input that does not wait on the
// GroupByKey, the ParDo reads the groups where they are, each held in the
// store until the side input is ready, then read in pages. With one made
// from the groups (their keys), the ParDo heads a sub-topology of its own:
// the hot group crosses its main-input topic in pieces, each stored by the
// reader as it comes, and is parked for the side input until its pieces
// are read in pages.
// Behind session windows the ParDo stays with the GroupByKey and parks the
// panes its side input is not ready for, a large one's values copied into
// the store in pieces.
func TestLargeGroupsUnderAbortedCycles(t *testing.T) {
	n, sum := largeGroups()
	keys := slices.Sorted(maps.Keys(n))
	for _, tc := range []struct {
		name  string
		side  func(s beam.Scope, groups beam.PCollection) beam.PCollection
		sides string // the side input's elements, as summarizeLarge joins them
		// sessions groups in session windows (a windowed GroupByKey),
		// the side input made by another GroupByKey of the pairs.
		sessions bool
	}{
		{"side input ready apart", func(s beam.Scope, _ beam.PCollection) beam.PCollection {
			return beam.CreateList(s, []string{"x", "y"})
		}, "x,y", false},
		{"side input made from the groups", func(s beam.Scope, groups beam.PCollection) beam.PCollection {
			return beam.ParDo(s, largeGroupKey, groups)
		}, strings.Join(keys, ","), false},
		{"side input ready after the panes of session windows", nil, strings.Join(keys, ","), true},
		// No side input: a ParDo requiring stable input heads a
		// sub-topology of its own, and the groups cross its topic in
		// pieces, held until the cycle after their last piece.
		{"stable input", nil, "stable", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aborted := abortCycles(t)
			out := filepath.Join(t.TempDir(), "groups.txt")
			p, s := beam.NewPipelineWithRoot()
			in := largeIndices()
			kvs := beam.ParDo(s, toLargeKV, beam.CreateList(s, in))
			var summaries beam.PCollection
			if tc.sessions {
				// The ParDo stays with the GroupByKey and parks each
				// pane (the hot one's values copied into the store)
				// until the side input, complete one topic after the
				// panes fire, is ready.
				kvs = beam.WindowInto(s, window.NewSessions(time.Minute), kvs)
				side := beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, largeGroupKey, beam.GroupByKey(s, kvs)))
				summaries = beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, summarizeLarge, beam.GroupByKey(s, kvs), beam.SideInput{Input: side}))
			} else if tc.side == nil {
				summaries = beam.ParDo(s, summarizeLargeStable, beam.GroupByKey(s, kvs))
			} else {
				groups := beam.GroupByKey(s, kvs)
				summaries = beam.ParDo(s, summarizeLarge, groups, beam.SideInput{Input: tc.side(s, groups)})
			}
			textio.Write(s, out, summaries)
			pipe := env.Marshal(t, p)
			if tc.side == nil && !tc.sessions {
				if err := pipelinetest.RequireStableInput(pipe, "summarizeLargeStable"); err != nil {
					t.Fatal(err)
				}
			}
			runDone(t, pipe, map[string]string{"processing_guarantee": "exactly_once", "commit_interval_ms": "20"})
			if n := aborted(); n < 3 {
				t.Fatalf("only %d commit cycles were aborted, want at least 3", n)
			}
			var want []string
			for _, k := range keys {
				want = append(want, fmt.Sprintf("%s %d %d %s", k, n[k], sum[k], tc.sides))
			}
			files, _ := filepath.Glob(out + "*")
			var got []string
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if l := strings.TrimSpace(string(b)); l != "" {
					got = append(got, strings.Split(l, "\n")...)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("after %d aborted cycles: groups %q, want %q", aborted(), got, want)
			}
		})
	}
}

// TestLargeGroupsInPiecesAtLeastOnce: the hot group crossing its reader's
// topic in pieces under at_least_once, with every other commit cycle
// aborted. An aborted cycle's records stay: a GroupByKey task that fires
// again sends the group again, after pieces (or a whole group) the reader
// may have taken, and a reader redoing a cycle gets pieces again. Each
// key's group is summarized, possibly more than once, and never with
// fewer values than it has (a piece lost, or a group read before its
// pieces were all stored, would show).
func TestLargeGroupsInPiecesAtLeastOnce(t *testing.T) {
	n, sum := largeGroups()
	aborted := abortCycles(t)
	out := filepath.Join(t.TempDir(), "groups.txt")
	p, s := beam.NewPipelineWithRoot()
	in := largeIndices()
	groups := beam.GroupByKey(s, beam.ParDo(s, toLargeKV, beam.CreateList(s, in)))
	textio.Write(s, out, beam.ParDo(s, summarizeLarge, groups, beam.SideInput{Input: beam.ParDo(s, largeGroupKey, groups)}))
	runDone(t, env.Marshal(t, p), map[string]string{"processing_guarantee": "at_least_once", "commit_interval_ms": "20"})
	if a := aborted(); a < 3 {
		t.Fatalf("only %d commit cycles were aborted, want at least 3", a)
	}
	files, _ := filepath.Glob(out + "*")
	seen := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			var k string
			var gn, gsum int
			if _, err := fmt.Sscanf(l, "%s %d %d", &k, &gn, &gsum); err != nil {
				t.Fatalf("output line %q: %v", l, err)
			}
			seen[k]++
			if gn < n[k] || gsum < sum[k] {
				t.Errorf("group %s summarized with %d values summing to %d, want at least its %d values summing to %d", k, gn, gsum, n[k], sum[k])
			}
		}
	}
	for k := range n {
		if seen[k] == 0 {
			t.Errorf("group %s not summarized", k)
		}
	}
	t.Logf("at_least_once after %d aborted cycles: summaries per key %v", aborted(), seen)
}
