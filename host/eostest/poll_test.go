package eostest

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/ksrunner/ksrunner/host"
)

// read_max_elements_per_poll bounds the records of a commit cycle (Kafka
// records: a packed record of an internal topic counts once, so the test
// runs unpacked to count elements): no cycle
// of a GroupByKey + sum over 5,000 elements consumes more than 300, some
// consume exactly 300 (the GroupByKey's input arrives in full polls), and
// the sums are exact.
func TestReadMaxElementsPerPoll(t *testing.T) {
	const n, most = 5000, 300
	var mu sync.Mutex
	var cycles []int
	restore := hooks.Set(host.TestHooks{BeforeCommit: func(records int) error {
		mu.Lock()
		defer mu.Unlock()
		cycles = append(cycles, records)
		return nil
	}})
	t.Cleanup(restore)
	out := filepath.Join(t.TempDir(), "sums.txt")
	runDone(t, env.Marshal(t, sumPipeline(n, out)), map[string]string{"read_max_elements_per_poll": "300", "record_pack_bytes": "0"})
	mu.Lock()
	defer mu.Unlock()
	full, total := 0, 0
	for _, c := range cycles {
		if c > most {
			t.Errorf("a commit cycle consumed %d records, more than read_max_elements_per_poll %d", c, most)
		}
		if c == most {
			full++
		}
		total += c
	}
	if full == 0 || total < n {
		t.Errorf("cycles %v: %d of %d records each, %d in all; want some full polls and at least the %d elements", cycles, full, most, total, n)
	}
	got, dups := readSums(t, out)
	if wrong, ex := compare(got, wantSums(n)); wrong > 0 || dups > 0 {
		t.Errorf("%d wrong sums (%s), %d keys written twice", wrong, ex, dups)
	}
}
