package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestKafkaWithheldPartitionNotLate (issue 12): the broker withholds one
// partition of a Kafka read from every fetch (a retriable error for it
// alone, as a leader move or a slow replica does) while a record waits in
// it; the polls go on without it, and the other partition, idle, follows
// wall time well past the record's window. The withheld partition's
// watermark must not: the record is counted in its window when the fetches
// resume, with the other partition's record of that window, in one result.
// Before the fix a complete poll that did not bring the partition counted
// it as caught up, so its watermark followed wall time too, the window
// fired without the record, and the record came late (dropped, or fired
// again in a second pane).
func TestKafkaWithheldPartitionNotLate(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	bootstrap := c.ListenAddrs()[0]
	ctx := testContext(t, 2*time.Minute)
	in, out := countTopics(t, bootstrap, "withheld", 2)
	pipe := kafkaSumPipeline(t, loopback.EnvironmentConfig, in, out, time.Second, nil)
	source := sourceSubTopology(t, pipe)
	appID := kafkatest.UniqueName(t, "withheld")
	id, err := submit(ctx, t, ksrunner, pipe, map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "source_idle_timeout_ms": "500"})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })

	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(p int32, key string, ts time.Time) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: p, Key: []byte(key), Value: be8(1), Timestamp: ts}).FirstErr(); err != nil {
			t.Fatalf("producing to %s/%d: %v", in, p, err)
		}
	}
	window := func(ts time.Time) int64 { return ts.UnixMilli() - ts.UnixMilli()%1000 }

	// The job runs: a record on each partition, their window fires.
	warm := time.Now()
	produce(0, "warm", warm)
	produce(1, "warm", warm)
	kafkatest.ReadCounts(ctx, t, bootstrap, out, 1)

	// Withhold partition 1 from the fetches, from a fetch that asked for
	// it on: one already waiting at the broker may answer with the record.
	withheld := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: in, Partitions: []int32{1}, Err: kerr.NotLeaderForPartition, Count: -1})
	for withheld.Hits() == 0 {
		if ctx.Err() != nil {
			t.Fatal("no fetch of the withheld partition")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its timestamp is a little ahead: an idle partition's watermark may
	// reach the time an end-offset listing was sent, which can fall in
	// the very millisecond of time.Now() here, before the record exists
	// (CI once saw the watermark equal to the record's time so).
	late := time.Now().Add(5 * time.Millisecond)
	produce(1, "late", late)
	produce(0, "late", late)

	// Partition 0 is idle and caught up: its watermark follows wall time.
	// Wait until it is two seconds past the records' window (the source
	// tasks report every cycle while their watermarks move, so by then
	// the reader has seen the withheld partition's reports of that time).
	status := shuffle.TopicName(appID, shuffle.StatusTopic)
	past := window(late) + 1000 + 2000
	reported := map[string]int64{}
	kafkatest.ReadTopic(ctx, t, bootstrap, status, func() bool { return reported[fmt.Sprintf("%d/0", source)] >= past }, func(r *kgo.Record) {
		s, err := task.DecodeStatus(r.Value)
		if err != nil {
			t.Errorf("status record of %s: %v", r.Key, err)
			return
		}
		reported[string(r.Key)] = s.Watermark
	})
	if wm1 := reported[fmt.Sprintf("%d/1", source)]; wm1 >= late.UnixMilli() {
		t.Errorf("the withheld partition's watermark reached %s, past its record at %s that no poll brought", time.UnixMilli(wm1).Format(time.StampMilli), late.Format(time.StampMilli))
	}

	// Fetches resume: the window holds both records, once.
	withheld.Remove()
	key := fmt.Sprintf("late@%d", window(late))
	got := map[string]int64{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, func() bool { _, ok := got[key]; return ok }, func(r *kgo.Record) {
		got[string(r.Key)] += int64(binary.BigEndian.Uint64(r.Value))
	})
	if got[key] != 2 {
		t.Errorf("window %s: sum %d, want 2 (the withheld record came late)", key, got[key])
	}
	if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r, err := wait(ctx, ksrunner, id); err != nil || r.State != jobpb.JobState_CANCELLED {
		t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", r.State, strings.Join(r.Errors, "; "), err)
	}
	// Nothing more: a second pane of the window would be a second result.
	kafkatest.ReadCounts(ctx, t, bootstrap, out, -1)
}
