package runtime

import (
	"slices"
	"testing"
)

// max_num_records is split over partitions deterministically and exactly:
// in proportion to the records available, never more than a partition
// holds, the remainder to the largest fractions (lower partitions among
// equals); with fewer available, the rest spread evenly.
func TestSplitQuota(t *testing.T) {
	for _, tc := range []struct {
		n     int64
		avail []int64
		want  []int64
	}{
		{10, []int64{100, 100, 100, 100}, []int64{3, 3, 2, 2}},
		{300, []int64{250, 250, 250, 250}, []int64{75, 75, 75, 75}},
		{7, []int64{0, 10, 0, 4}, []int64{0, 5, 0, 2}},
		{1000, []int64{250, 250, 250, 250}, []int64{250, 250, 250, 250}},
		{10, []int64{1, 2, 0, 0}, []int64{3, 4, 2, 1}},
		{5, []int64{0, 0, 0}, []int64{2, 2, 1}},
		{0, []int64{5, 5}, []int64{0, 0}},
		{0, []int64{0, 0}, []int64{0, 0}},
		{1 << 62, []int64{1 << 62, 1 << 61}, []int64{3074457345618258603, 1537228672809129301}},
	} {
		got := splitQuota(tc.n, tc.avail)
		if !slices.Equal(got, tc.want) {
			t.Errorf("splitQuota(%d, %v) = %v, want %v", tc.n, tc.avail, got, tc.want)
		}
		var sum, total int64
		for _, a := range tc.avail {
			total += a
		}
		for p, q := range got {
			sum += q
			if tc.n <= total && q > tc.avail[p] {
				t.Errorf("splitQuota(%d, %v): partition %d gets %d, more than it holds", tc.n, tc.avail, p, q)
			}
		}
		if sum != tc.n {
			t.Errorf("splitQuota(%d, %v) sums to %d", tc.n, tc.avail, sum)
		}
	}
}
