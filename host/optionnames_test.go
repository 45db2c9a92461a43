package host

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// A job's pipeline option one edit away from a ksrunner option (a letter
// missing, extra, wrong or two swapped) gets a warning naming both; known
// options and others' options do not.
func TestOptionTypos(t *testing.T) {
	opts, err := structpb.NewStruct(map[string]any{
		"beam:option:go_options:v1": map[string]any{"options": map[string]any{
			"internal_paralelism": "8", "application_id": "x", "endpoint": "localhost:8099",
		}},
		"beam:option:comit_interval_ms:v1":   "5",
		"beam:option:job_name:v1":            "wc",
		"beam:option:max_bundle_sizes:v1":    "3",
		"beam:option:applicaiton_id:v1":      "y",
		"beam:option:group_protocol:v1":      "classic",
		"beam:option:processing_guarante:v1": "at_least_once",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := optionTypos(opts)
	want := []string{
		"pipeline option applicaiton_id is not a ksrunner option and is ignored: did you mean application_id?",
		"pipeline option comit_interval_ms is not a ksrunner option and is ignored: did you mean commit_interval_ms?",
		"pipeline option internal_paralelism is not a ksrunner option and is ignored: did you mean internal_parallelism?",
		"pipeline option max_bundle_sizes is not a ksrunner option and is ignored: did you mean max_bundle_size?",
		"pipeline option processing_guarante is not a ksrunner option and is ignored: did you mean processing_guarantee?",
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings\n%q\nwant\n%q", got, want)
	}
}

// The Go SDK's universal runner's echoes of the message stream are told
// apart from SDK lines.
func TestClientEcho(t *testing.T) {
	for msg, want := range map[string]bool{
		"(time=2026-12-03T10:53:22.827Z)(id=0)stage stage-0-0: executor": true,
		"(id=12)RUNNING":                      true,
		"Job[go-job-1-17] state: RUNNING":     true,
		"Writing to /tmp/counts.txt":          false,
		"(time is relative) a user's line":    false,
		"Job[x] state: RUNNING and then some": false,
	} {
		if got := isClientEcho(msg); got != want {
			t.Errorf("%q: echo %v, want %v", msg, got, want)
		}
	}
}
