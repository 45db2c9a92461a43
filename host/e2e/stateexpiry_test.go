package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kgo"

	hoststate "github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

func init() {
	register.DoFn5x1[beam.Window, state.Provider, string, int64, func(string, int64), error](&countInWindowFn{})
}

// countInWindowFn keeps a key's values in a window in a bag and emits
// KV<"key@window start", values so far>.
type countInWindowFn struct {
	Seen state.Bag[int64]
}

func (fn *countInWindowFn) ProcessElement(w beam.Window, sp state.Provider, k string, v int64, emit func(string, int64)) error {
	if err := fn.Seen.Add(sp, v); err != nil {
		return err
	}
	vs, _, err := fn.Seen.Read(sp)
	if err != nil {
		return err
	}
	emit(fmt.Sprintf("%s@%d", k, w.(window.IntervalWindow).Start.Milliseconds()), int64(len(vs)))
	return nil
}

// TestStateExpiresWithWindow: a streaming job's user state in a window is
// deleted once the watermark passes the window's end (Beam's garbage
// collection of state), for every key, from the store and so from the
// changelog (tombstones), while the state of a window still open stays.
// Records an hour old are in a window the read's idle watermark (wall time
// less a second) soon closes; records half an hour ahead are in one it does
// not (Kafka 4 refuses a record more than an hour ahead of its clock,
// log.message.timestamp.after.max.ms: an hour ahead, the minute's start
// plus a second was past that in about one run of sixty).
func TestStateExpiresWithWindow(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "sin"), kafkatest.UniqueName(t, "sout")
	kafkatest.CreateTopic(t, bootstrap, in, 1)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	now := time.Now()
	past, future := now.Add(-time.Hour).Truncate(time.Minute), now.Add(30*time.Minute).Truncate(time.Minute)
	keys := []string{"k1", "k2", "k3"}
	cl := kafkatest.Client(t, bootstrap)
	want := map[string]int64{}
	for _, at := range []time.Time{past, future} {
		for _, k := range keys {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte(k), Value: be8(1), Timestamp: at.Add(time.Second)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprintf("%s@%d", k, at.UnixMilli())] = 1
		}
	}

	p, s := beam.NewPipelineWithRoot()
	recs := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kafkaReadPlaceholder, beam.Impulse(s)))
	counts := beam.ParDo(s, &countInWindowFn{}, recs)
	beam.ParDo0(s, kafkaWritePlaceholder, beam.WindowInto(s, window.NewGlobalWindows(), counts))
	pipe := jobtest.MarshalLoopback(t, p, loopback.EnvironmentConfig, workerBin)
	withKafkaPrimitives(t, pipe, &translate.KafkaRead{
		Topics: []string{in}, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong,
		TimestampPolicy: translate.TimestampCreateTime, ConsumerConfig: map[string]string{"auto.offset.reset": "earliest"},
	}, &translate.KafkaWrite{Topic: out, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong})
	plan, err := translate.Translate(pipe, translate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stateful := -1
	for _, st := range plan.SubTopologies {
		for _, stg := range st.Stages {
			if stg.Stateful {
				stateful = st.ID
			}
		}
	}
	if stateful < 0 {
		t.Fatal("no stateful stage in the plan")
	}

	appID := kafkatest.UniqueName(t, "expiry")
	id, err := submit(ctx, t, ksrunner, pipe, map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}) })
	kafkatest.CheckCounts(t, "output", kafkatest.ReadCounts(ctx, t, bootstrap, out, len(want)), want)

	// The bag values in the changelog, by store key, by window start:
	// live (the last record a value) or deleted (a tombstone).
	live := map[int64]map[string]bool{}
	done := func() bool {
		return len(live[past.UnixMilli()]) == len(keys) && len(live[future.UnixMilli()]) == len(keys) && count(live[past.UnixMilli()], true) == 0
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	kafkatest.ReadTopic(wctx, t, bootstrap, shuffle.TopicName(appID, topics.ChangelogTopic(stateful)), done, func(r *kgo.Record) {
		k := r.Key
		if len(k) <= hoststate.TaskPrefixLen || hoststate.Kind(k[hoststate.TaskPrefixLen]) != hoststate.Bag {
			return
		}
		rest := k[hoststate.TaskPrefixLen+1:]
		var win []byte
		for range 3 { // transform, state id, window
			p, next, err := hoststate.ReadLP(rest)
			if err != nil {
				t.Fatalf("changelog key %x: %v", k, err)
			}
			win, rest = p, next
		}
		if len(win) < 8 {
			t.Fatalf("changelog key %x: window %x is not an interval window", k, win)
		}
		start := int64(binary.BigEndian.Uint64(win)^(1<<63)) - time.Minute.Milliseconds()
		if live[start] == nil {
			live[start] = map[string]bool{}
		}
		live[start][string(k)] = r.Value != nil
	})
	if n := count(live[future.UnixMilli()], true); n != len(keys) {
		t.Errorf("%d of the open window's %d bags in the changelog are live, want all", n, len(keys))
	}
}

// count is how many of m's values are v.
func count(m map[string]bool, v bool) int {
	n := 0
	for _, b := range m {
		if b == v {
			n++
		}
	}
	return n
}
