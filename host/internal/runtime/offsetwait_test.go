package runtime

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOffsetWait: an assigned partition is stalled once it has waited the
// limit for its committed offset; the offset fetch's answer (the group's
// AdjustFetchOffsetsFn) and a revocation or loss end its wait; the error
// names the group and the partitions.
func TestOffsetWait(t *testing.T) {
	start := time.Unix(1000, 0)
	var w offsetWait
	w.assigned([]taskID{{"in", 0}, {"in", 1}, {"rep", 0}}, start)
	if ids, _ := w.stalled(start.Add(9*time.Second), 10*time.Second); len(ids) > 0 {
		t.Errorf("stalled before the limit: %v", ids)
	}
	w.fetched(map[string]map[int32]kgo.Offset{"in": {0: kgo.NewOffset().At(5)}})
	w.dropped(map[string][]int32{"rep": {0}})
	ids, wait := w.stalled(start.Add(12*time.Second), 10*time.Second)
	if len(ids) != 1 || ids[0] != (taskID{"in", 1}) || wait != 12*time.Second {
		t.Fatalf("stalled %v for %v, want in/1 for 12s", ids, wait)
	}
	msg := (&stalledOffsetsError{group: "app", ids: ids, wait: wait}).Error()
	for _, want := range []string{"consumer group app", "in/1", "12s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	w.fetched(map[string]map[int32]kgo.Offset{"in": {1: kgo.NewOffset().At(0)}})
	if ids, _ := w.stalled(start.Add(time.Hour), 10*time.Second); len(ids) > 0 {
		t.Errorf("stalled after every offset came: %v", ids)
	}
}
