package jobtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// CommittedData counts, per internal data topic of application appID (not
// changelogs, not the status and pipeline topics) and partition, the
// elements of the data records a read_committed consumer sees, packed or
// not (topic → partition → elements; partitions with only watermark
// reports or transaction markers count 0). Call it
// when the job is over: no transaction may be open.
func CommittedData(t testing.TB, bootstrap, appID string) map[string]map[int32]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	details, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix := shuffle.TopicName(appID, "")
	var names []string
	for _, name := range details.Names() {
		if strings.HasPrefix(name, prefix) && !strings.HasSuffix(name, "-changelog") &&
			name != shuffle.TopicName(appID, shuffle.StatusTopic) && name != shuffle.TopicName(appID, shuffle.PipelineTopic) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("no internal topics with prefix %s", prefix)
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	pending := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if pending[o.Topic] == nil {
				pending[o.Topic] = map[int32]int64{}
			}
			pending[o.Topic][o.Partition] = o.Offset
		}
	})
	cl := kafkatest.Client(t, bootstrap,
		kgo.ConsumeTopics(names...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	counts := map[string]map[int32]int{}
	for _, name := range names {
		counts[name] = map[int32]int{}
	}
	for len(pending) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading internal topics: %v (still pending %v)", ctx.Err(), pending)
		}
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case r.Attrs.IsControl() || len(r.Value) == 0:
			case r.Value[0] == shuffle.KindData:
				counts[r.Topic][r.Partition]++
			case r.Value[0] == shuffle.KindDataPacked:
				n, _, err := shuffle.DecodePacked(r.Value)
				if err != nil {
					t.Fatalf("topic %s partition %d offset %d: %v", r.Topic, r.Partition, r.Offset, err)
				}
				counts[r.Topic][r.Partition] += n
			}
			if end, ok := pending[r.Topic][r.Partition]; ok && r.Offset >= end-1 {
				delete(pending[r.Topic], r.Partition)
				if len(pending[r.Topic]) == 0 {
					delete(pending, r.Topic)
				}
			}
		})
	}
	return counts
}
