package state

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// A time-ordered index scanned from its Floor finds what a scan from its
// prefix finds, after random sequences of sets, deletes, due scans (which
// delete what they find and raise the floor to their bound), earliest
// lookups (which raise it to the entry found), committed cycles and
// aborted ones (which drop the batch and start again with a new floor, as
// a reopened task does).
func TestFloorScansSeeEveryLiveEntry(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { floorRun(t, seed) })
	}
}

func floorRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	db := memDB(t)
	prefix := []byte("tE")
	key := func(ms int64, id int) []byte {
		return fmt.Appendf(binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), EventTimeBits(ms)), "%d", id)
	}
	// scan is the keys in [lower, upper).
	scan := func(r pebble.Reader, lower, upper []byte) [][]byte {
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var out [][]byte
		for it.First(); it.Valid(); it.Next() {
			out = append(out, slices.Clone(it.Key()))
		}
		return out
	}
	end := PrefixEnd(prefix)
	b := db.NewIndexedBatch()
	var f Floor
	base := int64(0)
	for step := range 400 {
		switch op := rng.IntN(10); {
		case op < 4: // a timer set, maybe in the past
			ms := base - 50 + rng.Int64N(200)
			if err := b.Set(key(ms, rng.IntN(1000)), nil, nil); err != nil {
				t.Fatal(err)
			}
			f.Wrote(ms)
		case op < 5: // a timer cleared
			if live := scan(b, prefix, end); len(live) > 0 {
				if err := b.Delete(live[rng.IntN(len(live))], nil); err != nil {
					t.Fatal(err)
				}
			}
		case op < 7: // due timers fire
			upTo := base + rng.Int64N(100)
			upper := binary.BigEndian.AppendUint64(slices.Clone(prefix), EventTimeBits(upTo))
			want := scan(b, prefix, upper)
			var got [][]byte
			if lower := f.Lower(prefix); string(lower) < string(upper) {
				got = scan(b, lower, upper)
			}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("step %d: due before %d from the floor %q, from the prefix %q", step, upTo, got, want)
			}
			for _, k := range got {
				if err := b.Delete(k, nil); err != nil {
					t.Fatal(err)
				}
			}
			f.Raise(upTo)
			base = max(base, upTo)
		case op < 8: // the earliest entry (a watermark hold)
			want := scan(b, prefix, end)
			got := scan(b, f.Lower(prefix), end)
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("step %d: from the floor %q, from the prefix %q", step, got, want)
			}
			if len(got) == 0 {
				f.Raise(math.MaxInt64)
			} else {
				f.Raise(int64(binary.BigEndian.Uint64(got[0][len(prefix):]) ^ (1 << 63)))
			}
		case op < 9: // the cycle commits
			if err := b.Commit(pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			b.Close()
			b = db.NewIndexedBatch()
		default: // the cycle aborts: the task reopens with a new floor
			b.Close()
			b = db.NewIndexedBatch()
			f = Floor{}
		}
	}
	b.Close()
}
