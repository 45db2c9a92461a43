package host

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// The pipeline options as each SDK sends them (the Go SDK's as built by
// runnerlib.Prepare: runtime.RawOptionsWrapper through JSON).
func TestWithPipelineOptionsPerSDK(t *testing.T) {
	for name, js := range map[string]string{
		"go":     `{"beam:option:go_options:v1": {"options": {"internal_parallelism": "7", "endpoint": "x"}}, "beam:option:runner:v1": "universal"}`,
		"flat":   `{"options": {"internal_parallelism": "7"}}`,
		"python": `{"beam:option:internal_parallelism:v1": 7}`,
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		o, err := DefaultOptions().WithPipelineOptions(&s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o.InternalParallelism != 7 {
			t.Errorf("%s: internal_parallelism %d, want 7", name, o.InternalParallelism)
		}
	}
}

// The Python and Java SDKs send bootstrap_servers with its declared default
// whether or not the user set it: that value keeps the job server's broker,
// any other value overrides it.
func TestBootstrapServersSDKDefault(t *testing.T) {
	for _, tc := range []struct{ server, job, want string }{
		{"embedded", `{"beam:option:bootstrap_servers:v1": "localhost:9092"}`, "embedded"},
		{"broker:9092", `{"beam:option:bootstrap_servers:v1": "localhost:9092"}`, "broker:9092"},
		{"embedded", `{"beam:option:bootstrap_servers:v1": "other:9093"}`, "other:9093"},
		{"embedded", `{"beam:option:go_options:v1": {"options": {"bootstrap_servers": "g:1"}}}`, "g:1"},
		{"localhost:9092", `{}`, "localhost:9092"},
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.job), &s); err != nil {
			t.Fatal(err)
		}
		def := DefaultOptions()
		def.BootstrapServers = tc.server
		o, err := def.WithPipelineOptions(&s)
		if err != nil {
			t.Fatal(err)
		}
		if o.BootstrapServers != tc.want {
			t.Errorf("server %s, job %s: bootstrap_servers %q, want %q", tc.server, tc.job, o.BootstrapServers, tc.want)
		}
	}
}

func TestProcessingGuaranteeOption(t *testing.T) {
	if d := DefaultOptions(); d.ProcessingGuarantee != ExactlyOnce || !d.exactlyOnce() {
		t.Errorf("default processing_guarantee %q, want %q", d.ProcessingGuarantee, ExactlyOnce)
	}
	for js, want := range map[string]string{
		`{"beam:option:go_options:v1": {"options": {"processing_guarantee": "at_least_once"}}}`: AtLeastOnce,
		`{"beam:option:processing_guarantee:v1": "exactly_once"}`:                               ExactlyOnce,
		`{}`: ExactlyOnce,
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		o, err := DefaultOptions().WithPipelineOptions(&s)
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if o.ProcessingGuarantee != want {
			t.Errorf("%s: processing_guarantee %q, want %q", js, o.ProcessingGuarantee, want)
		}
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:processing_guarantee:v1": "at_most_once"}`), &s); err != nil {
		t.Fatal(err)
	}
	if _, err := DefaultOptions().WithPipelineOptions(&s); err == nil {
		t.Error("processing_guarantee at_most_once was accepted")
	}
}
