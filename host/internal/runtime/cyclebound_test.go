package runtime

import (
	"testing"
	"time"
)

func TestCycleBound(t *testing.T) {
	type cycle struct {
		elements int
		took     time.Duration
		want     int // the bound after it
	}
	for _, c := range []struct {
		name       string
		max        int
		txnTimeout time.Duration
		first      int // the first cycle's bound
		cycles     []cycle
	}{
		{"a fast job takes the option's whole after its first cycle", 250_000, time.Minute, 1000, []cycle{
			{1000, 20 * time.Millisecond, 250_000},
			{250_000, 300 * time.Millisecond, 250_000},
		}},
		{"an option below the first bound", 500, time.Minute, 500, []cycle{
			{500, time.Millisecond, 500},
		}},
		{"a slow stage: cycles shrink to three quarters of the target, 5 s", 250_000, time.Minute, 1000, []cycle{
			{1000, 10 * time.Second, 375},       // 100 elements/s: 3.75 s of them
			{375, 3750 * time.Millisecond, 500}, // under the target, half the bound used: grows to 5 s of them
			{500, 5 * time.Second, 500},         // at the target: stays
			{500, 6 * time.Second, 312},         // over it
			{100, 10 * time.Millisecond, 312},   // too little of the bound used to say
			{312, 3 * time.Second, 520},         // grows
		}},
		{"the target is a quarter of a short transaction timeout", 250_000, 4 * time.Second, 1000, []cycle{
			{1000, 2 * time.Second, 375}, // 500/s, target 1 s: 0.75 s of them
		}},
		{"time not spent on the intake shrinks it to one element at least", 250_000, time.Minute, 1000, []cycle{
			{1, time.Minute, 1},
			{1, time.Millisecond, 5000},
		}},
		{"a cycle of nothing teaches nothing", 250_000, time.Minute, 1000, []cycle{
			{0, time.Minute, 1000},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newCycleBound(c.max, c.txnTimeout)
			if got := b.limit(); got != c.first {
				t.Fatalf("first bound %d, want %d", got, c.first)
			}
			for k, cy := range c.cycles {
				b.observe(cy.elements, cy.took)
				if got := b.limit(); got != cy.want {
					t.Fatalf("after cycle %d (%d elements in %v): bound %d, want %d", k, cy.elements, cy.took, got, cy.want)
				}
			}
		})
	}
}
