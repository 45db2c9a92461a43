package topics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

// kafkaPlan reads user topic in and writes user topic out.
func kafkaPlan(in, out string) *translate.Plan {
	return &translate.Plan{
		Topics: []*translate.Topic{{Name: in, Kind: translate.TopicKafka}},
		SubTopologies: []*translate.SubTopology{{
			ID: 0, Input: in,
			Root:  translate.Root{Kind: translate.RootKafkaSource, TransformID: "read"},
			Sinks: []translate.Sink{{Topic: out, TransformID: "write", KafkaWrite: &translate.KafkaWrite{Topic: out}}},
		}},
	}
}

// The application's own dead-letter topic is created (one partition) and
// kept when it exists; a named one must exist, else Discover fails naming
// option dead_letter_topic and the topic; Discover records the written
// topics' max.message.bytes; a plan without Kafka IO gets none.
func TestDeadLetterTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	adm := AdminOf(kafkatest.Client(t, bootstrap))
	in, out := kafkatest.UniqueName(t, "in"), kafkatest.UniqueName(t, "out")
	kafkatest.CreateTopic(t, bootstrap, in, 2)
	limit := "5000"
	if resp, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"max.message.bytes": &limit}, out); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	// A real broker's metadata may not show a topic for a moment after
	// CreateTopics answers (Discover failed on "does not exist" in CI).
	if _, err := WaitForLeaders(ctx, adm.raw, out); err != nil {
		t.Fatal(err)
	}
	app := kafkatest.UniqueName(t, "app")

	own := shuffle.TopicName(app, DeadLetterName)
	for run := range 2 { // the second finds it
		ts := New(kafkaPlan(in, out), app, 1, 2)
		ts.SetDeadLetter(own, true)
		if err := ts.Discover(ctx, adm.Client); err != nil {
			t.Fatal(err)
		}
		if got := ts.MaxMessageBytes[out]; got != 5000 {
			t.Errorf("max.message.bytes of %s: %d, want 5000", out, got)
		}
		if err := ts.Create(ctx, adm); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if ts.DeadLetter != own || ts.DeadLetterPartitions != 1 {
			t.Errorf("run %d: dead-letter topic %q of %d partitions, want %q of 1", run, ts.DeadLetter, ts.DeadLetterPartitions, own)
		}
	}

	named := kafkatest.UniqueName(t, "dlq")
	ts := New(kafkaPlan(in, out), app, 1, 2)
	ts.SetDeadLetter(named, false)
	if err := ts.Discover(ctx, adm.Client); err == nil || !strings.Contains(err.Error(), `option dead_letter_topic: Kafka topic "`+named+`" does not exist`) {
		t.Errorf("Discover with a missing dead_letter_topic: %v", err)
	}
	kafkatest.CreateTopic(t, bootstrap, named, 4)
	// A new client: the first one's metadata cache still misses the topic.
	if err := ts.Discover(ctx, kadm.NewClient(kafkatest.Client(t, bootstrap))); err != nil {
		t.Fatal(err)
	}
	if ts.DeadLetterPartitions != 4 {
		t.Errorf("named dead-letter topic: %d partitions, want 4", ts.DeadLetterPartitions)
	}

	none := New(&translate.Plan{}, app, 1, 2)
	none.SetDeadLetter(own, true)
	if none.DeadLetter != "" {
		t.Errorf("a plan without Kafka IO has dead-letter topic %q", none.DeadLetter)
	}
}
