package eostest

import (
	"slices"
	"testing"

	"github.com/ksrunner/ksrunner/host/jobtest"
)

// committedData counts, per internal data topic of application appID, the
// data records a read_committed consumer sees, sorted (jobtest.CommittedData
// summed over partitions).
func committedData(t *testing.T, bootstrap, appID string) []int {
	var out []int
	for _, parts := range jobtest.CommittedData(t, bootstrap, appID) {
		n := 0
		for _, c := range parts {
			n += c
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
