package runtime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// offsetWait tracks the partitions assigned to the instance whose committed
// offsets the group has not given it yet. After an assignment the client
// fetches them (OffsetFetch, require_stable) before it fetches any record,
// and retries without end while a transactional offset commit on one of
// them is pending: legally until that transaction ends, at most its
// timeout. An instance that waits much longer fetches nothing at all and
// commits empty cycles, its output stopped with no error; this names the
// partitions, and Run starts the instance again.
//
// onAssigned adds partitions once their restore is done (the client
// fetches their offsets after the callback returns), startOffsets (the
// group's AdjustFetchOffsetsFn, called when the fetch answered) removes
// them, and so does dropTasks.
type offsetWait struct {
	mu    sync.Mutex
	since map[taskID]time.Time
}

func (w *offsetWait) assigned(ids []taskID, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[taskID]time.Time{}
	}
	for _, id := range ids {
		w.since[id] = now
	}
}

func (w *offsetWait) fetched(offsets map[string]map[int32]kgo.Offset) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range offsets {
		for p := range ps {
			delete(w.since, taskID{topic, p})
		}
	}
}

func (w *offsetWait) dropped(parts map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(w.since, taskID{topic, p})
		}
	}
}

// stalled returns the partitions that have waited limit or longer for
// their offsets, and the longest wait.
func (w *offsetWait) stalled(now time.Time, limit time.Duration) (ids []taskID, longest time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, at := range w.since {
		if d := now.Sub(at); d >= limit {
			ids = append(ids, id)
			longest = max(longest, d)
		}
	}
	slices.SortFunc(ids, func(a, b taskID) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	return ids, longest
}

// checkOffsetWait looks, every hangingCheckAfter while an assigned
// partition waits that long for its committed offset, for a hanging
// transaction of the instance's producer, and ends it if it may
// (hangingtxn.go); the client's next offset fetch then succeeds. A wait of
// offsetWaitLimit fails the instance with what the last look found.
func (i *instance) checkOffsetWait(ctx context.Context) error {
	now := time.Now()
	if ids, _ := i.offsets.stalled(now, hangingCheckAfter); len(ids) > 0 && i.cfg.ExactlyOnce && now.Sub(i.hangCheck) >= hangingCheckAfter {
		i.hangCheck = now
		found, err := i.endHangingOffsets(ctx)
		if err != nil {
			found = "looking for a hanging transaction of this instance's producer: " + err.Error()
		}
		if found != "" && found != i.hangFound {
			i.cfg.Logger.Info("committed offsets wait", "partitions", len(ids), "found", found)
		}
		i.hangFound = found
	}
	if ids, wait := i.offsets.stalled(now, i.cfg.offsetWaitLimit()); len(ids) > 0 {
		return &stalledOffsetsError{group: i.cfg.ApplicationID, ids: ids, wait: wait, found: i.hangFound}
	}
	return nil
}

// offsetWaitLimit is how long an assigned partition may wait for its
// committed offset: twice transaction_timeout_ms, so that a pending
// transaction's own timeout and the coordinator's check for it (every
// 10 s by default) pass first, and 30 s more.
func (c Config) offsetWaitLimit() time.Duration {
	return 2*c.transactionTimeout() + 30*time.Second
}

// stalledOffsetsError is the instance's failure when the group has not
// given it the committed offsets of assigned partitions for
// offsetWaitLimit: Run starts the instance again (runInstances).
type stalledOffsetsError struct {
	group string
	ids   []taskID
	wait  time.Duration
	found string // what the last look for a hanging transaction found
}

func (e *stalledOffsetsError) Error() string {
	parts := make([]string, len(e.ids))
	for n, id := range e.ids {
		parts[n] = fmt.Sprintf("%s/%d", id.topic, id.partition)
	}
	found := ""
	if e.found != "" {
		found = " (" + e.found + ")"
	}
	return fmt.Sprintf("consumer group %s: the committed offsets of %d assigned partitions (%v) have not come for %v: the group's offset fetch keeps answering UNSTABLE_OFFSET_COMMIT, so a transactional offset commit is still pending on them, and no record of theirs can be fetched until it ends. If this repeats after the restart, the transaction hangs on the group's __consumer_offsets partition%s: list it with kafka-transactions.sh find-hanging and end it with kafka-transactions.sh abort (KIP-664), knowing that an abort of offsets whose transaction committed makes the job redo that input",
		e.group, len(e.ids), parts, e.wait.Round(time.Second), found)
}
