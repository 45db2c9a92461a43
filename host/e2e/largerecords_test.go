package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function2x0(kafkaReadBytesPlaceholder)
	register.Function2x0(kafkaWriteBytesPlaceholder)
}

func kafkaReadBytesPlaceholder([]byte, func(string, []byte)) {}
func kafkaWriteBytesPlaceholder(string, []byte)              {}

// largeValue is n random bytes seeded by i (they do not compress).
func largeValue(i, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 3))
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(r.Uint32())
	}
	return b
}

// TestKafkaLargeRecords: records of 3 MB in the user's topics (whose
// max.message.bytes allows them; the write's producer config raises
// max.request.size to match) pass through a Kafka read, a Reshuffle (an
// internal topic: internal_max_message_bytes, 8 MiB) and a Kafka write,
// each once and intact.
func TestKafkaLargeRecords(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	ctx := testContext(t, 3*time.Minute)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	const size, n = 3 << 20, 6
	limit := map[string]string{"max.message.bytes": fmt.Sprint(5 << 20)}
	kafkatest.CreateTopicWithConfigs(t, bootstrap, in, 2, limit)
	kafkatest.CreateTopicWithConfigs(t, bootstrap, out, 2, limit)
	cl := kafkatest.Client(t, bootstrap, kgo.ProducerBatchMaxBytes(5<<20))
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: int32(i % 2), Key: []byte(fmt.Sprint(i)), Value: largeValue(i, size)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p, s := beam.NewPipelineWithRoot()
	recs := beam.ParDo(s, kafkaReadBytesPlaceholder, beam.Impulse(s))
	beam.ParDo0(s, kafkaWriteBytesPlaceholder, beam.Reshuffle(s, recs))
	pipe := jobtest.MarshalLoopback(t, p, loopback.EnvironmentConfig, workerBin)
	max := int64(n)
	rb, err := translate.EncodeKafkaRead(&translate.KafkaRead{
		Topics: []string{in}, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaByteArray,
		TimestampPolicy: translate.TimestampProcessingTime, ConsumerConfig: map[string]string{"auto.offset.reset": "earliest"},
		MaxNumRecords: &max,
	})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := translate.EncodeKafkaWrite(&translate.KafkaWrite{Topic: out, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaByteArray,
		ProducerConfig: map[string]string{"max.request.size": fmt.Sprint(5 << 20)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSource(pipe, "kafkaReadBytesPlaceholder", translate.URNKafkaRead, rb); err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSink(pipe, "kafkaWriteBytesPlaceholder", translate.URNKafkaWrite, wb); err != nil {
		t.Fatal(err)
	}
	runDone(ctx, t, ksrunner, pipe, map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap})
	got := map[string][]byte{}
	kafkatest.ReadTopic(context.Background(), t, bootstrap, out, nil, func(r *kgo.Record) {
		if _, dup := got[string(r.Key)]; dup {
			t.Errorf("key %s written twice", r.Key)
		}
		got[string(r.Key)] = r.Value
	})
	if len(got) != n {
		t.Errorf("%d records written, want %d", len(got), n)
	}
	for i := range n {
		if v := got[fmt.Sprint(i)]; !bytes.Equal(v, largeValue(i, size)) {
			t.Errorf("record %d: %d bytes, not the %d written", i, len(v), size)
		}
	}
}
