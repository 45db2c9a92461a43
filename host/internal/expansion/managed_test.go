package expansion

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/host/internal/expansion/expansiontest"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/translate"
)

var capture = flag.Bool("capture", false, "write the schema transform expansion requests Python sends to testdata/captured (go test -run TestPythonManaged$ -args -capture)")

// recorder is the service, keeping the schema transform requests it
// answers.
type recorder struct {
	*Service
	mu   sync.Mutex
	reqs []*jobpb.ExpansionRequest
}

func (r *recorder) Expand(ctx context.Context, req *jobpb.ExpansionRequest) (*jobpb.ExpansionResponse, error) {
	if req.GetTransform().GetSpec().GetUrn() == URNSchemaTransformPayload {
		r.mu.Lock()
		r.reqs = append(r.reqs, req)
		r.mu.Unlock()
	}
	return r.Service.Expand(ctx, req)
}

// serveRecording is serve, with the requests kept.
func serveRecording(t *testing.T) (string, *recorder) {
	t.Helper()
	lis, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rec := &recorder{Service: NewService(nil)}
	jobpb.RegisterExpansionServiceServer(g, rec)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String(), rec
}

func runManaged(t *testing.T, py string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", "managed_pipeline.py")}, args...)...)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 3 {
		// Beam YAML imports jinja2 and pandas, which the test venv has
		// (apache-beam[yaml]); a KSRUNNER_PYTHON must have them too.
		t.Fatalf("managed_pipeline.py %v: Beam YAML's packages are missing (install apache-beam[yaml]): %s", args, out)
	}
	if err != nil {
		t.Fatalf("managed_pipeline.py %v: %v\n%s", args, err, out)
	}
}

// Python's managed.Read/Write(KAFKA) and the kafka_read schema transform
// named directly, expanded against the service: the pipeline holds payload
// row primitives with the configurations' specs, the reads' outputs the
// payload rows.
func TestPythonManaged(t *testing.T) {
	py := expansiontest.BeamPython(t)
	addr, rec := serveRecording(t)
	out := filepath.Join(t.TempDir(), "pipeline.pb")
	runManaged(t, py, out, addr, "pipeline")
	if *capture {
		for _, req := range rec.reqs {
			name, _, _ := strings.Cut(req.GetTransform().GetUniqueName(), "/")
			b, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("testdata", "captured", name+".pb"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
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
	for _, tr := range expansiontest.Transforms(pipe, translate.URNKafkaRead) {
		spec, err := translate.DecodeKafkaRead(tr.GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		name, _, _ := strings.Cut(tr.GetUniqueName(), "/") // the user's label
		reads[name] = spec
		if len(tr.GetOutputs()) != 1 {
			t.Errorf("%s: outputs %v, want one", name, tr.GetOutputs())
		}
		for _, pc := range tr.GetOutputs() {
			s, err := translate.RowCoderSchema(comps.GetCoders(), comps.GetPcollections()[pc].GetCoderId())
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !proto.Equal(s, translate.KafkaPayloadSchema(spec.ValueFormat)) {
				t.Errorf("%s: output row %v, want the payload row of %s", name, s, spec.ValueFormat)
			}
		}
	}
	raw := func(topic, servers, reset string, cfg map[string]string) *translate.KafkaRead {
		c := map[string]string{"auto.offset.reset": reset}
		for k, v := range cfg {
			c[k] = v
		}
		return &translate.KafkaRead{Topics: []string{topic}, BootstrapServers: servers, ConsumerConfig: c,
			KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime", PayloadRow: true}
	}
	str := raw("in2", "b1:9092", "latest", nil)
	str.ValueFormat = "String"
	wantReads := map[string]*translate.KafkaRead{
		"ReadRaw":    raw("in", "b1:9092", "earliest", map[string]string{"max.poll.records": "500"}),
		"ReadString": str,
		"ReadDirect": raw("in3", "b3:9092", "latest", nil),
	}
	if !reflect.DeepEqual(reads, wantReads) {
		t.Errorf("read specs\n got %s\nwant %s", expansiontest.JSON(reads), expansiontest.JSON(wantReads))
	}
	writes := map[string]*translate.KafkaWrite{}
	for _, tr := range expansiontest.Transforms(pipe, translate.URNKafkaWrite) {
		spec, err := translate.DecodeKafkaWrite(tr.GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		name, _, _ := strings.Cut(tr.GetUniqueName(), "/")
		writes[name] = spec
		if len(tr.GetInputs()) != 1 || len(tr.GetOutputs()) != 0 {
			t.Errorf("%s: inputs %v outputs %v", tr.GetUniqueName(), tr.GetInputs(), tr.GetOutputs())
		}
	}
	wantWrites := map[string]*translate.KafkaWrite{
		"WriteRaw": {Topic: "out", BootstrapServers: "b2:9092", ProducerConfig: map[string]string{"linger.ms": "5"},
			KeyFormat: "ByteArray", ValueFormat: "ByteArray", PayloadRow: true},
	}
	if !reflect.DeepEqual(writes, wantWrites) {
		t.Errorf("write specs\n got %s\nwant %s", expansiontest.JSON(writes), expansiontest.JSON(wantWrites))
	}
}

// managed.Read(KAFKA) of a format there is none of fails the Python
// pipeline's construction, naming the field and the value.
func TestPythonManagedError(t *testing.T) {
	py := expansiontest.BeamPython(t)
	addr := serve(t)
	out := filepath.Join(t.TempDir(), "error.txt")
	runManaged(t, py, out, addr, "error")
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"format", `"XML"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("error %q does not name %q", b, s)
		}
	}
}

// managedConfig is the managed transform's configuration row, in the
// order of its discovered schema.
type managedConfig struct {
	TransformIdentifier string  `beam:"transform_identifier"`
	ConfigURL           *string `beam:"config_url"`
	Config              *string `beam:"config"`
}

func managedRequest(t *testing.T, name string, c managedConfig) *jobpb.ExpansionRequest {
	t.Helper()
	enc, err := coder.RowEncoderForStruct(reflect.TypeOf(c))
	if err != nil {
		t.Fatal(err)
	}
	var row bytes.Buffer
	if err := enc(c, &row); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&pipepb.SchemaTransformPayload{Identifier: IdentifierManaged,
		ConfigurationSchema: SchemaTransforms()[IdentifierManaged].GetConfigSchema(), ConfigurationRow: row.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	return &jobpb.ExpansionRequest{Namespace: "ns", Transform: &pipepb.PTransform{UniqueName: name,
		Spec: &pipepb.FunctionSpec{Urn: URNSchemaTransformPayload, Payload: b}}}
}

// What ksrunner cannot run is an expansion error naming the transform, the
// field and its value; an identifier it does not expand is refused naming
// it.
func TestManagedErrors(t *testing.T) {
	str := func(s string) *string { return &s }
	read := func(yaml string) managedConfig {
		return managedConfig{TransformIdentifier: IdentifierKafkaRead, Config: str("bootstrap_servers: b:9092\ntopic: in\n" + yaml)}
	}
	write := func(yaml string) managedConfig {
		return managedConfig{TransformIdentifier: IdentifierKafkaWrite, Config: str("bootstrap_servers: b:9092\ntopic: out\n" + yaml)}
	}
	for _, c := range []struct {
		name string
		c    managedConfig
		want []string
	}{
		{"avro schema not a record", read("format: AVRO\nschema: '\"string\"'"), []string{"schema", "Avro schema", "want a record"}},
		{"avro schema not Avro", read("format: AVRO\nschema: '{}'"), []string{"schema", "Avro schema"}},
		{"avro union", read("format: AVRO\nschema: '{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"u\",\"type\":[\"string\",\"long\"]}]}'"),
			[]string{"schema", `field "u"`, "union"}},
		{"json without schema", read("format: JSON"), []string{"schema", "missing", "JSON schema"}},
		{"json schema not JSON", read("format: JSON\nschema: '{\"type\": '"), []string{"schema", "JSON schema"}},
		{"json schema tuple", read("format: JSON\nschema: '{\"properties\": {\"a\": {\"type\": \"array\", \"items\": [{\"type\": \"string\"}]}}}'"),
			[]string{"schema", `property "a"`, "tuple-like"}},
		{"json schema registry", read("format: JSON\nschema: '{}'\nconfluent_schema_registry_url: http://r:8081"), []string{"confluent_schema_registry_url", "http://r:8081"}},
		{"no format: AVRO without a schema", read(""), []string{"schema", "AVRO", "missing"}},
		{"registry", read("format: RAW\nconfluent_schema_registry_url: http://r:8081"), []string{"confluent_schema_registry_url", "http://r:8081"}},
		{"descriptor with RAW", read("format: RAW\nfile_descriptor_path: /d.pb"), []string{"file_descriptor_path", "/d.pb"}},
		{"error handling named output", read("format: RAW\nerror_handling: {output: output}"), []string{"error_handling", `"output"`}},
		{"error handling not a name", read("format: RAW\nerror_handling: {out: errors}"), []string{"error_handling", "{output: NAME}"}},
		{"unknown field", read("format: RAW\ntopics: [a]"), []string{"topics", "not a field"}},
		{"write proto without descriptor", write("format: PROTO\nmessage_name: shop.Order"), []string{"file_descriptor_path", "missing"}},
		{"proto without message", read("format: PROTO\nfile_descriptor_path: /d.pb"), []string{"message_name", "missing"}},
		{"proto descriptor unreadable", read("format: PROTO\nfile_descriptor_path: /nonexistent/d.pb\nmessage_name: M"), []string{"file_descriptor_path", "/nonexistent/d.pb"}},
		{"proto source and descriptor", read("format: PROTO\nschema: 'syntax = \"proto3\";'\nfile_descriptor_path: /d.pb\nmessage_name: M"), []string{"schema", "one or the other"}},
		{"proto source that does not compile", read("format: PROTO\nschema: 'syntax = \"proto3\"; message M { strin a = 1; }'\nmessage_name: M"), []string{"schema", "schema.proto:1", "strin"}},
		{"proto source without the message", read("format: PROTO\nschema: 'syntax = \"proto3\"; message M { string a = 1; }'\nmessage_name: N"), []string{"message_name", `no message "N"`}},
		{"unknown format", read("format: XML"), []string{"format", `"XML"`}},
		{"write string", write("format: STRING"), []string{"format", `"STRING"`}},
		{"write error handling", write("format: RAW\nerror_handling: {output: errors}"), []string{"error_handling", "errors"}},
		{"config url", managedConfig{TransformIdentifier: IdentifierKafkaRead, ConfigURL: str("gs://c.yaml")}, []string{"config_url", "gs://c.yaml"}},
		{"identifier", managedConfig{TransformIdentifier: "beam:schematransform:org.apache.beam:iceberg_read:v1", Config: str("{}")},
			[]string{"transform_identifier", "iceberg_read"}},
		{"bad yaml", read("format: [RAW"), []string{"config"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Expand(managedRequest(t, "Managed Read(KAFKA)", c.c))
			if err == nil {
				t.Fatal("expanded")
			}
			for _, s := range append(c.want, "Managed Read(KAFKA)") {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
	b, err := proto.Marshal(&pipepb.SchemaTransformPayload{Identifier: "beam:schematransform:org.apache.beam:pubsub_read:v1"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Expand(&jobpb.ExpansionRequest{Transform: &pipepb.PTransform{UniqueName: "X",
		Spec: &pipepb.FunctionSpec{Urn: URNSchemaTransformPayload, Payload: b}}})
	if err == nil || !strings.Contains(err.Error(), "pubsub_read") {
		t.Errorf("unknown identifier: %v", err)
	}
}

// Discovery lists managed and the two Kafka identifiers with Java's input
// and output names; Python's discovery of managed (a substring match)
// finds exactly one.
func TestDiscoverSchemaTransform(t *testing.T) {
	res, err := NewService(nil).DiscoverSchemaTransform(context.Background(), &jobpb.DiscoverSchemaTransformRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2][]string{}
	for id, c := range res.GetSchemaTransformConfigs() {
		got[id] = [2][]string{c.GetInputPcollectionNames(), c.GetOutputPcollectionNames()}
		if len(c.GetConfigSchema().GetFields()) == 0 {
			t.Errorf("%s: no configuration schema", id)
		}
	}
	want := map[string][2][]string{
		IdentifierManaged:    {{"input"}, {"output"}},
		IdentifierKafkaRead:  {nil, {"output", "errors"}},
		IdentifierKafkaWrite: {{"input"}, nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("discovered %v, want %v", got, want)
	}
}

// yamlPipeline is the pipeline managed_pipeline.py constructs in mode
// (yaml, yaml-json) against the expansion service.
func yamlPipeline(t *testing.T, mode string) *pipepb.Pipeline {
	t.Helper()
	py := expansiontest.BeamPython(t)
	addr := serve(t)
	out := filepath.Join(t.TempDir(), "pipeline.pb")
	runManaged(t, py, out, addr, mode)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	pipe := &pipepb.Pipeline{}
	if err := proto.Unmarshal(b, pipe); err != nil {
		t.Fatal(err)
	}
	return pipe
}

// A Beam YAML pipeline of ReadFromKafka → MapToFields → WriteToKafka
// (format RAW), its Kafka transforms provided by the expansion service,
// holds the payload row primitives of its configuration.
func TestPythonYAML(t *testing.T) {
	pipe := yamlPipeline(t, "yaml")
	var reads []*translate.KafkaRead
	for _, tr := range expansiontest.Transforms(pipe, translate.URNKafkaRead) {
		spec, err := translate.DecodeKafkaRead(tr.GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, spec)
	}
	wantRead := &translate.KafkaRead{Topics: []string{"in"}, BootstrapServers: "b:9092", ConsumerConfig: map[string]string{"auto.offset.reset": "earliest"},
		KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime", PayloadRow: true}
	if len(reads) != 1 || !reflect.DeepEqual(reads[0], wantRead) {
		t.Errorf("reads %s, want [%s]", expansiontest.JSON(reads), expansiontest.JSON(wantRead))
	}
	var writes []*translate.KafkaWrite
	for _, tr := range expansiontest.Transforms(pipe, translate.URNKafkaWrite) {
		spec, err := translate.DecodeKafkaWrite(tr.GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		writes = append(writes, spec)
	}
	wantWrite := &translate.KafkaWrite{Topic: "out", BootstrapServers: "b:9092", KeyFormat: "ByteArray", ValueFormat: "ByteArray", PayloadRow: true}
	if len(writes) != 1 || !reflect.DeepEqual(writes[0], wantWrite) {
		t.Errorf("writes %s, want [%s]", expansiontest.JSON(writes), expansiontest.JSON(wantWrite))
	}
}

// A Beam YAML pipeline of ReadFromKafka (format JSON, a JSON schema, an
// error output) → MapToFields → WriteToKafka (format JSON) holds a JSON
// read whose output rows are the schema's, whose error output rows are
// Java's error rows, a JSON write of MapToFields' rows and a RAW write of
// the errors.
func TestPythonYAMLJSON(t *testing.T) {
	pipe := yamlPipeline(t, "yaml-json")
	reads := expansiontest.Transforms(pipe, translate.URNKafkaRead)
	if len(reads) != 1 {
		t.Fatalf("%d reads, want 1", len(reads))
	}
	spec, err := translate.DecodeKafkaRead(reads[0].GetSpec().GetPayload())
	if err != nil {
		t.Fatal(err)
	}
	if !spec.PayloadRow || spec.RowFormat != translate.KafkaRowJSON || !strings.Contains(spec.RowSchema, `"count": {"type": "integer"}`) {
		t.Errorf("read %s: want a JSON read of the YAML's schema", expansiontest.JSON(spec))
	}
	outPC := reads[0].GetOutputs()["output"]
	c := pipe.GetComponents().GetCoders()[pipe.GetComponents().GetPcollections()[outPC].GetCoderId()]
	rowSchema := &pipepb.Schema{}
	if err := proto.Unmarshal(c.GetSpec().GetPayload(), rowSchema); err != nil {
		t.Fatal(err)
	}
	want, err := translate.JSONRowSchema(spec.RowSchema)
	if err != nil {
		t.Fatal(err)
	}
	if err := translate.SameRowLayout(rowSchema, want); err != nil {
		t.Errorf("the read's output rows: %v", err)
	}
	if spec.ErrorOutput != "errors" {
		t.Errorf("read %s: want the error output errors", expansiontest.JSON(spec))
	}
	errs := reads[0].GetOutputs()[spec.ErrorOutput]
	ec := pipe.GetComponents().GetCoders()[pipe.GetComponents().GetPcollections()[errs].GetCoderId()]
	errSchema := &pipepb.Schema{}
	if err := proto.Unmarshal(ec.GetSpec().GetPayload(), errSchema); err != nil {
		t.Fatal(err)
	}
	if err := translate.SameRowLayout(errSchema, translate.KafkaErrorSchema()); err != nil {
		t.Errorf("the read's error rows: %v", err)
	}
	topics := map[string]string{}
	for _, tr := range expansiontest.Transforms(pipe, translate.URNKafkaWrite) {
		w, err := translate.DecodeKafkaWrite(tr.GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		topics[w.Topic] = w.RowFormat
	}
	if want := map[string]string{"out": translate.KafkaRowJSON, "errors": ""}; !reflect.DeepEqual(topics, want) {
		t.Errorf("writes (topic: format) %v, want %v", topics, want)
	}
}

// The requests Python's managed.Read/Write(KAFKA) and
// SchemaAwareExternalTransform sent (captured by TestPythonManaged with
// -args -capture), expanded without Python: each gives its payload row primitive
// with the spec of its configuration.
func TestCapturedRequests(t *testing.T) {
	rawRead := func(topic, servers, reset string, cfg map[string]string) any {
		c := map[string]string{"auto.offset.reset": reset}
		for k, v := range cfg {
			c[k] = v
		}
		return &translate.KafkaRead{Topics: []string{topic}, BootstrapServers: servers, ConsumerConfig: c,
			KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime", PayloadRow: true}
	}
	str := rawRead("in2", "b1:9092", "latest", nil).(*translate.KafkaRead)
	str.ValueFormat = "String"
	for name, want := range map[string]any{
		"ReadRaw":    rawRead("in", "b1:9092", "earliest", map[string]string{"max.poll.records": "500"}),
		"ReadString": str,
		"ReadDirect": rawRead("in3", "b3:9092", "latest", nil),
		"WriteRaw": &translate.KafkaWrite{Topic: "out", BootstrapServers: "b2:9092", ProducerConfig: map[string]string{"linger.ms": "5"},
			KeyFormat: "ByteArray", ValueFormat: "ByteArray", PayloadRow: true},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "captured", name+".pb"))
			if err != nil {
				t.Fatal(err)
			}
			req := &jobpb.ExpansionRequest{}
			if err := proto.Unmarshal(b, req); err != nil {
				t.Fatal(err)
			}
			res, _, err := Expand(req)
			if err != nil {
				t.Fatal(err)
			}
			var got any
			switch res.GetTransform().GetSpec().GetUrn() {
			case translate.URNKafkaRead:
				got, err = translate.DecodeKafkaRead(res.GetTransform().GetSpec().GetPayload())
			case translate.URNKafkaWrite:
				got, err = translate.DecodeKafkaWrite(res.GetTransform().GetSpec().GetPayload())
			default:
				err = fmt.Errorf("expanded to %s", res.GetTransform().GetSpec().GetUrn())
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("spec\n got %s\nwant %s", expansiontest.JSON(got), expansiontest.JSON(want))
			}
		})
	}
}

// A managed read of format AVRO through a schema registry takes the
// subject's latest schema when it expands: its rows are that schema's, and
// the read fetches writers' schemas from the registry. What cannot work
// is an expansion error naming the field.
func TestManagedRegistry(t *testing.T) {
	reg := testkit.NewSchemaRegistry(t)
	reg.Register("orders-value", `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"}]}`)
	latest := `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"name","type":"string"},{"name":"note","type":["null","string"],"default":null,"doc":"d"}]}`
	reg.Register("orders-value", latest)
	reg.Register("bad-value", `{"type":"record","name":"U","fields":[{"name":"u","type":["string","long"]}]}`)
	str := func(s string) *string { return &s }
	read := func(yaml string) *jobpb.ExpansionRequest {
		return managedRequest(t, "Managed Read(KAFKA)", managedConfig{TransformIdentifier: IdentifierKafkaRead,
			Config: str("bootstrap_servers: b:9092\ntopic: in\n" + yaml)})
	}
	resp, _, err := Expand(read("format: AVRO\nconfluent_schema_registry_url: " + reg.URL + "\nconfluent_schema_registry_subject: orders-value"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := translate.DecodeKafkaRead(resp.GetTransform().GetSpec().GetPayload())
	if err != nil {
		t.Fatal(err)
	}
	want, err := translate.AvroRowSchema(latest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := spec.PayloadSchema()
	if err != nil {
		t.Fatal(err)
	}
	if spec.SchemaRegistryURL != reg.URL || spec.RowFormat != translate.KafkaRowAvro {
		t.Errorf("read %s: want an AVRO read through %s", expansiontest.JSON(spec), reg.URL)
	}
	if err := translate.SameRowLayout(got, want); err != nil {
		t.Errorf("the read's rows are not the latest schema's: %v", err)
	}
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"no subject", "confluent_schema_registry_url: " + reg.URL, []string{"confluent_schema_registry_subject", "missing"}},
		{"unknown subject", "confluent_schema_registry_url: " + reg.URL + "\nconfluent_schema_registry_subject: nope", []string{"confluent_schema_registry_subject", `"nope"`, reg.URL, "not found"}},
		{"unreachable", "confluent_schema_registry_url: http://127.0.0.1:1\nconfluent_schema_registry_subject: orders-value", []string{"confluent_schema_registry_subject", "127.0.0.1:1"}},
		{"schema too", "schema: '{}'\nconfluent_schema_registry_url: " + reg.URL + "\nconfluent_schema_registry_subject: orders-value", []string{"schema", "one or the other"}},
		{"JSON", "format: JSON\nconfluent_schema_registry_url: " + reg.URL + "\nconfluent_schema_registry_subject: orders-value", []string{"confluent_schema_registry_url", "AVRO"}},
		{"latest unsupported", "confluent_schema_registry_url: " + reg.URL + "\nconfluent_schema_registry_subject: bad-value", []string{"confluent_schema_registry_subject", `field "u"`, "union"}},
	} {
		_, _, err := Expand(read(c.yaml))
		if err == nil {
			t.Errorf("%s: expanded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
}

// A managed read of format PROTO takes its messages' descriptor from a
// FileDescriptorSet file or compiles it from .proto source (importing a
// well-known type); the message is named in full or by its simple name.
// The spec carries the descriptor set, so no worker needs the file.
func TestManagedProto(t *testing.T) {
	set, _ := testkit.OrderProto(t)
	path := filepath.Join(t.TempDir(), "shop.pb")
	if err := os.WriteFile(path, set, 0o644); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	read := func(yaml string) *translate.KafkaRead {
		t.Helper()
		resp, _, err := Expand(managedRequest(t, "Managed Read(KAFKA)", managedConfig{TransformIdentifier: IdentifierKafkaRead,
			Config: str("bootstrap_servers: b:9092\ntopic: in\nformat: PROTO\n" + yaml)}))
		if err != nil {
			t.Fatal(err)
		}
		spec, err := translate.DecodeKafkaRead(resp.GetTransform().GetSpec().GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	full := read("file_descriptor_path: " + path + "\nmessage_name: shop.Order")
	simple := read("file_descriptor_path: " + path + "\nmessage_name: Order")
	if b, err := translate.DecodeProtoSchema(full.RowSchema); err != nil || !bytes.Equal(b, set) {
		t.Errorf("the spec's descriptor set is not the file's (%v)", err)
	}
	fs, err := full.PayloadSchema()
	if err != nil {
		t.Fatal(err)
	}
	ss, err := simple.PayloadSchema()
	if err != nil {
		t.Fatal(err)
	}
	if err := translate.SameRowLayout(ss, fs); err != nil || len(fs.GetFields()) != 15 {
		t.Errorf("Order and shop.Order: %v; %d fields, want 15", err, len(fs.GetFields()))
	}
	src := read("message_name: Event\nschema: |\n  syntax = \"proto3\";\n  package ev;\n  import \"google/protobuf/timestamp.proto\";\n" +
		"  message Event { string name = 1; repeated int64 counts = 2; google.protobuf.Timestamp at = 3; }\n")
	got, err := src.PayloadSchema()
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, f := range got.GetFields() {
		types = append(types, f.GetName()+" "+translate.FieldTypeString(f.GetType()))
	}
	if want := []string{"name STRING", "counts ARRAY<INT64>", "at nullable ROW(seconds, nanos)"}; !reflect.DeepEqual(types, want) {
		t.Errorf("rows of the compiled source: %q, want %q", types, want)
	}
}
