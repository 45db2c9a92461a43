package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/periodic"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function1x2(tickOne)
	register.Function2x1(countTicks)
	register.DoFn3x0[context.Context, []byte, int64](&seeTicksFn{})
}

func tickOne([]byte) (int, int64) { return 0, 1 }

// countTicks sums a pane's ticks. (A ParDo after the GroupByKey, not a
// Combine: the Go SDK's combine emits its results without their pane, so
// the host could not tell the firings apart.)
func countTicks(_ int, ones func(*int64) bool) int64 {
	var n, one int64
	for ones(&one) {
		n += one
	}
	return n
}

// sideSeen records, per token, the side input values seeTicksFn saw in
// this process's LOOPBACK worker.
var sideSeen sync.Map // token -> *seenValues

type seenValues struct {
	sync.Mutex
	values []int64
}

type seeTicksFn struct{ Token string }

func (f *seeTicksFn) ProcessElement(_ context.Context, _ []byte, ticks int64) {
	v, _ := sideSeen.LoadOrStore(f.Token, &seenValues{})
	s := v.(*seenValues)
	s.Lock()
	s.values = append(s.values, ticks)
	s.Unlock()
}

// TestSlowlyUpdatingSideInput is Beam's slowly updating side input: an
// unbounded side input in the global window whose trigger fires after
// every element (a running count of a periodic impulse's 40 ticks over
// 4 s), read as a singleton by a main input of 10 ticks over the first
// second. The global window never closes while the side source runs, so
// the side input is ready at its first firing and each firing replaces
// the last (accumulating: the count so far): the main input is processed
// while the side input still grows, so it sees counts below the final 40,
// and every count it sees is one firing's (one value, never the union of
// several). Waiting for the side input's window to close, every main
// element would see 40.
func TestSlowlyUpdatingSideInput(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	token := kafkatest.UniqueName(t, "side")
	p, s := beam.NewPipelineWithRoot()
	start := time.Now()
	side := periodic.Impulse(s.Scope("SideTicks"), start, start.Add(4*time.Second), 100*time.Millisecond, false)
	counted := beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, tickOne, side),
		beam.Trigger(trigger.Repeat(trigger.AfterCount(1))), beam.PanesAccumulate())
	count := beam.ParDo(s, countTicks, beam.GroupByKey(s, counted))
	main := periodic.Impulse(s.Scope("MainTicks"), start, start.Add(time.Second), 100*time.Millisecond, false)
	beam.ParDo0(s, &seeTicksFn{Token: token}, main, beam.SideInput{Input: count})
	runDone(ctx, t, ksrunner, marshal(t, p), nil)
	v, _ := sideSeen.Load(token)
	if v == nil {
		t.Fatal("the main input saw no side input")
	}
	seen := v.(*seenValues)
	seen.Lock()
	defer seen.Unlock()
	if len(seen.values) != 10 {
		t.Errorf("the main input ran %d times, want 10 (1 s of 100 ms ticks): %v", len(seen.values), seen.values)
	}
	early := false
	for _, c := range seen.values {
		if c < 1 || c > 40 {
			t.Errorf("a main element saw a side count of %d, want one firing's count, 1 to 40: %v", c, seen.values)
		}
		early = early || c < 40
	}
	if !early {
		t.Errorf("every main element saw the final count 40 (%v): the side input waited for its window to close", seen.values)
	}
}
