package expansion

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/host/internal/expansion/expansiontest"
	"github.com/ksrunner/ksrunner/translate"
)

func runPython(t *testing.T, py string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", "kafka_pipeline.py")}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kafka_pipeline.py %v: %v\n%s", args, err, out)
	}
}

// The Python SDK's ReadFromKafka and WriteToKafka, expanded against the
// service: the pipeline it constructs holds the primitives with the specs
// and the output coders.
func TestPythonSDK(t *testing.T) {
	py := expansiontest.BeamPython(t)
	addr := serve(t)
	out := filepath.Join(t.TempDir(), "pipeline.pb")
	runPython(t, py, out, addr, "pipeline")
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	pipe := &pipepb.Pipeline{}
	if err := proto.Unmarshal(b, pipe); err != nil {
		t.Fatal(err)
	}
	comps := pipe.GetComponents()

	reads := map[string]*translate.KafkaRead{}
	readCoders := map[string]string{}
	for _, tr := range expansiontest.Transforms(pipe, translate.URNKafkaRead) {
		spec, err := translate.DecodeKafkaRead(tr.GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		reads[tr.GetUniqueName()] = spec
		for _, id := range tr.GetOutputs() {
			readCoders[tr.GetUniqueName()] = expansiontest.CoderString(comps, comps.GetPcollections()[id].GetCoderId())
			if meta := comps.GetCoders()[comps.GetPcollections()[id].GetCoderId()]; spec.WithMetadata {
				schema := &pipepb.Schema{}
				if err := proto.Unmarshal(meta.GetSpec().GetPayload(), schema); err != nil || !proto.Equal(schema, RecordSchema()) {
					t.Errorf("with metadata: row schema %v (%v), want RecordSchema", schema, err)
				}
			}
		}
	}
	wantReads := map[string]*translate.KafkaRead{
		"Read": {Topics: []string{"in1", "in2"}, BootstrapServers: "b1:9092,b2:9092", ConsumerConfig: map[string]string{"auto.offset.reset": "earliest"},
			KeyFormat: "Long", ValueFormat: "String", StartReadTimeMs: ptr(1700000000000), MaxReadTimeMs: ptr(30000), TimestampPolicy: "CreateTime"},
		"ReadMeta": {Topics: []string{"in3"}, BootstrapServers: "b1:9092", KeyFormat: "ByteArray", ValueFormat: "ByteArray",
			WithMetadata: true, TimestampPolicy: "ProcessingTime"},
	}
	if !reflect.DeepEqual(reads, wantReads) {
		t.Errorf("read specs\n got %s\nwant %s", expansiontest.JSON(reads), expansiontest.JSON(wantReads))
	}
	wantCoders := map[string]string{"Read": "kv(nullable(varint),nullable(string))", "ReadMeta": "row"}
	if !reflect.DeepEqual(readCoders, wantCoders) {
		t.Errorf("read output coders %v, want %v", readCoders, wantCoders)
	}

	// Python decodes elements of those coders, as its DoFns would receive
	// them.
	b, err = os.ReadFile(out + ".decoded")
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	wantDecoded := map[string]any{
		"Read":     []any{[]any{5.0, "x"}, []any{nil, "y"}},
		"ReadMeta": []any{"t", 1.0, 2.0, 3.0, nil, "v", []any{[]any{"h", "x"}}, 0.0, "CreateTime"},
	}
	if !reflect.DeepEqual(decoded, wantDecoded) {
		t.Errorf("Python decoded %v, want %v", decoded, wantDecoded)
	}

	writes := map[string]*translate.KafkaWrite{}
	for _, tr := range expansiontest.Transforms(pipe, translate.URNKafkaWrite) {
		spec, err := translate.DecodeKafkaWrite(tr.GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		writes[tr.GetUniqueName()] = spec
		if len(tr.GetInputs()) != 1 || len(tr.GetOutputs()) != 0 {
			t.Errorf("%s: inputs %v outputs %v", tr.GetUniqueName(), tr.GetInputs(), tr.GetOutputs())
		}
	}
	wantWrites := map[string]*translate.KafkaWrite{
		"Write":        {Topic: "out", BootstrapServers: "out:9092", KeyFormat: "ByteArray", ValueFormat: "ByteArray"},
		"WriteHeaders": {KeyFormat: "ByteArray", ValueFormat: "ByteArray", WithHeaders: true},
	}
	if !reflect.DeepEqual(writes, wantWrites) {
		t.Errorf("write specs\n got %s\nwant %s", expansiontest.JSON(writes), expansiontest.JSON(wantWrites))
	}
}

// An unsupported deserializer fails the Python pipeline's construction,
// naming the field and the class.
func TestPythonSDKExpansionError(t *testing.T) {
	py := expansiontest.BeamPython(t)
	addr := serve(t)
	out := filepath.Join(t.TempDir(), "error.txt")
	runPython(t, py, out, addr, "error")
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"key_deserializer", "io.confluent.kafka.serializers.KafkaAvroDeserializer"} {
		if !strings.Contains(string(b), s) {
			t.Errorf("error %q does not name %q", b, s)
		}
	}
}
