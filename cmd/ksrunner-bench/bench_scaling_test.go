package main

import (
	"context"
	"strings"
	"testing"
)

// The two loops of bench scaling compute the same sums, and the command
// prints a line per loop and goroutine count.
func TestBenchScaling(t *testing.T) {
	a, p := allocLoop(5000), plainLoop(5000)
	if len(a) != len(p) {
		t.Fatalf("%d keys allocating, %d not", len(a), len(p))
	}
	for k, v := range p {
		if got := a[any(k)].sum.(int64); got != v {
			t.Errorf("key %d: %d allocating, %d not", k, got, v)
		}
	}
	var out strings.Builder
	if err := runBenchScaling(context.Background(), []string{"--elements", "1000", "--runs", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "speedup over one"); n < 2 {
		t.Errorf("%d result lines, want one per loop and goroutine count:\n%s", n, out.String())
	}
}
