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
