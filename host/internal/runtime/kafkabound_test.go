package runtime

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
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

// A read with start_read_time starts its uncommitted partitions at the
// first offset at or after that time, whatever auto.offset.reset says; a
// committed partition stays at its commit.
func TestStartOffsetsStartReadTime(t *testing.T) {
	for _, reset := range []string{"", "earliest"} {
		plan := kafkaPlan(reset, "", "")
		ms := int64(1_700_000_000_000)
		plan.SubTopologies[0].Root.KafkaRead.StartReadTimeMs = &ms
		i := &instance{subByTopic: map[string]*translate.SubTopology{"in": plan.SubTopologies[0]}}
		got, err := i.startOffsets(context.Background(), map[string]map[int32]kgo.Offset{
			"in": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().At(17)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if o := got["in"][0]; o != kgo.NewOffset().AfterMilli(ms) {
			t.Errorf("reset %q: uncommitted partition starts at %v, want after %d ms", reset, o, ms)
		}
		if o := got["in"][1].EpochOffset().Offset; o != 17 {
			t.Errorf("reset %q: committed partition starts at %d, want 17", reset, o)
		}
	}
}
