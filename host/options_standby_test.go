package host

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestNumStandbyReplicasOption: num_standby_replicas defaults to none; a
// job's pipeline option sets it; a negative or non-integer value is
// refused naming the option; the Job API describes it.
func TestNumStandbyReplicasOption(t *testing.T) {
	d := DefaultOptions()
	if d.NumStandbyReplicas != 0 {
		t.Errorf("default num_standby_replicas %d, want 0", d.NumStandbyReplicas)
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:num_standby_replicas:v1": "2"}`), &s); err != nil {
		t.Fatal(err)
	}
	if o, err := d.WithPipelineOptions(&s); err != nil || o.NumStandbyReplicas != 2 {
		t.Errorf("pipeline option num_standby_replicas=2: %d, %v", o.NumStandbyReplicas, err)
	}
	for _, tc := range []struct{ js, want string }{
		{`{"beam:option:num_standby_replicas:v1": -1}`, `option num_standby_replicas: -1, must not be negative`},
		{`{"beam:option:num_standby_replicas:v1": "one"}`, `pipeline option num_standby_replicas: "one" is not an integer`},
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.js), &s); err != nil {
			t.Fatal(err)
		}
		if _, err := DefaultOptions().WithPipelineOptions(&s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.js, err, tc.want)
		}
	}
	found := false
	for _, desc := range optionDescriptors() {
		found = found || desc.GetName() == "num_standby_replicas" && desc.GetDefaultValue() == "0"
	}
	if !found {
		t.Error("no descriptor of num_standby_replicas with default 0")
	}
}
