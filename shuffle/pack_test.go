package shuffle

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
)

// packedValues are windowed values of wv_kv (KV<string, varint> in interval
// windows), as Beam's own encoders write them.
func packedValues(t *testing.T, n int) [][]byte {
	kvCoder := coder.NewKV([]*coder.Coder{coder.NewString(), coder.NewVarInt()})
	var out [][]byte
	for i := 0; i < n; i++ {
		ws := []typex.Window{window.IntervalWindow{Start: mtime.Time(i), End: mtime.Time(i + 1000)}}
		if i%3 == 0 { // some in two windows
			ws = append(ws, window.IntervalWindow{Start: 5, End: 50})
		}
		key := strings.Repeat("k", i%200) // some past the one-byte length
		out = append(out, encode(t, kvCoder, coder.NewIntervalWindow(), mtime.Time(i*7), ws, typex.NoFiringPane(), &exec.FullValue{Elm: key, Elm2: int64(i * 1000)}))
	}
	return out
}

// A pack gives back exactly the values added, in order, with their
// indexes; Take empties it and returns a value the next pack does not touch.
func TestPackRoundTrip(t *testing.T) {
	c, err := NewElementCodec(testCoders, "wv_kv")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 127, 128, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			vals := packedValues(t, n)
			var p Pack
			size := 0
			for _, v := range vals {
				p.Add(v)
				size += len(v)
			}
			if p.Count() != n || p.Size() != size {
				t.Fatalf("pack of %d values (%d bytes): Count %d, Size %d", n, size, p.Count(), p.Size())
			}
			rec := p.Take()
			if p.Count() != 0 || p.Size() != 0 || p.Take() != nil {
				t.Fatalf("Take left %d values, %d bytes", p.Count(), p.Size())
			}
			p.Add([]byte("something else")) // must not write into rec
			if rec[0] != KindDataPacked {
				t.Fatalf("kind %d", rec[0])
			}
			if cnt, _, err := DecodePacked(rec); err != nil || cnt != n {
				t.Fatalf("DecodePacked: %d, %v; want %d", cnt, err, n)
			}
			var got [][]byte
			err := c.EachPacked(rec, func(i int, raw []byte) error {
				if i != len(got) {
					t.Fatalf("index %d, want %d", i, len(got))
				}
				got = append(got, bytes.Clone(raw))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != n {
				t.Fatalf("%d values, want %d", len(got), n)
			}
			for i := range vals {
				if !bytes.Equal(got[i], vals[i]) {
					t.Fatalf("value %d: %x, want %x", i, got[i], vals[i])
				}
			}
		})
	}
}

// A pack whose count or bytes disagree with its values is refused whole,
// naming what is wrong.
func TestPackRefusesDamage(t *testing.T) {
	c, err := NewElementCodec(testCoders, "wv_kv")
	if err != nil {
		t.Fatal(err)
	}
	vals := packedValues(t, 3)
	var p Pack
	for _, v := range vals {
		p.Add(v)
	}
	rec := p.Take()
	body := rec[2:] // kind, count 3 (one byte)
	for _, tc := range []struct {
		name, want string
		rec        []byte
	}{
		{"not packed", "not a packed", append([]byte{KindData}, body...)},
		{"empty", "not a packed", nil},
		{"no count", "bad value count", []byte{KindDataPacked}},
		{"zero count", "0 values", append([]byte{KindDataPacked, 0}, body...)},
		{"count too large", "values, want 1 to", []byte{KindDataPacked, 0x80, 0x80, 0x80, 0x80, 0x01}},
		{"count short", "bytes after its 2 values", append([]byte{KindDataPacked, 2}, body...)},
		{"count long", "3 values, want 4", append([]byte{KindDataPacked, 4}, body...)},
		{"truncated", "value 2 of 3", rec[:len(rec)-1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := c.EachPacked(tc.rec, func(int, []byte) error { n++; return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Positions order values like their records, then their index in a pack,
// whatever the mix of packed and single records.
func TestPositionOrder(t *testing.T) {
	seq := []int64{
		Position(0, 0), Position(1, 0), Position(1, 1), Position(1, MaxPackedValues-1),
		Position(2, 0), Position(1<<42, 0), Position(1<<42, 5),
	}
	for i := 1; i < len(seq); i++ {
		if seq[i] <= seq[i-1] {
			t.Fatalf("position %d (%d) not after %d", i, seq[i], seq[i-1])
		}
	}
}

// FuzzEachPacked: arbitrary bytes never panic, and whatever EachPacked
// accepts packs again into the same record.
func FuzzEachPacked(f *testing.F) {
	var p Pack
	for _, v := range [][]byte{
		[]byte("\x7f\xdf\x3b\x64\x5a\x1c\xac\x09\x00\x00\x00\x01\x0f\x03key"),
		[]byte("\x80\x00\x00\x00\x00\x00\x00\x4d\x00\x00\x00\x01\x0f\x03fox"),
	} {
		p.Add(v)
	}
	f.Add(p.Take())
	f.Add([]byte{KindDataPacked, 1})
	f.Add([]byte{KindDataPacked, 0xff, 0xff, 0xff, 0xff, 0x0f})
	c, err := NewElementCodec(testCoders, "wv_str")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var again Pack
		err := c.EachPacked(b, func(_ int, raw []byte) error { again.Add(raw); return nil })
		if err != nil {
			return
		}
		if got := again.Take(); !bytes.Equal(got, b) {
			// The only other encoding of the same values: a count varint
			// with redundant continuation bytes.
			n, vals, _ := DecodePacked(b)
			if n2, vals2, _ := DecodePacked(got); n != n2 || !bytes.Equal(vals, vals2) {
				t.Fatalf("accepted %x, packs again as %x", b, got)
			}
		}
	})
}
