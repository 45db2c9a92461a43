package task

import (
	"bytes"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// TestStream elements from the Java and Python SDKs are in the outer
// context: bytes and strings (alone or as a KV's last value) get their
// length; keys, and other coders, are the same in both contexts.
func TestOuterToNested(t *testing.T) {
	coders := map[string]*pipepb.Coder{
		"b":   {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:bytes:v1"}},
		"s":   {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:string_utf8:v1"}},
		"v":   {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:varint:v1"}},
		"kvs": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:kv:v1"}, ComponentCoderIds: []string{"v", "s"}},
		"kss": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:kv:v1"}, ComponentCoderIds: []string{"s", "kvs"}},
		"kvv": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:kv:v1"}, ComponentCoderIds: []string{"s", "v"}},
	}
	for _, tc := range []struct {
		coder   string
		in, out string
		same    bool // encodes alike: no conversion
	}{
		{coder: "b", in: "\x80xy", out: "\x03\x80xy"},
		{coder: "s", in: "", out: "\x00"},
		{coder: "kvs", in: "\x05abc", out: "\x05\x03abc"},
		{coder: "kss", in: "\x02hi\x07z", out: "\x02hi\x07\x01z"},
		{coder: "v", same: true},
		{coder: "kvv", same: true},
	} {
		nest, err := outerToNested(coders, tc.coder)
		if err != nil {
			t.Fatalf("%s: %v", tc.coder, err)
		}
		if tc.same {
			if nest != nil {
				t.Errorf("%s: a conversion for a coder that encodes alike in both contexts", tc.coder)
			}
			continue
		}
		got, err := nest([]byte("hdr"), []byte(tc.in))
		if err != nil || !bytes.Equal(got, []byte("hdr"+tc.out)) {
			t.Errorf("%s: %q -> %q, %v; want %q", tc.coder, tc.in, got, err, "hdr"+tc.out)
		}
	}
	nest, _ := outerToNested(coders, "kss")
	if _, err := nest(nil, []byte("\x09ab")); err == nil {
		t.Error("a truncated key was accepted")
	}
}
