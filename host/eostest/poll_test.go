package eostest

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ksrunner/ksrunner/host"
)

// read_max_elements_per_poll bounds the elements of a commit cycle: no
// cycle of a GroupByKey + sum over 5,000 elements consumes more than 300
// unpacked, and packed (a record holds some 50 elements at 1 KiB packs;
// a pack counts its elements) none more than 375 (a cycle may pass the
// bound by a quarter before it is cut, the rest rewound to the next); some
// cycles come near the bound (the GroupByKey's input arrives in full
// polls), and the sums are exact: the records a cut leaves are read again,
// none lost or doubled.
func TestReadMaxElementsPerPoll(t *testing.T) {
	const n, bound = 5000, 300
	for _, c := range []struct {
		pack      string
		most, low int // no cycle above most; some at low or above
	}{
		{pack: "0", most: bound, low: bound},
		{pack: "1024", most: bound + bound/4, low: bound / 2},
	} {
		t.Run("record_pack_bytes="+c.pack, func(t *testing.T) {
			var mu sync.Mutex
			var cycles []int
			restore := hooks.Set(host.TestHooks{BeforeCommit: func(elements int) error {
				mu.Lock()
				defer mu.Unlock()
				cycles = append(cycles, elements)
				return nil
			}})
			t.Cleanup(restore)
			out := filepath.Join(t.TempDir(), "sums.txt")
			runDone(t, env.Marshal(t, sumPipeline(n, out)), map[string]string{"read_max_elements_per_poll": "300", "record_pack_bytes": c.pack})
			mu.Lock()
			defer mu.Unlock()
			near, total := 0, 0
			for _, e := range cycles {
				if e > c.most {
					t.Errorf("a commit cycle consumed %d elements, more than %d (read_max_elements_per_poll %d)", e, c.most, bound)
				}
				if e >= c.low {
					near++
				}
				total += e
			}
			if near == 0 || total < n {
				t.Errorf("cycles %v: %d of at least %d elements, %d in all; want some near the bound and at least the %d elements", cycles, near, c.low, total, n)
			}
			got, dups := readSums(t, out)
			if wrong, ex := compare(got, wantSums(n)); wrong > 0 || dups > 0 {
				t.Errorf("%d wrong sums (%s), %d keys written twice", wrong, ex, dups)
			}
		})
	}
}

// TestCarriedAcrossAbortedCycles: a cycle takes a share of each
// partition's polled records and carries the rest to the next cycle
// (the runtime's intake), so the offsets a cycle commits stop at the first
// carried record, not where the client's fetch position is. Cycles abort
// here now and then (as a failed transaction or a lost group generation
// does), which sends consumption back to the committed offsets and drops
// what was carried: had a commit gone past carried records, an abort
// after it would lose them. The sums must be exact under exactly_once;
// under at_least_once an aborted cycle's output may be written again, but
// no sum may be missing or wrong.
func TestCarriedAcrossAbortedCycles(t *testing.T) {
	const n, bound = 5000, 300
	for _, guarantee := range []string{"exactly_once", "at_least_once"} {
		t.Run(guarantee, func(t *testing.T) {
			var mu sync.Mutex
			cycles, aborted := 0, 0
			restore := hooks.Set(host.TestHooks{BeforeCommit: func(elements int) error {
				mu.Lock()
				defer mu.Unlock()
				cycles++
				if cycles%3 == 0 && aborted < 8 {
					aborted++
					return host.ErrAbortCycle
				}
				return nil
			}})
			t.Cleanup(restore)
			out := filepath.Join(t.TempDir(), "sums.txt")
			runDone(t, env.Marshal(t, sumPipeline(n, out)), map[string]string{
				"read_max_elements_per_poll": fmt.Sprint(bound), "record_pack_bytes": "1024", "processing_guarantee": guarantee,
			})
			mu.Lock()
			if aborted == 0 {
				t.Errorf("no cycle aborted (%d cycles)", cycles)
			}
			mu.Unlock()
			got, dups := readSums(t, out)
			wrong, ex := compare(got, wantSums(n))
			if wrong > 0 {
				t.Errorf("%d wrong or missing sums (%s) after %d aborted cycles", wrong, ex, aborted)
			}
			if dups > 0 && guarantee == "exactly_once" {
				t.Errorf("%d keys written twice", dups)
			}
		})
	}
}
