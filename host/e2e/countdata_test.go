package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// countRec is one input record of kafkaCountPipeline's tests.
type countRec struct {
	key       string
	ts, value int64
	partition int32
}

// countData is the input of the windowed-sum tests: n records, seven
// seconds of event time apart, over 10 keys, spread round-robin over the
// input topic's partitions, starting two hours ago (Kafka 4 refuses
// timestamps more than an hour ahead). With source_idle_timeout_ms an
// hour, only the data moves the watermark, so which one-minute windows
// have fired after a prefix of the records is known exactly (fired).
type countData struct {
	recs       []countRec
	partitions int32
}

func newCountData(n int, partitions int32) countData {
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute).UnixMilli()
	d := countData{recs: make([]countRec, n), partitions: partitions}
	for i := range d.recs {
		d.recs[i] = countRec{key: fmt.Sprintf("k%d", i%10), ts: base + int64(i)*7000, value: int64(1 + i%3), partition: int32(i) % partitions}
	}
	return d
}

// produce writes rs to topic in, each to its partition.
func (d countData) produce(ctx context.Context, t *testing.T, bootstrap, in string, rs []countRec) {
	t.Helper()
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, r := range rs {
		cl.Produce(ctx, &kgo.Record{Topic: in, Partition: r.partition, Key: []byte(r.key), Value: be8(r.value), Timestamp: time.UnixMilli(r.ts)}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("producing: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil || t.Failed() {
		t.Fatalf("producing the input: %v", err)
	}
}

// fired is what the output holds once the job has read rs: the sums of the
// one-minute windows that end at or before the GroupByKey's input
// watermark, the least over partitions of its largest timestamp (the
// source's max delay is 0 by default, as Java KafkaIO's CreateTime policy
// across languages).
func (d countData) fired(rs []countRec) map[string]int64 {
	maxTs := map[int32]int64{}
	for _, r := range rs {
		maxTs[r.partition] = max(maxTs[r.partition], r.ts)
	}
	wm := int64(1<<63 - 1)
	for p := range d.partitions {
		wm = min(wm, maxTs[p])
	}
	want := map[string]int64{}
	for _, r := range d.recs { // every record: a window closed by wm holds all of its records
		if start := r.ts - r.ts%60000; start+60000 <= wm {
			want[fmt.Sprintf("%s@%d", r.key, start)] += r.value
		}
	}
	return want
}

// windows is what the output holds once the job has read rs and drained:
// the sums of every one-minute window of rs.
func (d countData) windows(rs []countRec) map[string]int64 {
	all := map[string]int64{}
	for _, r := range rs {
		all[fmt.Sprintf("%s@%d", r.key, r.ts-r.ts%60000)] += r.value
	}
	return all
}

// halves returns the first and the whole data's fired windows, failing
// unless each half fires some.
func (d countData) halves(t *testing.T) (want1, want2 map[string]int64) {
	t.Helper()
	want1, want2 = d.fired(d.recs[:len(d.recs)/2]), d.fired(d.recs)
	if len(want1) == 0 || len(want2) <= len(want1) {
		t.Fatalf("test data: %d windows fire after the first half, %d after all", len(want1), len(want2))
	}
	return want1, want2
}

// countTopics creates the input topic (partitions partitions) and the
// output topic of a count pipeline, named after the test and name.
func countTopics(t *testing.T, bootstrap, name string, partitions int32) (in, out string) {
	t.Helper()
	in, out = kafkatest.UniqueName(t, name+"-in"), kafkatest.UniqueName(t, name+"-out")
	kafkatest.CreateTopic(t, bootstrap, in, partitions)
	kafkatest.CreateTopic(t, bootstrap, out, kafkatest.CountOutPartitions)
	return in, out
}
