package abi

import (
	"reflect"
	"testing"
)

func TestStageRoundTrip(t *testing.T) {
	s := &Stage{ID: "s1", Input: "in", Outputs: []string{"a", "b"}, Transforms: []Transform{
		{ID: "t", DoFn: "F", Input: "in", Outputs: []TaggedOutput{{"x", "a"}, {"y", "b"}}},
		{ID: "u", DoFn: "G", Input: "a"},
	}}
	b := AppendStage(nil, s)
	got, err := ParseStage(b)
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("got %+v, %v", got, err)
	}
	for n := range len(b) {
		if _, err := ParseStage(b[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: parsed", n)
		}
	}
}
