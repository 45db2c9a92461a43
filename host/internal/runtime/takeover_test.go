package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// takeoverSession is the consumer-group session timeout of
// TestStandbyTakeover's instances: the least a broker allows by default
// (group.min.session.timeout.ms), so that the crashed member's session
// expires soon.
const takeoverSession = 6 * time.Second

// takeoverKeys is the key space of TestStandbyTakeover's changelog: small
// enough that its records overwrite and delete earlier keys (about 60 MB
// live of a 100 MB changelog), so a copy that drops or reorders records
// differs.
const takeoverKeys = 1 << 15

// takeoverClock records when a task's takeover started (Hooks.Assigning)
// and when its store was up to date (Hooks.Restored).
type takeoverClock struct {
	mu                 sync.Mutex
	assigned, restored map[int32]time.Time
	restoredRecords    map[int32]int
	next               func(sub int, p int32, records int) // the member's own Restored hook
}

func (c *takeoverClock) install(h *Hooks) {
	c.assigned, c.restored, c.restoredRecords = map[int32]time.Time{}, map[int32]time.Time{}, map[int32]int{}
	c.next = h.Restored
	h.Assigning = func(_ int, p int32) {
		c.mu.Lock()
		c.assigned[p] = time.Now()
		c.mu.Unlock()
	}
	h.Restored = func(sub int, p int32, records int) {
		c.mu.Lock()
		c.restored[p], c.restoredRecords[p] = time.Now(), records
		c.mu.Unlock()
		c.next(sub, p, records)
	}
}

// last returns the last takeover of partition p's task: when it was
// assigned, when restored, and how many changelog records it replayed.
func (c *takeoverClock) last(p int32) (assigned, restored time.Time, records int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assigned[p], c.restored[p], c.restoredRecords[p]
}

// takeoverTxnTimeout is the transaction timeout of the crashed owner in
// TestStandbyTakeover's case that crashes inside a transaction: the broker
// aborts the transaction that long after it began.
const takeoverTxnTimeout = 10 * time.Second

// TestStandbyTakeover measures issue 12's failover figure: "with a
// standby replica the restore part of [a failover] is under 1 s for a
// 100 MB store". Two static members of an application's group each own
// one of two GroupByKey tasks; task 0's changelog is written to 100 MB
// (values of 1-4 KiB over takeoverKeys keys, one record in twenty a
// delete, in transactions of 4 MB, one aborted in ten) and a last 1 MB
// transaction that the survivor's standby may not have applied yet. Then
// task 0's owner crashes: it closes without leaving the group, so the
// group moves its task when its session expires. The survivor takes the
// task over; the test logs how long the restore part took (from the
// assignment, Hooks.Assigning, to the store being up to date,
// Hooks.Restored) with num_standby_replicas=1 and, for comparison, 0 (a
// full restore), and the time from the crash. A third case crashes the
// owner inside its last transaction (as a kill during a commit cycle
// does): the restore waits until the broker aborts it, takeoverTxnTimeout
// after it began, standby or not (the survivor cannot fence a producer
// that is not its own).
//
// It asserts what must hold whatever the machine: the moved task's store
// is what a full restore of its changelog gives, and with a standby the
// takeover replayed at most the last transaction's records, without one
// every committed record. The times are measured, not asserted (under
// -race, or -short, the changelog is 20 MB).
func TestStandbyTakeover(t *testing.T) {
	total := int64(100 << 20)
	if raceDetector || testing.Short() {
		total = 20 << 20
	}
	for _, tc := range []struct {
		replicas int
		openTxn  bool // the owner crashes inside its last transaction
	}{{1, false}, {0, false}, {1, true}} {
		name := fmt.Sprintf("num_standby_replicas=%d", tc.replicas)
		if tc.openTxn {
			name += ",crash_in_transaction"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			a := newChangelogApp(t, kafkatest.Broker(t), 2)
			clocks := []*takeoverClock{{}, {}}
			var ms []*groupMemberOf
			for _, c := range clocks {
				ms = append(ms, a.joinWith(t, ctx, tc.replicas, true, func(cfg *Config) {
					cfg.SessionTimeout = takeoverSession
					c.install(cfg.Hooks)
				}))
			}
			owners := a.waitOwners(t, ctx, ms...)
			gone, survivor := owners[0], owners[1]
			clock := clocks[0]
			if survivor == ms[1] {
				clock = clocks[1]
			}

			// Task 0's changelog, as its owner writes it.
			w := newChangelogWriter(t, a, 0, kgo.TransactionTimeout(takeoverTxnTimeout))
			start := time.Now()
			for n := 0; w.bytes < total; n++ {
				if err := w.txn(ctx, 4<<20, takeoverKeys, n%10 == 9); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("changelog written: %d records, %.1f MB committed, in %v", w.records, float64(w.bytes)/1e6, time.Since(start).Round(time.Millisecond))
			if tc.replicas > 0 {
				survivor.pos.waitFor(t, a.task(0), w.end)
			}
			// The owner's last cycle before it dies: the standby's lag.
			before := w.records
			if tc.openTxn {
				if _, _, _, err := w.open(ctx, 1<<20, takeoverKeys); err != nil {
					t.Fatal(err)
				}
			} else if err := w.txn(ctx, 1<<20, takeoverKeys, false); err != nil {
				t.Fatal(err)
			}
			tail := w.records - before

			calls := survivor.restored.callsOf(0)
			crashed := time.Now()
			gone.crash()
			survivor.restored.waitCalls(t, 0, calls+1)
			assigned, restored, records := clock.last(0)
			took := restored.Sub(assigned)
			t.Logf("%s (%s): restore %v (%d changelog records replayed of %d, %.1f MB); from the crash: assigned after %v, restored after %v (session timeout %v)",
				name, brokerKind(), took.Round(time.Millisecond), records, w.records, float64(w.bytes)/1e6,
				assigned.Sub(crashed).Round(time.Millisecond), restored.Sub(crashed).Round(time.Millisecond), takeoverSession)
			if tc.replicas > 0 && records > tail {
				t.Errorf("the takeover with a standby replayed %d changelog records, want at most the last transaction's %d (of %d)", records, tail, w.records)
			}
			if tc.replicas == 0 && records != w.records {
				t.Errorf("the takeover without a standby replayed %d changelog records, want all %d", records, w.records)
			}
			if tc.openTxn {
				// The aborted transaction's marker is the changelog's end.
				end, err := w.settledEnd(ctx)
				if err != nil {
					t.Fatal(err)
				}
				w.end = end
			}
			full := a.instance(t, t.TempDir(), nil)
			restoreTimed(t, full, 0)
			if d := diffState(taskState(t, survivor.i.db, 0), taskState(t, full.db, 0)); d != "" {
				t.Errorf("the moved task's state, against a full restore of its changelog: %s", d)
			}
			if d := diffState(taskState(t, survivor.i.db, 0), w.model); d != "" {
				t.Errorf("the moved task's state, against what its owner committed: %s", d)
			}
			p, err := changelogPosition(survivor.i.db, state.TaskPrefix(0, 0))
			if err != nil || p != w.end {
				t.Errorf("the moved task's changelog position: %d (%v), want the end %d", p, err, w.end)
			}
		})
	}
}
