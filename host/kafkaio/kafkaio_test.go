package kafkaio_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/host/internal/expansion/expansiontest"
	_ "github.com/ksrunner/ksrunner/host/kafkaio"
	"github.com/ksrunner/ksrunner/translate"
)

func init() { beam.RegisterFunction(identity) }

func identity(k, v []byte) ([]byte, []byte) { return k, v }

// A Go pipeline that imports the package expands KafkaIO in-process, with
// no expansion address, and marshals to a pipeline proto holding the
// primitives with their specs.
func TestInProcessExpansion(t *testing.T) {
	pipe := expansiontest.Pipeline(t, func(s beam.Scope) {
		records := kafkaio.Read(s, "", "broker:9092", []string{"in"},
			kafkaio.MaxNumRecords(10), kafkaio.TimestampPolicy(kafkaio.LogAppendTime),
			kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"}))
		kafkaio.Write(s, "", "out-broker:9092", "out", beam.ParDo(s, identity, records))
	})
	comps := pipe.GetComponents()
	var read, write *pipepb.PTransform
	for _, tr := range comps.GetTransforms() {
		switch tr.GetSpec().GetUrn() {
		case translate.URNKafkaRead:
			read = tr
		case translate.URNKafkaWrite:
			write = tr
		}
	}
	if read == nil || write == nil {
		t.Fatalf("pipeline lacks the Kafka primitives (read %v, write %v): %v", read != nil, write != nil, comps.GetTransforms())
	}
	gotRead, err := translate.DecodeKafkaRead(read.GetSpec().GetPayload())
	if err != nil {
		t.Fatal(err)
	}
	ten := int64(10)
	wantRead := &translate.KafkaRead{Topics: []string{"in"}, BootstrapServers: "broker:9092",
		ConsumerConfig: map[string]string{"auto.offset.reset": "earliest"},
		KeyFormat:      translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray,
		MaxNumRecords: &ten, TimestampPolicy: translate.TimestampLogAppendTime}
	if !reflect.DeepEqual(gotRead, wantRead) {
		t.Errorf("read spec\n got %s\nwant %s", expansiontest.JSON(gotRead), expansiontest.JSON(wantRead))
	}
	gotWrite, err := translate.DecodeKafkaWrite(write.GetSpec().GetPayload())
	if err != nil {
		t.Fatal(err)
	}
	wantWrite := &translate.KafkaWrite{Topic: "out", BootstrapServers: "out-broker:9092",
		KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray}
	if !reflect.DeepEqual(gotWrite, wantWrite) {
		t.Errorf("write spec\n got %s\nwant %s", expansiontest.JSON(gotWrite), expansiontest.JSON(wantWrite))
	}

	// The read's output is what the ParDo consumes, bounded (max_num_records),
	// coded KV<nullable(bytes), nullable(bytes)>.
	if len(read.GetInputs()) != 0 || len(read.GetOutputs()) != 1 {
		t.Fatalf("read: inputs %v outputs %v", read.GetInputs(), read.GetOutputs())
	}
	var out string
	for _, id := range read.GetOutputs() {
		out = id
	}
	pc := comps.GetPcollections()[out]
	if pc == nil {
		t.Fatalf("read output %s is not a PCollection of the pipeline", out)
	}
	if pc.GetIsBounded() != pipepb.IsBounded_BOUNDED {
		t.Errorf("read output bounded %v, want BOUNDED (max_num_records)", pc.GetIsBounded())
	}
	if got, want := expansiontest.CoderString(comps, pc.GetCoderId()), "kv(nullable(bytes),nullable(bytes))"; got != want {
		t.Errorf("read output coder %s, want %s", got, want)
	}
	// The Go SDK harness decodes such elements for the ParDo: a record with
	// key "k" and a null value.
	c, err := graphx.NewCoderUnmarshaller(comps.GetCoders()).Coder(pc.GetCoderId())
	if err != nil {
		t.Fatal(err)
	}
	elm, err := exec.MakeElementDecoder(c).Decode(bytes.NewReader([]byte{1, 1, 'k', 0}))
	if err != nil {
		t.Fatalf("the Go SDK cannot decode the read's output: %v", err)
	}
	if k, _ := elm.Elm.([]byte); string(k) != "k" || elm.Elm2 != nil {
		t.Errorf("decoded %#v, %#v, want key \"k\" and a null value", elm.Elm, elm.Elm2)
	}
	if ws := comps.GetWindowingStrategies()[pc.GetWindowingStrategyId()]; ws.GetWindowFn().GetUrn() != "beam:window_fn:global_windows:v1" {
		t.Errorf("read output windowing %v, want global", ws)
	}
	consumed := false
	for _, tr := range comps.GetTransforms() {
		for _, in := range tr.GetInputs() {
			if in == out && tr.GetSpec().GetUrn() == "beam:transform:pardo:v1" {
				consumed = true
			}
		}
	}
	if !consumed {
		t.Errorf("no ParDo consumes the read's output %s", out)
	}
	if len(write.GetInputs()) != 1 || len(write.GetOutputs()) != 0 {
		t.Errorf("write: inputs %v outputs %v, want one input, no outputs", write.GetInputs(), write.GetOutputs())
	}
	for _, in := range write.GetInputs() {
		if comps.GetPcollections()[in] == nil {
			t.Errorf("write input %s is not a PCollection of the pipeline", in)
		}
	}
}
