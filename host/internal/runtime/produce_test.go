package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/translate"
)

// A record the producer fails fails the instance naming its topic and
// partition and, on a Kafka write's topic, the write and the record's key.
func TestProducePromiseNamesTheWrite(t *testing.T) {
	plan := &translate.Plan{SubTopologies: []*translate.SubTopology{{
		ID: 0, Input: "in",
		Sinks: []translate.Sink{{Topic: "out", TransformID: "write", KafkaWrite: &translate.KafkaWrite{Topic: "out"}}},
	}}}
	for _, tc := range []struct {
		rec  *kgo.Record
		want string
	}{
		{&kgo.Record{Topic: "out", Partition: 2, Key: []byte("k1"), Value: make([]byte, 10)},
			`transform write: producing to topic out partition 2 (record key "k1", 10 value bytes): MESSAGE_TOO_LARGE`},
		{&kgo.Record{Topic: "__beam_app_x-repartition", Partition: 1},
			`producing to topic __beam_app_x-repartition partition 1: MESSAGE_TOO_LARGE`},
	} {
		i := &instance{topics: topics.New(plan, "app", 1, 2)}
		i.producePromise(tc.rec, nil)
		if err := i.failure(); err != nil {
			t.Fatalf("a produced record failed the instance: %v", err)
		}
		i.producePromise(tc.rec, kerr.MessageTooLarge)
		err := i.failure()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("failure %v, want %q wrapping the producer's error", err, tc.want)
		}
	}
}
