package translate

import (
	"encoding/json"
	"reflect"
	"slices"
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
	for _, tc := range []struct {
		name  string
		read  func(*KafkaRead)
		write func(*KafkaWrite)
		want  []string
	}{
		{"bad topic name", func(r *KafkaRead) { r.Topics = []string{"a", "b c"} }, nil, []string{"kafkaSourcePlaceholder", `"b c" is not a valid Kafka topic name`}},
		{"with metadata of strings", func(r *KafkaRead) { r.WithMetadata = true }, nil, []string{"kafkaSourcePlaceholder", "with metadata", "ByteArray", "String and Long"}},
		{"with metadata into KV", func(r *KafkaRead) { r.WithMetadata, r.KeyFormat, r.ValueFormat = true, KafkaByteArray, KafkaByteArray }, nil, []string{"kafkaSourcePlaceholder", "output", "beam:coder:kv:v1", "want a row"}},
		{"offset reset unknown", func(r *KafkaRead) { r.ConsumerConfig = map[string]string{"auto.offset.reset": "smallest"} }, nil, []string{"kafkaSourcePlaceholder", "auto.offset.reset", "smallest", "none"}},
		{"offset reset by a bad duration", func(r *KafkaRead) { r.ConsumerConfig = map[string]string{"auto.offset.reset": "by_duration:1h"} }, nil, []string{"kafkaSourcePlaceholder", "auto.offset.reset", `"1h" is not an ISO-8601 duration`}},
		{"offset reset by a negative duration", func(r *KafkaRead) { r.ConsumerConfig = map[string]string{"auto.offset.reset": "by_duration:-PT1H"} }, nil, []string{"kafkaSourcePlaceholder", "auto.offset.reset", `"-PT1H" is negative`}},
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

// A read bounded by max_num_records or max_read_time keeps the plan
// bounded (it ends, and the job with it); start_read_time alone does not
// bound it. The spec reaches the source's root as given.
func TestKafkaBoundedLayout(t *testing.T) {
	n, ms := int64(10), int64(1_700_000_000_000)
	for _, tc := range []struct {
		name    string
		edit    func(*KafkaRead)
		bounded bool
	}{
		{"max records", func(r *KafkaRead) { r.MaxNumRecords = &n }, true},
		{"max read time", func(r *KafkaRead) { r.MaxReadTimeMs = &n }, true},
		{"zero records", func(r *KafkaRead) { z := int64(0); r.MaxNumRecords = &z }, true},
		{"start read time", func(r *KafkaRead) { r.StartReadTimeMs = &ms }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := okKafkaRead()
			tc.edit(r)
			pp := kafkaPipeline(t, r, okKafkaWrite())
			if r.Bounded() {
				// As the expansion service marks a bounded read's output.
				for _, tr := range pp.GetComponents().GetTransforms() {
					if tr.GetSpec().GetUrn() == URNKafkaRead {
						pp.GetComponents().GetPcollections()[onlyValue(tr.GetOutputs())].IsBounded = pipepb.IsBounded_BOUNDED
					}
				}
			}
			plan := mustTranslate(t, pp, Options{})
			if plan.Bounded != tc.bounded {
				t.Errorf("Bounded = %v, want %v", plan.Bounded, tc.bounded)
			}
			for _, st := range plan.SubTopologies {
				if st.Root.Kind == RootKafkaSource && !reflect.DeepEqual(st.Root.KafkaRead, r) {
					t.Errorf("source spec %+v, want %+v", st.Root.KafkaRead, r)
				}
			}
		})
	}
}

// A payload with a negative bound or start time (one the expansion service
// would not write) is refused at submission, naming the transform and the
// field.
func TestKafkaNegativeBounds(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*KafkaRead, *int64)
	}{
		{"max_num_records -5", func(r *KafkaRead, v *int64) { r.MaxNumRecords = v }},
		{"max_read_time -5ms", func(r *KafkaRead, v *int64) { r.MaxReadTimeMs = v }},
		{"start_read_time -5ms", func(r *KafkaRead, v *int64) { r.StartReadTimeMs = v }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			pp := kafkaPipeline(t, okKafkaRead(), okKafkaWrite())
			r, neg := okKafkaRead(), int64(-5)
			tc.edit(r, &neg)
			b, err := json.Marshal(r) // EncodeKafkaRead would refuse it
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range pp.GetComponents().GetTransforms() {
				if tr.GetSpec().GetUrn() == URNKafkaRead {
					tr.GetSpec().Payload = b
				}
			}
			_, err = Translate(pp, Options{})
			errContains(t, err, "kafkaSourcePlaceholder", tc.field, "negative")
		})
	}
}

// A read of several topics heads one source sub-topology per topic, each
// sinking the read's output to one flatten topic, whose passthrough
// sub-topology feeds what follows the read.
func TestKafkaSeveralTopicsLayout(t *testing.T) {
	r := okKafkaRead()
	r.Topics = []string{"a", "b", "c"}
	plan := mustTranslate(t, kafkaPipeline(t, r, okKafkaWrite()), Options{})
	var sources []string
	var flatten *SubTopology
	for _, st := range plan.SubTopologies {
		switch st.Root.Kind {
		case RootKafkaSource:
			sources = append(sources, st.Input)
			if len(st.Stages) != 0 || len(st.Sinks) != 1 || !strings.HasSuffix(st.Sinks[0].Topic, "-flatten") || st.Sinks[0].PCollection != st.Root.Output {
				t.Errorf("source of %s: stages %d, sinks %+v", st.Input, len(st.Stages), st.Sinks)
			}
		case RootPassthrough:
			if strings.HasSuffix(st.Input, "-flatten") {
				flatten = st
			}
		}
	}
	if !slices.Equal(sources, r.Topics) {
		t.Errorf("source sub-topologies read %v, want %v", sources, r.Topics)
	}
	if flatten == nil || len(flatten.Stages) == 0 {
		t.Fatalf("no flatten sub-topology feeding the stages: %s", describe(plan))
	}
}

// auto.offset.reset by_duration:D takes D as Java's Duration.parse reads
// it (Kafka parses it so), and refuses what Kafka refuses.
func TestParseISODuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"PT1H", time.Hour, ""},
		{"pt1h", time.Hour, ""},
		{"P1D", 24 * time.Hour, ""},
		{"P1DT12H30M", 36*time.Hour + 30*time.Minute, ""},
		{"PT0.5S", 500 * time.Millisecond, ""},
		{"PT1,25S", 1250 * time.Millisecond, ""},
		{"PT0S", 0, ""},
		{"P1DT-1H", 23 * time.Hour, ""},
		{"+PT90M", 90 * time.Minute, ""},
		{"PT-0.5S", 0, "negative"},
		{"-PT1H", 0, "negative"},
		{"PT", 0, "not an ISO-8601 duration"},
		{"P", 0, "not an ISO-8601 duration"},
		{"1h", 0, "not an ISO-8601 duration"},
		{"P1Y", 0, "not an ISO-8601 duration"}, // Java's Duration has no years
		{"PT1H ", 0, "not an ISO-8601 duration"},
		{"P999999999999D", 0, "too long"},
	} {
		got, err := ParseISODuration(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, %v; want an error with %q", tc.in, got, err, tc.err)
		}
	}
	r := &KafkaRead{ConsumerConfig: map[string]string{"auto.offset.reset": "by_duration:PT2H"}}
	if d, ok := r.ResetByDuration(); !ok || d != 2*time.Hour {
		t.Errorf("ResetByDuration of by_duration:PT2H: %v, %v", d, ok)
	}
	for _, v := range []string{"earliest", "by_duration:x", ""} {
		r.ConsumerConfig["auto.offset.reset"] = v
		if d, ok := r.ResetByDuration(); ok {
			t.Errorf("ResetByDuration of %q: %v, want none", v, d)
		}
	}
}
