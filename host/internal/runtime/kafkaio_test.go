package runtime

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

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
// (latest, Kafka's default) unless auto.offset.reset is earliest; committed
// offsets and internal topics are left alone (internal topics start at the
// start).
func TestStartOffsets(t *testing.T) {
	for _, tc := range []struct {
		reset  string
		wantIn int64 // the offset an uncommitted partition of "in" starts at
	}{{"", -1}, {"latest", -1}, {"earliest", -2}} {
		plan := kafkaPlan(tc.reset, "", "")
		i := &instance{subByTopic: map[string]*translate.SubTopology{"in": plan.SubTopologies[0], "__beam_app_gbk-repartition": plan.SubTopologies[1]}}
		start := kgo.NewOffset().AtStart()
		got, err := i.startOffsets(context.Background(), map[string]map[int32]kgo.Offset{
			"in":                         {0: start, 1: kgo.NewOffset().At(17)},
			"__beam_app_gbk-repartition": {0: start},
		})
		if err != nil {
			t.Fatal(err)
		}
		if o := got["in"][0].EpochOffset().Offset; o != tc.wantIn {
			t.Errorf("reset %q: uncommitted partition starts at %d, want %d", tc.reset, o, tc.wantIn)
		}
		if o := got["in"][1].EpochOffset().Offset; o != 17 {
			t.Errorf("reset %q: committed partition starts at %d, want 17", tc.reset, o)
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
