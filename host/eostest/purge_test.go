package eostest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/periodic"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function1x2(tickKey)
	register.Function2x0(dropGroup)
}

func tickKey(b []byte) (int, int) { return len(b) % 3, 1 }

func dropGroup(int, func(*int) bool) {}

// TestRepartitionTopicsPurged: the records of a repartition topic below the
// group's committed offset are deleted (DESIGN.md §3), so an unbounded job's
// shuffle topics do not grow with its input: when the job is done, every
// repartition partition starts exactly at the group's committed offset.
func TestRepartitionTopicsPurged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	start := time.Now()
	ticks := periodic.Impulse(s, start, start.Add(2*time.Second), 50*time.Millisecond, false)
	beam.ParDo0(s, dropGroup, beam.GroupByKey(s, beam.ParDo(s, tickKey, ticks)))
	bootstrap := kafkatest.Broker(t)
	appID := kafkatest.UniqueName(t, "purge")
	id, r := env.Run(ctx, t, env.Marshal(t, p), map[string]string{
		"bootstrap_servers":    bootstrap,
		"application_id":       appID,
		"state_dir":            filepath.Join(t.TempDir(), "state"),
		"internal_parallelism": "2",
	})
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	details, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var repartition []string
	for _, name := range details.Names() {
		if strings.HasPrefix(name, shuffle.TopicName(appID, "")) && strings.HasSuffix(name, "-repartition") {
			repartition = append(repartition, name)
		}
	}
	if len(repartition) == 0 {
		t.Fatalf("no repartition topic of %s", appID)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, appID, repartition...)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(ctx, repartition...)
	if err != nil {
		t.Fatal(err)
	}
	purged := 0
	starts.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if !ok || c.At <= 0 {
			return
		}
		if o.Offset != c.At {
			t.Errorf("%s/%d starts at %d, want the committed offset %d", o.Topic, o.Partition, o.Offset, c.At)
		}
		purged++
	})
	if purged == 0 {
		t.Errorf("no repartition partition of %s has a committed offset: %v", appID, committed)
	}
}
