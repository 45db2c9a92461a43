package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

// passthroughInstance is an instance that consumes the partitions of one
// passthrough sub-topology's input topic (no group) with a task for each:
// a task forwards every element to the output topic, through produced,
// in the order it handles them.
type passthroughInstance struct {
	*instance
	in string // the input topic's Kafka name

	mu       sync.Mutex
	produced []string // the elements the tasks forwarded, in order
}

func newPassthroughInstance(t *testing.T, bootstrap string, partitions int32) *passthroughInstance {
	t.Helper()
	coders := map[string]*pipepb.Coder{
		"bytes": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:bytes:v1"}},
		"gw":    {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:global_window:v1"}},
		"wv":    {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:windowed_value:v1"}, ComponentCoderIds: []string{"bytes", "gw"}},
	}
	plan := &translate.Plan{
		Pipeline: &pipepb.Pipeline{Components: &pipepb.Components{Coders: coders}},
		Topics: []*translate.Topic{
			{Name: "in-redistribute", Kind: translate.TopicRedistribute},
			{Name: "out-redistribute", Kind: translate.TopicRedistribute},
		},
		SubTopologies: []*translate.SubTopology{{
			ID: 0, Input: "in-redistribute",
			Root:  translate.Root{Kind: translate.RootPassthrough, Output: "pc"},
			Sinks: []translate.Sink{{PCollection: "pc", Topic: "out-redistribute"}},
		}},
		WireCoders: map[string]string{"pc": "wv"},
	}
	ts := topics.New(plan, kafkatest.UniqueName(t, "app"), 1, int(partitions))
	codec, err := shuffle.NewElementCodec(coders, "wv")
	if err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: pebbleLogger{slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	in := ts.Full("in-redistribute")
	kafkatest.CreateTopic(t, bootstrap, in, partitions)
	offsets := map[int32]kgo.Offset{}
	for p := range partitions {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	pi := &passthroughInstance{in: in}
	pi.instance = &instance{
		cfg:        Config{Plan: plan, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		topics:     ts,
		cl:         kafkatest.Client(t, bootstrap, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{in: offsets})),
		db:         db,
		subByTopic: map[string]*translate.SubTopology{in: plan.SubTopologies[0]},
		tasks:      map[taskID]*task.Task{},
		env: &task.Env{
			Plan: plan, Topics: ts, Codecs: map[string]*shuffle.ElementCodec{"pc": codec},
			DB: db, Metrics: metrics.NewJob(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			MaxBundleSize: 1000,
			Produce: func(r *kgo.Record) {
				pi.mu.Lock()
				pi.produced = append(pi.produced, string(r.Value[1:]))
				pi.mu.Unlock()
			},
		},
	}
	for p := range partitions {
		tk, err := task.New(pi.env, plan.SubTopologies[0], p)
		if err != nil {
			t.Fatal(err)
		}
		pi.tasks[taskID{in, p}] = tk
	}
	return pi
}

// handled returns, by input partition, the sequence numbers of the elements
// the tasks forwarded ("p<partition>-<seq>"), in the order they did.
func (pi *passthroughInstance) handled() map[int32][]int {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	out := map[int32][]int{}
	for _, e := range pi.produced {
		var p int32
		var n int
		if _, err := fmt.Sscanf(e, "p%d-%d", &p, &n); err == nil {
			out[p] = append(out[p], n)
		}
	}
	return out
}

// TestPollAfterCommitKeepsPartitionOrder: a cycle's second poll
// (pollAfterCommit) brings more records of a partition whose earlier
// records the first poll brought; the partition's task must handle them
// after those, each once, and none of either poll may be lost. The first
// poll here takes a few records of the client's buffer, so that the
// second deterministically takes the rest of the same partitions; then
// cycles go on until every record was handled, and each partition's
// records must have been handled exactly once, in offset order.
func TestPollAfterCommitKeepsPartitionOrder(t *testing.T) {
	const partitions, perPartition = 2, 50
	bootstrap := kafkatest.Broker(t)
	pi := newPassthroughInstance(t, bootstrap, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for n := range perPartition {
		for p := range int32(partitions) {
			recs = append(recs, &kgo.Record{Topic: pi.in, Partition: p, Value: append([]byte{shuffle.KindData}, fmt.Sprintf("p%d-%d", p, n)...)})
		}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The first cycle: a first poll of 3 records leaves the rest of its
	// fetch in the client's buffer, which the second poll takes.
	first := pi.cl.PollRecords(ctx, 3)
	if err := first.Err0(); err != nil {
		t.Fatal(err)
	}
	both := pi.pollAfterCommit(ctx, first, 1000, time.Second)
	firstParts := map[int32]bool{}
	first.EachPartition(func(p kgo.FetchTopicPartition) { firstParts[p.Partition] = len(p.Records) > 0 })
	var again bool
	for _, f := range both[len(first):] {
		for _, ft := range f.Topics {
			for _, fp := range ft.Partitions {
				again = again || firstParts[fp.Partition] && len(fp.Records) > 0
			}
		}
	}
	if !again {
		t.Fatalf("the first cycle's second poll brought none of the records that the first poll (%d records) left in the client's buffer (both polls: %d records)", first.NumRecords(), both.NumRecords())
	}
	if _, err := pi.process(ctx, both); err != nil {
		t.Fatal(err)
	}
	// Later cycles, as the loop runs them, until every record is handled
	// (a lost one, never: then for 10 s).
	deadline := time.Now().Add(10 * time.Second)
	for total := 0; total < partitions*perPartition && time.Now().Before(deadline); {
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fs := pi.cl.PollRecords(pctx, 1000)
		pcancel()
		fs = pi.pollAfterCommit(ctx, fs, 1000, time.Second)
		if _, err := pi.process(ctx, fs); err != nil {
			t.Fatal(err)
		}
		total = 0
		for _, ns := range pi.handled() {
			total += len(ns)
		}
	}
	want := make([]int, perPartition)
	for n := range want {
		want[n] = n
	}
	for p, got := range pi.handled() {
		if !slices.Equal(got, want) {
			t.Errorf("partition %d: records handled in the order %s, want each once in offset order", p, brief(got))
		}
	}
}

// brief shows a sequence of numbers, runs of consecutive ones shortened.
func brief(ns []int) string {
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		} else {
			parts = append(parts, fmt.Sprint(ns[i]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, " ") + "]"
}
