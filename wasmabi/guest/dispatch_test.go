package guest

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

func fmtAny(v any) string { return fmt.Sprint(v) }

// TestDispatch drives the runtime natively, as the exports do: setup,
// process a batch, check the records.
func TestDispatch(t *testing.T) {
	registry = map[string]*DoFn{}
	Register(FlatMap("split", String, String, func(s string, emit func(string)) error {
		for _, w := range strings.Fields(s) {
			emit(w)
		}
		return nil
	}))
	Register(DoFn{Name: "route", Outputs: []string{"a", "b"}, Process: func(elem []byte, e *Emitter) error {
		if len(elem) > 2 {
			e.EmitTo(1, elem)
		} else {
			e.EmitAt(0, 5, elem)
		}
		return nil
	}})
	st := &abi.Stage{ID: "s", Input: "in", Outputs: []string{"words", "long"}, Transforms: []abi.Transform{
		{ID: "t1", DoFn: "split", Input: "in", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "words"}}},
		{ID: "t2", DoFn: "route", Input: "words", Outputs: []abi.TaggedOutput{{Tag: "a", PCollection: "short"}, {Tag: "b", PCollection: "long"}}},
	}}
	if err := setup(abi.AppendStage(nil, st)); err != nil {
		t.Fatal(err)
	}
	// One element "x yy zzz" with a 9-byte fake header before it.
	elem := String.Append(nil, "x yy zzz")
	in := reserve(1024)
	copy(in[9:], elem)
	d := in[512:]
	binary.LittleEndian.PutUint64(d[abi.DescTimestamp:], 77)
	binary.LittleEndian.PutUint32(d[abi.DescValue:], 0)
	binary.LittleEndian.PutUint32(d[abi.DescPane:], 8)
	binary.LittleEndian.PutUint32(d[abi.DescElement:], 9)
	binary.LittleEndian.PutUint32(d[abi.DescEnd:], uint32(9+len(elem)))
	if err := process(1, 512); err != nil {
		t.Fatal(err)
	}
	var got []string
	out := outputs()
	for p := 0; p < len(out); {
		w := binary.LittleEndian.Uint32(out[p:])
		n := int(binary.LittleEndian.Uint32(out[p+abi.RecordLen:]))
		p += abi.RecordHeaderSize
		if w&abi.RecordHasTimestamp != 0 {
			p += 8
		}
		s, _ := DecodeAll(String, out[p:p+n])
		got = append(got, fmt.Sprintf("%d:%s", w&abi.RecordOutputMask, s))
		p += n
	}
	// "short" is not a stage output: dropped; words go out, "zzz" (encoded
	// length 4 > 2) is long, so is "yy" (3 bytes).
	if want := "0:x 0:yy 1:yy 0:zzz 1:zzz"; strings.Join(got, " ") != want {
		t.Fatalf("records %q, want %q", strings.Join(got, " "), want)
	}
	rt = runtimeState{}
}
