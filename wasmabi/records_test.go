package wasmabi

import (
	"encoding/binary"
	"testing"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// recordsInput is a batch like bench wasm's: 4096 elements with the global
// window's 13-byte header, and 2.5 output records of 4-6 element bytes per
// element.
func recordsInput() (vals []shuffle.Location, data, out []byte) {
	for k := range 4096 {
		v := shuffle.Location{Start: len(data)}
		data = append(data, make([]byte, 12)...)
		v.Pane = len(data)
		data = append(data, 0x0f)
		v.Elem = len(data)
		data = append(data, 4, 'w', 'o', 'r', 'd')
		v.End = len(data)
		vals = append(vals, v)
		for w := range 2 + k%2 {
			out = binary.LittleEndian.AppendUint32(out, 0)
			out = binary.LittleEndian.AppendUint32(out, uint32(k))
			out = binary.LittleEndian.AppendUint32(out, uint32(4+w))
			out = append(out, "\x05words"[:4+w]...)
		}
	}
	return vals, data, out
}

func BenchmarkAppendRecords(b *testing.B) {
	vals, data, out := recordsInput()
	chunks := make([][]byte, 1)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		chunks[0] = chunks[0][:0]
		if _, err := appendRecords(chunks, vals, data, out); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAppendRecords(t *testing.T) {
	vals, data, out := recordsInput()
	// One record to a second output, with a timestamp.
	out = binary.LittleEndian.AppendUint32(out, 1|abi.RecordHasTimestamp)
	out = binary.LittleEndian.AppendUint32(out, 7)
	out = binary.LittleEndian.AppendUint32(out, 2)
	out = binary.LittleEndian.AppendUint64(out, 5)
	out = append(out, 1, 'x')
	chunks := make([][]byte, 2)
	n, err := appendRecords(chunks, vals, data, out)
	if err != nil || n != 4096*5/2+1 {
		t.Fatalf("%d records, %v", n, err)
	}
	if len(chunks[0]) != 2048*(2*(13+4)+2*(13+5)+13+6) {
		t.Fatalf("output 0: %d bytes", len(chunks[0]))
	}
	want := append(binary.BigEndian.AppendUint64(nil, 5^1<<63), data[vals[7].Start+8:vals[7].Elem]...)
	if string(chunks[1]) != string(append(want, 1, 'x')) {
		t.Fatalf("output 1: %x", chunks[1])
	}
	for _, bad := range [][]byte{out[:len(out)-1], append(out, 0, 0, 0), append(out[:0:0], 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)} {
		if _, err := appendRecords(make([][]byte, 2), vals, data, bad); err == nil {
			t.Errorf("no error for %d bytes of records", len(bad))
		}
	}
}

// BenchmarkScanValues scans a chunk of bench wasm's input (4096 short
// strings as windowed values in the global window).
func BenchmarkScanValues(b *testing.B) {
	chunk := benchInput(b)[0]
	codec, err := shuffle.NewElementCodec(testCoders(), "wv")
	if err != nil {
		b.Fatal(err)
	}
	var vals []shuffle.Location
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		vals, _, err = codec.Scan(vals[:0], chunk, 0, DefaultBatchBytes)
		if err != nil || len(vals) != benchChunk {
			b.Fatal(len(vals), err)
		}
	}
}
