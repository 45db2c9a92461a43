package runtime

import (
	"strings"
	"testing"
	"time"
)

// TestCycleWatch: a step is reported once it has lasted the limit, again
// at every further limit, never while it is shorter, and a new step (even
// of the same name) starts over; a quiet step is never reported.
func TestCycleWatch(t *testing.T) {
	now := time.Unix(1000, 0)
	var warned []string
	w := &cycleWatch{now: func() time.Time { return now }, limit: 10 * time.Second, why: "why", warn: func(m string) { warned = append(warned, m) }}
	var last *cycleStep
	var reported time.Duration
	steps := []struct {
		do      func()
		advance time.Duration
		want    string // "" none
	}{
		{func() { w.enter(stepFlush) }, 9 * time.Second, ""},
		{nil, time.Second, "has been " + stepFlush + " for 10s (why)"},
		{nil, 5 * time.Second, ""},
		{nil, 4 * time.Second, ""},
		{nil, time.Second, "for 20s"},
		{func() { w.enter(stepFlush) }, 9 * time.Second, ""},
		{nil, time.Second, "for 10s"},
		{func() { w.enterQuiet(stepRestore) }, time.Minute, ""},
		{func() { w.enter(stepEnd) }, 11 * time.Second, "has been " + stepEnd + " for 11s"},
	}
	for n, s := range steps {
		if s.do != nil {
			s.do()
		}
		now = now.Add(s.advance)
		warned = nil
		last, reported = w.check(last, reported)
		switch {
		case s.want == "" && len(warned) > 0:
			t.Errorf("step %d: warned %q, want nothing", n, warned)
		case s.want != "" && (len(warned) != 1 || !strings.Contains(warned[0], s.want)):
			t.Errorf("step %d: warned %q, want one warning with %q", n, warned, s.want)
		}
	}
}
