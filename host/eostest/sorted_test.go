package eostest

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function1x3(stampByValue)
	register.DoFn5x0[context.Context, beam.EventTime, state.Provider, int, int](&orderFn{})
}

// stampByValue keys v by v%4 with v milliseconds as its event time.
func stampByValue(v int) (beam.EventTime, int, int) {
	return mtime.FromMilliseconds(int64(v)), v % 4, v
}

var (
	orderSeen       = beam.NewCounter("eostest", "order_seen")
	orderOutOfOrder = beam.NewCounter("eostest", "order_out_of_order")
)

// orderFn counts, per key, the elements that come with an earlier
// timestamp than the key's previous one.
type orderFn struct {
	Last state.Value[int64]
}

func (fn *orderFn) ProcessElement(ctx context.Context, ts beam.EventTime, sp state.Provider, _, _ int) {
	last, ok, err := fn.Last.Read(sp)
	if err != nil {
		panic(err)
	}
	if ok && int64(ts) < last {
		orderOutOfOrder.Inc(ctx, 1)
	}
	orderSeen.Inc(ctx, 1)
	if err := fn.Last.Write(sp, int64(ts)); err != nil {
		panic(err)
	}
}

// TestTimeSortedInput feeds a stateful DoFn n elements in a shuffled order
// of their timestamps: with time-sorted input it sees every key's elements
// in timestamp order, none dropped; without (the control), out of order.
func TestTimeSortedInput(t *testing.T) {
	for _, sorted := range []bool{true, false} {
		t.Run("sorted="+strconv.FormatBool(sorted), func(t *testing.T) {
			const n = 5_000
			values := rand.New(rand.NewPCG(1, 2)).Perm(n)
			p, s := beam.NewPipelineWithRoot()
			beam.ParDo0(s, &orderFn{}, beam.ParDo(s, stampByValue, beam.CreateList(s, values)))
			pipe := env.Marshal(t, p)
			if sorted {
				if err := pipelinetest.RequireTimeSortedInput(pipe, "orderFn"); err != nil {
					t.Fatal(err)
				}
			}
			id := runDone(t, pipe, map[string]string{"internal_parallelism": "2"})
			counters, _ := jobCounters(t, id)
			seen, outOfOrder := counters["eostest/order_seen"], counters["eostest/order_out_of_order"]
			t.Logf("%d elements seen, %d out of order, %d dropped late", seen, outOfOrder, counters["ksrunner/dropped_late_elements"])
			if seen != n {
				t.Errorf("orderFn saw %d elements, want %d", seen, n)
			}
			switch {
			case sorted && outOfOrder != 0:
				t.Errorf("with time-sorted input, %d elements came before an earlier one of their key", outOfOrder)
			case !sorted && outOfOrder == 0:
				t.Errorf("without time-sorted input every key's elements came in order: the input is not shuffled, the test shows nothing")
			}
		})
	}
}
