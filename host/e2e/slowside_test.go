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
	register.DoFn3x0[context.Context, []byte, func(*int64) bool](&seeTicksFn{})
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

// sideSeen records, per token, the side inputs seeTicksFn saw in this
// process's LOOPBACK worker.
var sideSeen sync.Map // token -> *seenValues

type seenValues struct {
	sync.Mutex
	seen [][]int64 // one per main element: the side input's values
}

type seeTicksFn struct{ Token string }

func (f *seeTicksFn) ProcessElement(_ context.Context, _ []byte, counts func(*int64) bool) {
	var vs []int64
	var c int64
	for counts(&c) {
		vs = append(vs, c)
	}
	v, _ := sideSeen.LoadOrStore(f.Token, &seenValues{})
	s := v.(*seenValues)
	s.Lock()
	s.seen = append(s.seen, vs)
	s.Unlock()
}

// TestSlowlyUpdatingSideInput is Beam's slowly updating side input: an
// unbounded side input in the global window whose trigger fires after
// every element (a running count of a periodic impulse's 40 ticks over
// 8 s, accumulating), read as an iterable by a main input of 10 ticks over
// the first second. The global window never closes while the side source
// runs, so the side input is ready at its first firing and each firing adds
// its count: the main input is processed while the side input still grows,
// so it sees fewer firings than the last one's count of 40, each list the
// firings so far in order (increasing counts). Waiting for the side input's
// window to close, every main element would see the count 40 last. (The
// side source runs 7 s longer than the main one, so that a slow start
// under -race still leaves the main input firings to see before the last.)
func TestSlowlyUpdatingSideInput(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	token := kafkatest.UniqueName(t, "side")
	p, s := beam.NewPipelineWithRoot()
	start := time.Now()
	side := periodic.Impulse(s.Scope("SideTicks"), start, start.Add(8*time.Second), 200*time.Millisecond, false)
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
	if len(seen.seen) != 10 {
		t.Errorf("the main input ran %d times, want 10 (1 s of 100 ms ticks)", len(seen.seen))
	}
	early := false
	for _, vs := range seen.seen {
		if len(vs) == 0 {
			t.Errorf("a main element saw an empty side input: it was not ready")
			continue
		}
		for i, c := range vs {
			if c < 1 || c > 40 || i > 0 && c <= vs[i-1] {
				t.Errorf("a main element saw side counts %v, want the firings so far, increasing, up to 40", vs)
				break
			}
		}
		early = early || vs[len(vs)-1] < 40
	}
	if !early {
		t.Errorf("every main element saw the final count 40 (%v): the side input waited for its window to close", seen.seen)
	}
}
