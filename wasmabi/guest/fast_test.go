package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// record is an output record as the host reads it.
type record struct {
	out, src int
	ts       int64 // -1: none
	elem     []byte
}

// runStage sets st up with the DoFns given (registered for the test only)
// and processes elems as one batch, the way the exports do. Each element
// gets a fake 9-byte header (timestamp, no windows, a pane byte).
func runStage(t *testing.T, st *abi.Stage, fns []DoFn, elems ...[]byte) ([]record, error) {
	t.Helper()
	rt, registry = runtimeState{}, map[string]*DoFn{}
	saved := counters
	t.Cleanup(func() { rt, registry, counters = runtimeState{}, map[string]*DoFn{}, saved })
	for _, fn := range fns {
		Register(fn)
	}
	if err := setup(abi.AppendStage(nil, st)); err != nil {
		t.Fatal(err)
	}
	var data []byte
	type loc struct{ start, pane, elem, end int }
	var locs []loc
	for _, e := range elems {
		l := loc{start: len(data)}
		data = binary.BigEndian.AppendUint64(data, 0)
		l.pane = len(data)
		data = append(data, 0x0f)
		l.elem = len(data)
		data = append(data, e...)
		l.end = len(data)
		locs = append(locs, l)
	}
	descOff := (len(data) + 7) &^ 7
	in := reserve(descOff + len(elems)*abi.DescSize)
	copy(in, data)
	for i, l := range locs {
		d := in[descOff+i*abi.DescSize:]
		binary.LittleEndian.PutUint64(d[abi.DescTimestamp:], uint64(1000+i))
		binary.LittleEndian.PutUint32(d[abi.DescValue:], uint32(l.start))
		binary.LittleEndian.PutUint32(d[abi.DescPane:], uint32(l.pane))
		binary.LittleEndian.PutUint32(d[abi.DescElement:], uint32(l.elem))
		binary.LittleEndian.PutUint32(d[abi.DescEnd:], uint32(l.end))
	}
	if err := process(len(elems), descOff); err != nil {
		return nil, err
	}
	var recs []record
	out := outputs()
	for p := 0; p < len(out); {
		w := binary.LittleEndian.Uint32(out[p:])
		r := record{out: int(w & abi.RecordOutputMask), src: int(binary.LittleEndian.Uint32(out[p+abi.RecordSource:])), ts: -1}
		n := int(binary.LittleEndian.Uint32(out[p+abi.RecordLen:]))
		p += abi.RecordHeaderSize
		if w&abi.RecordHasTimestamp != 0 {
			r.ts = int64(binary.LittleEndian.Uint64(out[p:]))
			p += 8
		}
		r.elem = out[p : p+n]
		p += n
		recs = append(recs, r)
	}
	return recs, nil
}

// strs decodes records as strings: "out:src:value".
func strs(t *testing.T, recs []record) string {
	t.Helper()
	var s []string
	for _, r := range recs {
		v, err := DecodeAll(String, r.elem)
		if err != nil {
			t.Fatalf("record %+v: %v", r, err)
		}
		s = append(s, fmt.Sprintf("%d:%d:%s", r.out, r.src, v))
	}
	return strings.Join(s, " ")
}

func encStrings(ss ...string) [][]byte {
	var b [][]byte
	for _, s := range ss {
		b = append(b, String.Append(nil, s))
	}
	return b
}

func oneTransform(fn string) *abi.Stage {
	return &abi.Stage{ID: "s", Input: "in", Outputs: []string{"out"}, Transforms: []abi.Transform{
		{ID: "t", DoFn: fn, Input: "in", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "out"}}},
	}}
}

func split(s string, emit func(string)) error {
	for _, w := range strings.Fields(s) {
		emit(w)
	}
	return nil
}

// The fast path of FlatMap: inline decoding, in-place records, including
// strings of 128 bytes and more (2-byte varints) and output buffer growth.
func TestFlatMapBatch(t *testing.T) {
	long := strings.Repeat("L", 200)
	for _, in := range []Coder[string]{String, StringRef} {
		recs, err := runStage(t, oneTransform("split"), []DoFn{FlatMap("split", in, String, split)},
			encStrings("a bb", "", long+" c", "dd")...)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strs(t, recs), "0:0:a 0:0:bb 0:2:"+long+" 0:2:c 0:3:dd"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	// 5000 elements of 30 words: more than the initial 64 KiB of records.
	line := strings.TrimSpace(strings.Repeat("word ", 30))
	var elems []string
	for range 5000 {
		elems = append(elems, line)
	}
	recs, err := runStage(t, oneTransform("split"), []DoFn{FlatMap("split", StringRef, String, split)}, encStrings(elems...)...)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 150000 || recs[149999].src != 4999 || string(recs[149999].elem) != "\x04word" {
		t.Fatalf("%d records, last %+v", len(recs), recs[len(recs)-1])
	}
}

// Map with Bytes in and out, with a coder without a fast path (VarInt), and
// with a malformed element.
func TestMapBatch(t *testing.T) {
	upper := Map("upper", Bytes, Bytes, func(b []byte) ([]byte, error) { return []byte(strings.ToUpper(string(b))), nil })
	recs, err := runStage(t, oneTransform("upper"), []DoFn{upper}, encStrings("ab", "c")...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strs(t, recs), "0:0:AB 0:1:C"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	length := Map("len", StringRef, VarInt, func(s string) (int64, error) { return int64(len(s)), nil })
	recs, err = runStage(t, oneTransform("len"), []DoFn{length}, encStrings("abc", strings.Repeat("x", 300))...)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range recs {
		v, err := DecodeAll(VarInt, r.elem)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if fmt.Sprint(got) != "[3 300]" {
		t.Fatalf("got %v", got)
	}
	_, err = runStage(t, oneTransform("len"), []DoFn{length}, []byte{5, 'a'})
	if err == nil || !strings.Contains(err.Error(), "transform t (DoFn len)") {
		t.Fatalf("malformed element: got error %v", err)
	}
}

// A fused chain: the first transform's output is consumed in the module
// (per-element path of the consumer, Emit through the route), and is also
// a stage output.
func TestFusedChain(t *testing.T) {
	st := &abi.Stage{ID: "s", Input: "in", Outputs: []string{"words", "lens"}, Transforms: []abi.Transform{
		{ID: "t1", DoFn: "split", Input: "in", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "words"}}},
		{ID: "t2", DoFn: "upper", Input: "words", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "upper"}}},
		{ID: "t3", DoFn: "len", Input: "upper", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "lens"}}},
	}}
	fns := []DoFn{
		FlatMap("split", StringRef, String, split),
		Map("upper", StringRef, String, func(s string) (string, error) { return strings.ToUpper(s), nil }),
		Map("len", String, String, func(s string) (string, error) { return fmt.Sprint(len(s)), nil }),
	}
	recs, err := runStage(t, st, fns, encStrings("a bb", "ccc")...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strs(t, recs), "0:0:a 1:0:1 0:0:bb 1:0:2 0:1:ccc 1:1:3"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// An error in a fused consumer fails the batch, naming the consumer.
	fns[2] = Map("len", String, String, func(s string) (string, error) {
		if s == "BB" {
			return "", errors.New("no BB")
		}
		return s, nil
	})
	_, err = runStage(t, st, fns, encStrings("a bb", "ccc")...)
	if err == nil || err.Error() != "transform t3 (DoFn len): no BB" {
		t.Fatalf("got error %v", err)
	}
}

// Two transforms read the stage input: elements go to both, in order.
func TestTwoRoots(t *testing.T) {
	st := &abi.Stage{ID: "s", Input: "in", Outputs: []string{"a", "b"}, Transforms: []abi.Transform{
		{ID: "t1", DoFn: "split", Input: "in", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "a"}}},
		{ID: "t2", DoFn: "upper", Input: "in", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "b"}}},
	}}
	fns := []DoFn{
		FlatMap("split", StringRef, String, split),
		Map("upper", StringRef, String, func(s string) (string, error) { return strings.ToUpper(s), nil }),
	}
	recs, err := runStage(t, st, fns, encStrings("a bb", "c")...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strs(t, recs), "0:0:a 0:0:bb 1:0:A BB 0:1:c 1:1:C"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A DoFn made by FlatMap whose Process is replaced runs the replacement.
func TestReplacedProcess(t *testing.T) {
	d := FlatMap("split", StringRef, String, split)
	inner, calls := d.Process, 0
	d.Process = func(elem []byte, e *Emitter) error {
		calls++
		return inner(elem, e)
	}
	recs, err := runStage(t, oneTransform("split"), []DoFn{d}, encStrings("a b", "c")...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strs(t, recs), "0:0:a 0:0:b 0:1:c"; got != want || calls != 2 {
		t.Fatalf("got %q (%d calls), want %q (2 calls)", got, calls, want)
	}
}

// Counters count per transform, whether created before setup (in init) or
// in Setup.
func TestCounters(t *testing.T) {
	early := NewCounter("ns", "early")
	var late *Counter
	d := FlatMap("split", StringRef, String, func(s string, emit func(string)) error {
		early.Inc(1)
		late.Inc(2)
		return split(s, emit)
	})
	d.Setup = func() error {
		if late == nil {
			late = NewCounter("ns", "late")
		}
		return nil
	}
	st := &abi.Stage{ID: "s", Input: "in", Outputs: []string{"a"}, Transforms: []abi.Transform{
		{ID: "t1", DoFn: "split", Input: "in", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "w"}}},
		{ID: "t2", DoFn: "split", Input: "w", Outputs: []abi.TaggedOutput{{Tag: "o", PCollection: "a"}}},
	}}
	if _, err := runStage(t, st, []DoFn{d}, encStrings("a b", "c")...); err != nil {
		t.Fatal(err)
	}
	// t1 sees 2 elements, t2 3 words.
	got := fmt.Sprint(early.vals, late.vals)
	if want := "[{2 true} {3 true}] [{4 true} {6 true}]"; got != want {
		t.Fatalf("counter values %s, want %s", got, want)
	}
	flushMetrics()
	if got := fmt.Sprint(early.vals, late.vals); got != "[{0 false} {0 false}] [{0 false} {0 false}]" {
		t.Fatalf("after flush: %s", got)
	}
}

// FlatMap's emit writes words of up to 16 bytes of the input with 16-byte
// copies, reading past them; a word in the last 16 bytes of the input
// buffer must take the general path, and both must give the same records.
func TestEmitAtInputEnd(t *testing.T) {
	for _, line := range []string{"a bb ccc", "alpha beta gamma delta epsilon zeta eta theta", "x " + strings.Repeat("y", 16), strings.Repeat("z", 17) + " w"} {
		rt, registry = runtimeState{}, map[string]*DoFn{}
		t.Cleanup(func() { rt, registry = runtimeState{}, map[string]*DoFn{} })
		Register(FlatMap("split", StringRef, String, split))
		if err := setup(abi.AppendStage(nil, oneTransform("split"))); err != nil {
			t.Fatal(err)
		}
		// The descriptor first, then the element, ending the buffer.
		elem := String.Append(nil, line)
		in := reserve(abi.DescSize + len(elem))
		if len(in) != abi.DescSize+len(elem) {
			t.Fatalf("input buffer of %d bytes, want exactly %d", len(in), abi.DescSize+len(elem))
		}
		copy(in[abi.DescSize:], elem)
		binary.LittleEndian.PutUint32(in[abi.DescElement:], abi.DescSize)
		binary.LittleEndian.PutUint32(in[abi.DescEnd:], uint32(len(in)))
		if err := process(1, 0); err != nil {
			t.Fatal(err)
		}
		var got []string
		out := outputs()
		for p := 0; p < len(out); {
			n := int(binary.LittleEndian.Uint32(out[p+abi.RecordLen:]))
			p += abi.RecordHeaderSize
			w, err := DecodeAll(String, out[p:p+n])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, w)
			p += n
		}
		if want := strings.Fields(line); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%q: records %q, want %q", line, got, want)
		}
	}
}

// The fast path allocates nothing per element (Go's wasm GC is slow).
func TestFlatMapBatchAllocs(t *testing.T) {
	line := strings.Repeat("word ", 3)
	var elems []string
	for range 1000 {
		elems = append(elems, line)
	}
	counter := NewCounter("ns", "words")
	fn := FlatMap("split", StringRef, String, func(s string, emit func(string)) error {
		return split2(s, func(w string) {
			counter.Inc(1)
			emit(w)
		})
	})
	if _, err := runStage(t, oneTransform("split"), []DoFn{fn}, encStrings(elems...)...); err != nil {
		t.Fatal(err)
	}
	descOff := (len(rt.in) - len(elems)*abi.DescSize) // runStage put the descriptors at the end
	if a := testing.AllocsPerRun(10, func() {
		if err := process(len(elems), descOff); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

// split2 is split without strings.Fields' allocation.
func split2(s string, emit func(string)) error {
	for len(s) > 0 {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			emit(s)
			return nil
		}
		if i > 0 {
			emit(s[:i])
		}
		s = s[i+1:]
	}
	return nil
}

// Emit from a hand-made DoFn: string/bytes coders and others, to the host.
func TestEmitCoders(t *testing.T) {
	fn := DoFn{Name: "emit", Process: func(elem []byte, e *Emitter) error {
		s, err := DecodeAll(StringRef, elem)
		if err != nil {
			return err
		}
		Emit(e, 0, Bytes, []byte(s+"!"))
		Emit(e, 0, String, s+"?")
		Emit(e, 0, KVOf(String, String), KV[string, string]{s, "v"})
		return nil
	}}
	recs, err := runStage(t, oneTransform("emit"), []DoFn{fn}, encStrings("a", strings.Repeat("b", 130))...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%d:%x", r.src, r.elem))
	}
	long := strings.Repeat("62", 130)
	want := "0:0261 21 0:0261 3f 0:0161 0176 1:8301" + long + "21 1:8301" + long + "3f 1:8201" + long + "0176"
	if g := strings.ReplaceAll(strings.Join(got, " "), " ", ""); g != strings.ReplaceAll(want, " ", "") {
		t.Fatalf("got %s\nwant %s", strings.Join(got, " "), want)
	}
}
