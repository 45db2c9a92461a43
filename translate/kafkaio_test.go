package translate

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function2x0(kafkaSourcePlaceholder)
	register.Function2x0(kafkaSinkPlaceholder)
}

// The placeholders stand for the Kafka primitives until pipelinetest
// replaces them in the proto.
func kafkaSourcePlaceholder([]byte, func(string, int64)) {}
func kafkaSinkPlaceholder(string, int64)                 {}

// kafkaPipeline reads KV<string, int64> from a Kafka topic, sums per key in
// fixed windows and writes KV<string, int64>.
func kafkaPipeline(t *testing.T, read *KafkaRead, write *KafkaWrite) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	in := beam.ParDo(s.Scope("KafkaRead"), kafkaSourcePlaceholder, beam.Impulse(s))
	sums := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), in))
	beam.ParDo0(s.Scope("KafkaWrite"), kafkaSinkPlaceholder, beam.WindowInto(s, window.NewGlobalWindows(), sums))
	pp := marshal(t, p)
	rb, err := EncodeKafkaRead(read)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := EncodeKafkaWrite(write)
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSource(pp, "kafkaSourcePlaceholder", URNKafkaRead, rb); err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSink(pp, "kafkaSinkPlaceholder", URNKafkaWrite, wb); err != nil {
		t.Fatal(err)
	}
	return pp
}

func okKafkaRead() *KafkaRead {
	return &KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaString, ValueFormat: KafkaLong, TimestampPolicy: TimestampCreateTime}
}

func okKafkaWrite() *KafkaWrite {
	return &KafkaWrite{Topic: "out", KeyFormat: KafkaString, ValueFormat: KafkaLong}
}

// A Kafka read heads a sub-topology of its own on the user's topic (not
// prefixed, no producers), makes the plan unbounded, and a Kafka write is a
// sink of its input in the sub-topology producing it, naming the user's
// topic and no Plan topic.
func TestKafkaLayout(t *testing.T) {
	plan := mustTranslate(t, kafkaPipeline(t, okKafkaRead(), okKafkaWrite()), Options{})
	checkPlan(t, plan)
	if plan.Bounded {
		t.Error("a plan with a Kafka read is bounded")
	}
	var src, sink *SubTopology
	for _, st := range plan.SubTopologies {
		if st.Root.Kind == RootKafkaSource {
			if src != nil {
				t.Fatal("two Kafka source sub-topologies")
			}
			src = st
		}
		for _, sk := range st.Sinks {
			if sk.KafkaWrite != nil {
				sink = st
				if sk.Topic != "out" || sk.KafkaWrite.ValueFormat != KafkaLong || !strings.HasSuffix(plan.Pipeline.GetComponents().GetTransforms()[sk.TransformID].GetUniqueName(), "kafkaSinkPlaceholder") {
					t.Errorf("Kafka sink %+v", sk)
				}
			}
		}
	}
	if src == nil || sink == nil {
		t.Fatalf("no Kafka source or sink: %v", describe(plan))
	}
	if src.Input != "in" || src.Root.KafkaRead == nil || src.Root.KafkaRead.Topics[0] != "in" {
		t.Errorf("source sub-topology reads %q, spec %+v", src.Input, src.Root.KafkaRead)
	}
	if src.ID != 0 || len(src.Stages) == 0 || src.Stages[0].Input != src.Root.Output {
		t.Errorf("source sub-topology %d, stages %v", src.ID, stageNames(plan))
	}
	for _, tp := range plan.Topics {
		if tp.Name == "in" && (tp.Kind != TopicKafka || len(tp.Producers) != 0 || tp.PCollection != src.Root.Output) {
			t.Errorf("user topic %+v", tp)
		}
		if tp.Name == "out" {
			t.Errorf("the write's topic is a Plan topic: %+v", tp)
		}
	}
	if _, ok := plan.WireCoders[src.Root.Output]; !ok {
		t.Error("the read's output has no wire coder")
	}
}

func TestKafkaRefused(t *testing.T) {
	n := int64(10)
	for _, tc := range []struct {
		name  string
		read  func(*KafkaRead)
		write func(*KafkaWrite)
		want  []string
	}{
		{"several topics", func(r *KafkaRead) { r.Topics = []string{"a", "b"} }, nil, []string{"kafkaSourcePlaceholder", "2 topics (a, b)", "not supported yet"}},
		{"with metadata of strings", func(r *KafkaRead) { r.WithMetadata = true }, nil, []string{"kafkaSourcePlaceholder", "with metadata", "ByteArray", "String and Long"}},
		{"with metadata into KV", func(r *KafkaRead) { r.WithMetadata, r.KeyFormat, r.ValueFormat = true, KafkaByteArray, KafkaByteArray }, nil, []string{"kafkaSourcePlaceholder", "output", "beam:coder:kv:v1", "want a row"}},
		{"max records", func(r *KafkaRead) { r.MaxNumRecords = &n }, nil, []string{"kafkaSourcePlaceholder", "max_num_records", "not supported yet"}},
		{"max read time", func(r *KafkaRead) { r.MaxReadTimeMs = &n }, nil, []string{"kafkaSourcePlaceholder", "max_read_time", "not supported yet"}},
		{"start read time", func(r *KafkaRead) { r.StartReadTimeMs = &n }, nil, []string{"kafkaSourcePlaceholder", "start_read_time", "not supported yet"}},
		{"offset reset none", func(r *KafkaRead) { r.ConsumerConfig = map[string]string{"auto.offset.reset": "none"} }, nil, []string{"kafkaSourcePlaceholder", "auto.offset.reset"}},
		{"read format mismatch", func(r *KafkaRead) { r.KeyFormat = KafkaLong }, nil, []string{"kafkaSourcePlaceholder", "key", "string_utf8", "Long"}},
		{"with headers of strings", nil, func(w *KafkaWrite) { w.WithHeaders = true }, []string{"kafkaSinkPlaceholder", "with headers", "ByteArray", "String and Long"}},
		{"with headers from KV", nil, func(w *KafkaWrite) { w.WithHeaders, w.KeyFormat, w.ValueFormat = true, KafkaByteArray, KafkaByteArray }, []string{"kafkaSinkPlaceholder", "input", "beam:coder:kv:v1", "want a row"}},
		{"with headers without topic", nil, func(w *KafkaWrite) {
			w.WithHeaders, w.Topic, w.KeyFormat, w.ValueFormat = true, "", KafkaByteArray, KafkaByteArray
		}, []string{"kafkaSinkPlaceholder", "with headers needs its topic"}},
		{"write format mismatch", nil, func(w *KafkaWrite) { w.ValueFormat = KafkaByteArray }, []string{"kafkaSinkPlaceholder", "value", "varint", "ByteArray"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := okKafkaRead(), okKafkaWrite()
			if tc.read != nil {
				tc.read(r)
			}
			if tc.write != nil {
				tc.write(w)
			}
			_, err := Translate(kafkaPipeline(t, r, w), Options{})
			errContains(t, err, tc.want...)
		})
	}
}
