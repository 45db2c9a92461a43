package runtime

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

func kafkaPlan(reset, readServers, writeServers string) *translate.Plan {
	read := &translate.KafkaRead{Topics: []string{"in"}, BootstrapServers: readServers, KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray, TimestampPolicy: translate.TimestampCreateTime}
	if reset != "" {
		read.ConsumerConfig = map[string]string{"auto.offset.reset": reset}
	}
	write := &translate.KafkaWrite{Topic: "out", BootstrapServers: writeServers, KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray}
	return &translate.Plan{SubTopologies: []*translate.SubTopology{
		{ID: 0, Input: "in", Root: translate.Root{Kind: translate.RootKafkaSource, TransformID: "read", KafkaRead: read},
			Sinks: []translate.Sink{{PCollection: "pc", Topic: "out", KafkaWrite: write, TransformID: "write"}}},
		{ID: 1, Input: "__beam_app_gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey}},
	}}
}

// A Kafka read's partitions without a committed offset start at the end
// (latest, Kafka's default) unless auto.offset.reset is earliest, or
// by_duration:D (the first record no more than D older than the Run's
// start; the end when none is), or at start_read_time (whatever
// auto.offset.reset says; the end when no record is that late): at an
// exact offset listed on the broker, which
// sourceEnds learns; committed offsets and internal topics are left alone
// (internal topics start at the start).
func TestStartOffsets(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	for _, ts := range []int64{1000, 2000, 3000} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Partition: 0, Timestamp: time.UnixMilli(ts)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		reset    string
		readTime int64
		wantIn   int64 // the offset uncommitted partition 0 of "in" starts at
	}{
		{"", 0, 3}, {"latest", 0, 3}, {"earliest", 0, 0}, {"", 2000, 1}, {"earliest", 2000, 1}, {"", 5000, 3},
		// The Run began reading at 5000 (Config.resetAt).
		{"by_duration:PT3S", 0, 1}, {"by_duration:PT2.5S", 0, 2}, {"by_duration:P1D", 0, 0}, {"by_duration:PT1S", 0, 3},
		{"by_duration:PT3S", 3000, 2}, // start_read_time first
	} {
		plan := kafkaPlan(tc.reset, "", "")
		if tc.readTime > 0 {
			plan.SubTopologies[0].Root.KafkaRead.StartReadTimeMs = &tc.readTime
		}
		i := &instance{
			cfg:        Config{resetAt: time.UnixMilli(5000)},
			subByTopic: map[string]*translate.SubTopology{"in": plan.SubTopologies[0], "__beam_app_gbk-repartition": plan.SubTopologies[1]},
			admin:      cl,
			sourceEnds: newSourceEnds(kadm.NewClient(cl), []string{"in"}),
		}
		start := kgo.NewOffset().AtStart()
		got, err := i.startOffsets(ctx, map[string]map[int32]kgo.Offset{
			"in":                         {0: start, 1: kgo.NewOffset().At(17)},
			"__beam_app_gbk-repartition": {0: start},
		})
		if err != nil {
			t.Fatal(err)
		}
		if o := got["in"][0].EpochOffset().Offset; o != tc.wantIn {
			t.Errorf("reset %q, start_read_time %d: uncommitted partition starts at %d, want %d", tc.reset, tc.readTime, o, tc.wantIn)
		}
		if o := i.sourceEnds.startOf("in", 0); o != tc.wantIn {
			t.Errorf("reset %q, start_read_time %d: sourceEnds has it start at %d, want %d", tc.reset, tc.readTime, o, tc.wantIn)
		}
		if o := got["in"][1].EpochOffset().Offset; o != 17 {
			t.Errorf("reset %q: committed partition starts at %d, want 17", tc.reset, o)
		}
		if o := i.sourceEnds.startOf("in", 1); o != -1 {
			t.Errorf("reset %q: sourceEnds has the committed partition start at %d, want -1 (the commit says)", tc.reset, o)
		}
		if o := got["__beam_app_gbk-repartition"][0].EpochOffset().Offset; o != -2 {
			t.Errorf("reset %q: internal topic starts at %d, want the start", tc.reset, o)
		}
	}
}

// Kafka IO naming other brokers than the job's is refused at Run, naming
// the transform; the job's brokers in another order or spelling of the
// list are accepted.
func TestCheckKafkaIO(t *testing.T) {
	cfg := Config{BootstrapServers: "a:9092,b:9092", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tc := range []struct {
		read, write, want string
	}{
		{"", "", ""},
		{"b:9092, a:9092", "a:9092,b:9092", ""},
		{"c:9092", "", "transform read: bootstrap servers \"c:9092\""},
		{"", "a:9092", "transform write: bootstrap servers \"a:9092\""},
	} {
		cfg.Plan = kafkaPlan("", tc.read, tc.write)
		err := checkKafkaIO(cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("read %q write %q: %v, want %q", tc.read, tc.write, err, tc.want)
		}
	}
}
