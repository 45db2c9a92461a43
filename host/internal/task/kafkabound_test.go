package task

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// boundedEnv is kafkaEnv with the read bounded by b.
func boundedEnv(t *testing.T, b *ReadBound) (*testEnv, *translate.SubTopology, *time.Time) {
	te, sub, now := kafkaEnv(t, translate.TimestampCreateTime)
	te.env.ReadBounds = map[int]*ReadBound{sub.ID: b}
	return te, sub, now
}

// sourceEnd is tk.SourceEnd as "offset" or "none".
func sourceEnd(tk *Task) int64 {
	if o, ok := tk.SourceEnd(); ok {
		return o
	}
	return -1
}

// A bounded read's task emits exactly its partition's quota, then reports
// +inf; records past it are not emitted and SourceEnd names the first of
// them (offsets skip where a transaction marker sits), once. The count is
// in the store: the task reopened goes on from it, emitting nothing more
// once the quota is met.
func TestKafkaSourceQuota(t *testing.T) {
	te, sub, _ := boundedEnv(t, &ReadBound{Run: "r1", Quota: map[int32]int64{0: 3, 1: 2, 2: 0}})
	tk := te.task(sub, 1)
	tk.Fetched(10, 2)
	te.cycle(tk, kafkaRec(1, 0, "a", be8(1), 1000))
	checkLines(t, "first cycle", te.exec(sub).inputs(), []string{`"a":1 @1000 GW nofiring`})
	if _, rest := te.userRecords(te.take()); len(rest) != 1 || rest[0] == "status "+tk.ID()+" +inf" {
		t.Errorf("reports after 1 of 2 records: %q, want a status below +inf", rest)
	}
	if o := sourceEnd(tk); o != -1 {
		t.Errorf("SourceEnd before the end: %d", o)
	}

	// Reopened from the store: one record left (offset 1 is a marker).
	tk = te.task(sub, 1)
	te.cycle(tk, kafkaRec(1, 2, "b", be8(2), 2000), kafkaRec(1, 3, "c", be8(3), 3000), kafkaRec(1, 4, "d", be8(4), 4000))
	checkLines(t, "second cycle", te.exec(sub).inputs(), []string{`"b":2 @2000 GW nofiring`})
	user, rest := te.userRecords(te.take())
	checkLines(t, "user output", user, []string{"out/* b=2"})
	checkLines(t, "reports", rest, []string{"status " + tk.ID() + " +inf"})
	if o := sourceEnd(tk); o != 3 {
		t.Errorf("SourceEnd = %d, want 3 (the first record not emitted)", o)
	}
	if o := sourceEnd(tk); o != -1 {
		t.Errorf("SourceEnd again without new records = %d, want none", o)
	}

	// Reopened once more: done from the start.
	tk = te.task(sub, 1)
	te.cycle(tk, kafkaRec(1, 3, "c", be8(3), 3000))
	if in := te.exec(sub).inputs(); len(in) != 0 {
		t.Errorf("a task past its quota emitted %q", in)
	}
	_, rest = te.userRecords(te.take())
	checkLines(t, "reopened", rest, []string{"status " + tk.ID() + " +inf"})
	if o := sourceEnd(tk); o != 3 {
		t.Errorf("SourceEnd after reopening = %d, want 3", o)
	}

	// A partition of quota 0 is done without records.
	tk = te.task(sub, 2)
	te.cycle(tk)
	_, rest = te.userRecords(te.take())
	checkLines(t, "quota 0", rest, []string{"status " + tk.ID() + " +inf"})
}

// An aborted cycle's records do not count: the task reopened from the
// store (as after a failed transaction) emits them again.
func TestKafkaSourceQuotaAbort(t *testing.T) {
	te, sub, _ := boundedEnv(t, &ReadBound{Run: "r1", Quota: map[int32]int64{0: 2, 1: 2, 2: 2}})
	tk := te.task(sub, 0)
	ctx := context.Background()
	if err := tk.Handle(ctx, []*kgo.Record{kafkaRec(0, 0, "a", be8(1), 1000), kafkaRec(0, 1, "b", be8(2), 2000)}); err != nil {
		t.Fatal(err)
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	tk.Abort()
	te.exec(sub).inputs()
	te.take()
	tk = te.task(sub, 0)
	te.cycle(tk, kafkaRec(0, 0, "a", be8(1), 1000), kafkaRec(0, 1, "b", be8(2), 2000))
	checkLines(t, "after the abort", te.exec(sub).inputs(), []string{`"a":1 @1000 GW nofiring`, `"b":2 @2000 GW nofiring`})
}

// A count stored by another run (an earlier job of the same application)
// is not this run's: its quota starts again.
func TestKafkaSourceQuotaOtherRun(t *testing.T) {
	te, sub, _ := boundedEnv(t, &ReadBound{Run: "r1", Quota: map[int32]int64{0: 1, 1: 1, 2: 1}})
	te.cycle(te.task(sub, 0), kafkaRec(0, 0, "a", be8(1), 1000))
	te.exec(sub).inputs()
	te.env.ReadBounds[sub.ID] = &ReadBound{Run: "r2", Quota: map[int32]int64{0: 1, 1: 1, 2: 1}}
	tk := te.task(sub, 0)
	te.cycle(tk, kafkaRec(0, 1, "b", be8(2), 2000), kafkaRec(0, 2, "c", be8(3), 3000))
	checkLines(t, "next run", te.exec(sub).inputs(), []string{`"b":2 @2000 GW nofiring`})
	if o := sourceEnd(tk); o != 2 {
		t.Errorf("SourceEnd = %d, want 2", o)
	}
}

// A read with a deadline (max_read_time) emits what it handles before it,
// nothing after, and reports +inf from the deadline on, records or not.
func TestKafkaSourceDeadline(t *testing.T) {
	te, sub, now := kafkaEnv(t, translate.TimestampCreateTime)
	te.env.ReadBounds = map[int]*ReadBound{sub.ID: {Run: "r1", Deadline: now.Add(time.Second)}}
	tk, idle := te.task(sub, 0), te.task(sub, 1)
	tk.Fetched(10, 1)
	te.cycle(tk, kafkaRec(0, 0, "a", be8(1), 1000))
	te.cycle(idle)
	checkLines(t, "before", te.exec(sub).inputs(), []string{`"a":1 @1000 GW nofiring`})
	_, rest := te.userRecords(te.take())
	checkLines(t, "reports before", rest, []string{"status " + tk.ID() + " 1000", "status " + idle.ID() + " -inf"}) // no max delay by default
	*now = now.Add(time.Second)
	te.cycle(tk, kafkaRec(0, 1, "b", be8(2), 2000))
	te.cycle(idle)
	if in := te.exec(sub).inputs(); len(in) != 0 {
		t.Errorf("emitted after the deadline: %q", in)
	}
	_, rest = te.userRecords(te.take())
	checkLines(t, "reports after", rest, []string{"status " + tk.ID() + " +inf", "status " + idle.ID() + " +inf"})
	if o := sourceEnd(tk); o != 1 {
		t.Errorf("SourceEnd = %d, want 1", o)
	}
}

// A partition added to the topic after Run split max_num_records (above
// every partition with a quota) reads nothing: done at once, its record
// not emitted. A partition among them without a quota is a runtime bug,
// named.
func TestKafkaSourceNoQuota(t *testing.T) {
	te, sub, _ := boundedEnv(t, &ReadBound{Run: "r1", Quota: map[int32]int64{0: 1, 2: 1}})
	if _, err := New(te.env, sub, 1); err == nil || !strings.Contains(err.Error(), "partition 1 has no max_num_records quota") {
		t.Errorf("a task without its quota: %v, want an error naming it", err)
	}
	tk := te.task(sub, 3)
	te.cycle(tk, kafkaRec(3, 0, "a", be8(1), 1000))
	if in := te.exec(sub).inputs(); len(in) != 0 {
		t.Errorf("an added partition's task emitted %q", in)
	}
	_, rest := te.userRecords(te.take())
	checkLines(t, "added partition", rest, []string{"status " + tk.ID() + " +inf"})
	if o := sourceEnd(tk); o != 0 {
		t.Errorf("SourceEnd = %d, want 0 (its first record, not emitted)", o)
	}
}
