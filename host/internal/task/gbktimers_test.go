package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
)

// timerScan is every 'T' key of the task visible through r (the store, or
// the task's batch), as "maxTs kw".
func timerScan(t *testing.T, r pebble.Reader, tk *Task) []string {
	t.Helper()
	lower := tk.key(state.Timer)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: tk.key(state.Timer + 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(lower):]
		out = append(out, fmt.Sprintf("%d %x", int64(binary.BigEndian.Uint64(k)^(1<<63)), k[8:]))
	}
	return out
}

// timerIndex is the task's in-memory timer index, as timerScan shows the
// store, in the store's order.
func timerIndex(tk *Task) []string {
	var out []string
	for _, ts := range tk.gbk.timers.times {
		for _, kw := range slices.Sorted(maps.Keys(tk.gbk.timers.byTime[ts])) {
			out = append(out, fmt.Sprintf("%d %x", ts, kw))
		}
	}
	return out
}

// After random sequences of input (on time and late, over several keys and
// windows), watermark moves, committed and aborted cycles, the GroupByKey
// fast path's timer index agrees with a scan of the timers in the task's
// batch during each cycle and in the store after it (an aborted cycle
// reopens the task, which rebuilds the index from the store); every value
// on time fires exactly once, in one pane per key and window; and once the
// watermark is at the end of time no timer and no buffered run is left.
func TestGBKTimerIndexAgreesWithStore(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { gbkTimerIndexRun(t, seed) })
	}
}

func gbkTimerIndexRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), 3)
	sub := groupTask(t, te)
	stage := te.exec(sub)
	prod := te.producer(sub, 0) // the input's one producer
	ctx := context.Background()
	const minute = 60_000

	// Per pane fired in a committed cycle: its key and window; and the
	// values fired, by their record's offset.
	panes := map[string]bool{}
	fired := map[string]int{}
	var paneKeys []string // the cycle's, committed or not
	var firedNow []string
	stage.each = func(_ *fakeBundle, in shuffle.WindowedValue) error {
		klen, n := binary.Uvarint(in.Elem)
		key := in.Elem[:n+int(klen)]
		rest := in.Elem[n+int(klen):]
		count := int(binary.BigEndian.Uint32(rest))
		rest = rest[4:]
		paneKeys = append(paneKeys, fmt.Sprintf("%x/%x", key, in.Windows))
		for range count {
			l, n := binary.Uvarint(rest)
			// The value names its key and window: it must fire in theirs.
			firedNow = append(firedNow, fmt.Sprintf("%s %x/%x", rest[n:n+int(l)], key, in.Windows))
			rest = rest[n+int(l):]
		}
		return nil
	}

	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	wm := minWatermark // the committed input watermark
	base := int64(0)   // where new timestamps start
	onTime := map[string]bool{}
	where := map[string]string{} // value → its key and window
	var redeliver []*kgo.Record  // the records of an aborted cycle
	check := func(when string, r pebble.Reader) {
		t.Helper()
		if got, want := timerIndex(tk), timerScan(t, r, tk); !slices.Equal(got, want) {
			t.Fatalf("%s: the index holds\n\t%s\nthe store\n\t%s", when, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
	}
	for step := 0; step < 60; step++ {
		recs := redeliver
		redeliver = nil
		last := step == 59
		if !last {
			for range rng.IntN(12) {
				ts := base - minute + rng.Int64N(5*minute)
				start := ts - ((ts%minute)+minute)%minute
				v := fmt.Sprintf("v%d", in.next) // the record's offset
				k := fmt.Sprintf("k%d", rng.IntN(4))
				w := interval(start, start+minute)
				recs = append(recs, in.data(wv(ts, kv(k, v), w))...)
				where[v] = fmt.Sprintf("%x/%x", strEl(k), w)
			}
		}
		next := wm
		if last {
			next = maxWatermark
		} else if rng.IntN(3) > 0 {
			next = base + rng.Int64N(2*minute)
		}
		if next > wm {
			recs = append(recs, in.wm(prod, next))
		}
		if len(recs) > 0 {
			if err := tk.Handle(ctx, recs); err != nil {
				t.Fatal(err)
			}
		}
		if err := tk.PrepareCommit(ctx); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("step %d, prepared", step), tk.batch)
		if !last && rng.IntN(4) == 0 {
			// The cycle aborts: the runtime drops the task, opens it
			// again from the store and redelivers the records.
			tk.Abort()
			tk = te.task(sub, 0)
			check(fmt.Sprintf("step %d, aborted and reopened", step), te.env.DB)
			redeliver = recs
			te.take()
			te.takeChangelog()
			paneKeys, firedNow = nil, nil
			continue
		}
		if err := tk.ProduceChangelog(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tk.CommitState(); err != nil {
			t.Fatal(err)
		}
		tk.SendStatus()
		tk.Finalize(ctx)
		check(fmt.Sprintf("step %d, committed", step), te.env.DB)
		te.take()
		te.takeChangelog()
		// A value is late if its window's maximum timestamp is behind the
		// watermark when it is handled: the committed one, or a report
		// before it in the cycle (a redelivered cycle's).
		cur := wm
		for _, r := range recs {
			if r.Value[0] == shuffle.KindWatermark {
				_, w, err := shuffle.DecodeWatermark(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				cur = max(cur, w)
				continue
			}
			wv, err := te.env.Codecs[te.env.Topics.ByName[sub.Input].PCollection].Next(r.Value[1:])
			if err != nil {
				t.Fatal(err)
			}
			maxTs, err := windowMaxTimestamp(wv.Windows)
			if err != nil {
				t.Fatal(err)
			}
			if maxTs >= cur {
				onTime[fmt.Sprintf("v%d", r.Offset)] = true
			}
		}
		for _, k := range paneKeys {
			if panes[k] {
				t.Fatalf("step %d: key and window %s fired a second pane", step, k)
			}
			panes[k] = true
		}
		for _, v := range firedNow {
			fired[v]++
		}
		paneKeys, firedNow = nil, nil
		wm = max(wm, cur)
		base = max(base, wm)
	}
	for v := range onTime {
		if n := fired[v+" "+where[v]]; n != 1 {
			t.Errorf("value %s on time fired %d times in its key and window", v, n)
		}
	}
	for vw, n := range fired {
		v, _, _ := strings.Cut(vw, " ")
		if !onTime[v] || vw != v+" "+where[v] {
			t.Errorf("value %s fired %d times (on time: %v; its key and window %s)", vw, n, onTime[v], where[v])
		}
	}
	if n := tk.gbk.timers.len(); n != 0 {
		t.Errorf("%d timers left at the end of time", n)
	}
	if left := storeContents(t, te.env.DB, tk.key(state.Buffer)); len(left) > 0 {
		t.Errorf("%d buffered runs left at the end of time", len(left))
	}
}
