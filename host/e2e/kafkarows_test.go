package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	beam.RegisterType(reflect.TypeOf((*kafkaRecord)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*kafkaWriteRow)(nil)).Elem())
	register.Function2x0(kafkaRecordPlaceholder)
	register.Function1x0(kafkaWriteRowPlaceholder)
	register.DoFn2x0[kafkaRecord, func(kafkaWriteRow)]((*recordToWriteRow)(nil))
}

// kafkaHeader and kafkaRecord are the with-metadata record row
// (translate.KafkaRecordSchema) as a Go type: pointers where the row is
// nullable, so the Go SDK's schema of it is that row.
type kafkaHeader struct {
	Key   string  `beam:"key"`
	Value *[]byte `beam:"value"`
}

type kafkaRecord struct {
	Topic             string         `beam:"topic"`
	Partition         int32          `beam:"partition"`
	Offset            int64          `beam:"offset"`
	Timestamp         int64          `beam:"timestamp"`
	Key               *[]byte        `beam:"key"`
	Value             *[]byte        `beam:"value"`
	Headers           *[]kafkaHeader `beam:"headers"`
	TimestampTypeID   int32          `beam:"timestampTypeId"`
	TimestampTypeName string         `beam:"timestampTypeName"`
}

// kafkaWriteRow is a write-with-headers row, in an order of its own.
type kafkaWriteRow struct {
	Headers   []kafkaHeader `beam:"headers"`
	Partition *int32        `beam:"partition"`
	Key       []byte        `beam:"key"`
	Value     []byte        `beam:"value"`
	Topic     *string       `beam:"topic"`
	Timestamp *int64        `beam:"timestamp"`
}

func kafkaRecordPlaceholder([]byte, func(kafkaRecord)) {}
func kafkaWriteRowPlaceholder(kafkaWriteRow)           {}

// recordToWriteRow writes each record it reads with its headers and a
// "meta" header of what the read said of it (topic/partition/offset/
// timestamp/type id/type name/headers count), to partition (p+1) mod 3
// of Out at its timestamp + 1000; rows of odd offsets name Out
// themselves, others leave the topic to the write; with BadTopic set, the
// row of offset 2 names it.
type recordToWriteRow struct {
	Out, BadTopic string
}

func (f *recordToWriteRow) ProcessElement(r kafkaRecord, emit func(kafkaWriteRow)) {
	var hs []kafkaHeader
	if r.Headers != nil {
		hs = *r.Headers
	}
	meta := []byte(fmt.Sprintf("%s/%d/%d/%d/%d/%s/%d", r.Topic, r.Partition, r.Offset, r.Timestamp, r.TimestampTypeID, r.TimestampTypeName, len(hs)))
	row := kafkaWriteRow{Headers: append(slices.Clone(hs), kafkaHeader{Key: "meta", Value: &meta})}
	if r.Key != nil {
		row.Key = *r.Key
	}
	if r.Value != nil {
		row.Value = *r.Value
	}
	p, ts := (r.Partition+1)%3, r.Timestamp+1000
	row.Partition, row.Timestamp = &p, &ts
	if r.Offset%2 == 1 {
		row.Topic = &f.Out
	}
	if f.BadTopic != "" && r.Offset == 2 {
		row.Topic = &f.BadTopic
	}
	emit(row)
}

// kafkaRowsPipeline reads topic in with metadata and writes out with
// headers through recordToWriteRow.
func kafkaRowsPipeline(t *testing.T, in, out, badTopic string) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	recs := beam.ParDo(s, kafkaRecordPlaceholder, beam.Impulse(s))
	beam.ParDo0(s, kafkaWriteRowPlaceholder, beam.ParDo(s, &recordToWriteRow{Out: out, BadTopic: badTopic}, recs))
	pipe := marshal(t, p)
	rb, err := translate.EncodeKafkaRead(&translate.KafkaRead{
		Topics: []string{in}, KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray, WithMetadata: true,
		TimestampPolicy: translate.TimestampCreateTime, ConsumerConfig: map[string]string{"auto.offset.reset": "earliest"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := translate.EncodeKafkaWrite(&translate.KafkaWrite{Topic: out, KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray, WithHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSource(pipe, "kafkaRecordPlaceholder", translate.URNKafkaRead, rb); err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSink(pipe, "kafkaWriteRowPlaceholder", translate.URNKafkaWrite, wb); err != nil {
		t.Fatal(err)
	}
	return pipe
}

// TestKafkaRowsRoundTrip: a read with metadata gives each record's topic,
// partition, offset, timestamp, timestamp type and headers (null key,
// null header value and no headers included), and a write with headers
// produces each row's key, value and headers, in order, to the row's
// partition at the row's timestamp, whether the row names the topic or
// leaves it to the write: the output topic, read read_committed, holds
// exactly one such record per input record.
func TestKafkaRowsRoundTrip(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "krin"), kafkatest.UniqueName(t, "krout")
	recs := kafkatest.FillRowsTopic(ctx, t, bootstrap, in, out)

	id, err := submit(ctx, t, ksrunner, kafkaRowsPipeline(t, in, out, ""), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })

	got := map[string]*kgo.Record{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, func() bool { return len(got) >= len(recs) }, func(r *kgo.Record) {
		if _, dup := got[string(r.Value)]; dup {
			t.Errorf("value %q written twice", r.Value)
		}
		got[string(r.Value)] = r
	})
	if _, err := ksrunner.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r, err := wait(ctx, ksrunner, id); err != nil || r.State != jobpb.JobState_CANCELLED {
		t.Fatalf("job ended %v (errors %q, %v), want CANCELLED", r.State, r.Errors, err)
	}
	n := 0
	kafkatest.ReadTopic(ctx, t, bootstrap, out, nil, func(*kgo.Record) { n++ })
	if n != len(recs) {
		t.Errorf("the output topic holds %d records, want %d", n, len(recs))
	}
	kafkatest.CheckRowsOutput(t, in, recs, got)
}

// A row naming a topic that does not exist fails the job, naming the
// topic and the write.
func TestKafkaRowsUnknownTopic(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "krin"), kafkatest.UniqueName(t, "krout")
	kafkatest.FillRowsTopic(ctx, t, bootstrap, in, out)
	bad := kafkatest.UniqueName(t, "krnope")
	errs := runFailed(ctx, t, ksrunner, kafkaRowsPipeline(t, in, out, bad), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap})
	for _, e := range errs {
		if strings.Contains(e, bad) && strings.Contains(e, "kafkaWriteRowPlaceholder") {
			return
		}
	}
	t.Errorf("errors %q: none names the topic %s and the write", errs, bad)
}

// On a topic of LogAppendTime, a read with metadata gives the broker's
// timestamp and timestamp type 1 "LogAppendTime" (Java's
// KafkaTimestampType), and the write's timestamp is the row's: the one
// the broker gave, + 1000.
func TestKafkaRowsLogAppendTime(t *testing.T) {
	if !kafkatest.IsReal() {
		// kfake stamps LogAppendTime only on batches whose producer set
		// the attribute, not by the topic's message.timestamp.type.
		t.Skip("kfake does not apply a topic's message.timestamp.type; set " + kafkatest.EnvBootstrap)
	}
	ctx := testContext(t, 2*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "krin"), kafkatest.UniqueName(t, "krout")
	kafkatest.CreateTopic(t, bootstrap, out, kafkatest.RowsOutPartitions)
	cl := kafkatest.Client(t, bootstrap)
	// Created with the config: a config altered afterwards reaches the
	// partition's leader a moment later, and a record produced meanwhile
	// kept its CreateTime (CI, Kafka 4.4).
	kafkatest.CreateTopicWithConfigs(t, bootstrap, in, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
	before := time.Now().Add(-time.Second).UnixMilli() // the broker's clock may lag a little
	old := time.Now().Add(-time.Hour)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("v"), Timestamp: old}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	id, err := submit(ctx, t, ksrunner, kafkaRowsPipeline(t, in, out, ""), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	var got *kgo.Record
	kafkatest.ReadTopic(ctx, t, bootstrap, out, func() bool { return got != nil }, func(r *kgo.Record) { got = r })
	var meta string
	for _, h := range got.Headers {
		if h.Key == "meta" {
			meta = string(h.Value)
		}
	}
	var topic string
	var part, typeID int32
	var off, ts int64
	var typeName string
	var nh int
	if _, err := fmt.Sscanf(strings.ReplaceAll(meta, "/", " "), "%s %d %d %d %d %s %d", &topic, &part, &off, &ts, &typeID, &typeName, &nh); err != nil {
		t.Fatalf("meta header %q: %v", meta, err)
	}
	if typeID != 1 || typeName != "LogAppendTime" {
		t.Errorf("timestamp type %d %q, want 1 LogAppendTime (meta %q)", typeID, typeName, meta)
	}
	if ts < before || ts == old.UnixMilli() {
		t.Errorf("timestamp %d: not the broker's (produced at %d, appended after %d)", ts, old.UnixMilli(), before)
	}
	if got.Timestamp.UnixMilli() != ts+1000 {
		t.Errorf("written at %d, want the row's %d", got.Timestamp.UnixMilli(), ts+1000)
	}
}
