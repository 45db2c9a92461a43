package wire

import (
	"bytes"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	beamexec "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

func c(urn string, comps ...string) *pipepb.Coder {
	return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: comps}
}

// KV<string, Iterable<KV<varint, LP(bytes)>>> values, plus doubles and bools
// inside, in interval windows: the scanner must find exactly the element
// bytes Beam's encoders wrote.
func TestScanner(t *testing.T) {
	coders := map[string]*pipepb.Coder{
		"s": c(urnStringUTF8), "v": c(urnVarInt), "b": c(urnBytes), "lp": c(urnLengthPrefix, "b"),
		"d": c(urnDouble), "bo": c(urnBool),
		"inner": c(urnKV, "v", "lp"), "it": c(urnIterable, "inner"),
		"kd": c(urnKV, "d", "bo"), "val": c(urnKV, "it", "kd"), "kv": c(urnKV, "s", "val"),
		"iw": c(urnIntervalWindow), "wv": c(urnWindowedValue, "kv", "iw"),
	}
	s, err := NewScanner(coders, "wv")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var want [][]byte
	enc := beamexec.MakeWindowEncoder(coder.NewIntervalWindow())
	for k := range 5 {
		ws := []typex.Window{window.IntervalWindow{Start: mtime.Time(k), End: mtime.Time(1000 * k)}, window.IntervalWindow{Start: 1, End: 2}}
		pane := typex.PaneInfo{Timing: typex.PaneLate, Index: int64(k), NonSpeculativeIndex: int64(k - 1)}
		if err := beamexec.EncodeWindowedValueHeader(enc, ws[:1+k%2], typex.EventTime(k*7), pane, &buf); err != nil {
			t.Fatal(err)
		}
		var e bytes.Buffer
		coder.EncodeStringUTF8("key", &e)
		coder.EncodeInt32(int32(k), &e)
		for j := range k {
			coder.EncodeVarInt(int64(j-1), &e)
			coder.EncodeVarInt(3, &e) // length prefix of bytes("ab"): varint 2 + 2 bytes
			coder.EncodeBytes([]byte("ab"), &e)
		}
		coder.EncodeDouble(1.5, &e)
		coder.EncodeBool(k%2 == 0, &e)
		want = append(want, e.Bytes())
		buf.Write(e.Bytes())
	}
	data := buf.Bytes()
	for k, off := 0, 0; off < len(data); k++ {
		v, err := s.Next(data, off)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data[v.Elem:v.End], want[k]) || v.Timestamp != typex.EventTime(k*7) {
			t.Fatalf("value %d: element %x at %d, want %x; timestamp %d", k, data[v.Elem:v.End], v.Elem, want[k], v.Timestamp)
		}
		off = v.End
	}
}

func TestScannerErrors(t *testing.T) {
	coders := map[string]*pipepb.Coder{
		"x": c("beam:coder:custom:v1"), "gw": c(urnGlobalWindow), "s": c(urnStringUTF8),
		"wx": c(urnWindowedValue, "x", "gw"), "ws": c(urnWindowedValue, "s", "s"),
		"loop": c(urnKV, "loop", "loop"), "wl": c(urnWindowedValue, "loop", "gw"),
	}
	for id, msg := range map[string]string{
		"wx": "beam:coder:custom:v1 is not a standard coder",
		"ws": "neither global nor interval",
		"wl": "nested deeper than",
		"no": `coder "no" not found`,
	} {
		if _, err := NewScanner(coders, id); err == nil || !bytes.Contains([]byte(err.Error()), []byte(msg)) {
			t.Errorf("%s: got %v, want %q", id, err, msg)
		}
	}
}
