package eostest

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
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
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			id, r := env.Run(ctx, t, pipe, map[string]string{
				"bootstrap_servers":    kafkatest.Broker(t),
				"application_id":       kafkatest.UniqueName(t, "app"),
				"internal_parallelism": "2",
				"state_dir":            filepath.Join(t.TempDir(), "state"),
			})
			if r.State != jobpb.JobState_DONE {
				t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
			}
			mr, err := env.Client.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: id})
			if err != nil {
				t.Fatal(err)
			}
			counters := map[string]int64{}
			for _, m := range mr.GetMetrics().GetCommitted() {
				if m.GetUrn() == "beam:metric:user:sum_int64:v1" {
					v, err := coder.DecodeVarInt(bytes.NewReader(m.GetPayload()))
					if err != nil {
						t.Fatal(err)
					}
					counters[m.GetLabels()["NAMESPACE"]+"/"+m.GetLabels()["NAME"]] += v
				}
			}
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
