package task

import (
	"bytes"
	"testing"
)

// A stage's pending input reuses the buffers of the chunks it processed
// (at most maxFreeChunks of them): once warm, a cycle of about two chunks
// of input allocates no buffer, only the list of chunks; the chunks hold
// the elements whole and in order.
func TestPendingBuffersReused(t *testing.T) {
	sr := &stageRun{}
	raw := bytes.Repeat([]byte{7}, 140)
	n := 3*processBatchBytes/2/len(raw) + 1
	cycle := func() {
		for range n {
			sr.appendPending(raw)
		}
		in := sr.pending
		sr.pending = nil
		total := 0
		for _, c := range in {
			if len(c.data) != c.elements*len(raw) || len(c.data) > processBatchBytes {
				t.Fatalf("a chunk of %d bytes holds %d elements of %d", len(c.data), c.elements, len(raw))
			}
			total += c.elements
		}
		if total != n {
			t.Fatalf("%d elements pending, want %d", total, n)
		}
		sr.recycle(in)
	}
	for range 3 {
		cycle()
	}
	if allocs := testing.AllocsPerRun(10, cycle); allocs > 2 {
		t.Errorf("%v allocations per cycle, want at most 2 (the chunk list)", allocs)
	}
	if len(sr.free) > maxFreeChunks {
		t.Errorf("%d free buffers kept, want at most %d", len(sr.free), maxFreeChunks)
	}
}
