package shuffle

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

func spec(urn string, comps ...string) *pipepb.Coder {
	return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: comps}
}

// testCoders: the wire coders of a few PCollections, as translate writes them.
var testCoders = map[string]*pipepb.Coder{
	"bytes":   spec(urnBytes),
	"string":  spec(urnString),
	"varint":  spec(urnVarInt),
	"double":  spec(urnDouble),
	"lp":      spec(urnLengthPrefix, "custom"),
	"custom":  spec("beam:coder:custom:v1"),
	"kv":      spec(urnKV, "string", "varint"),
	"iter":    spec(urnIterable, "double"),
	"kviter":  spec(urnKV, "bytes", "iter"),
	"gw":      spec(urnGlobalWindow),
	"iw":      spec(urnIntervalWindow),
	"wv_kv":   spec(urnWindowedValue, "kv", "iw"),
	"wv_kvit": spec(urnWindowedValue, "kviter", "gw"),
	"wv_lp":   spec(urnWindowedValue, "lp", "gw"),
	"wv_bad":  spec(urnWindowedValue, "custom", "gw"),
	"wv_str":  spec(urnWindowedValue, "string", "gw"),
	"wv_stri": spec(urnWindowedValue, "string", "iw"),
}

// encode writes a windowed value with the Go SDK's own encoders, so the
// parser is checked against Beam's encoding, not against itself.
func encode(t *testing.T, c *coder.Coder, wc *coder.WindowCoder, ts mtime.Time, ws []typex.Window, pane typex.PaneInfo, v *exec.FullValue) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := exec.EncodeWindowedValueHeader(exec.MakeWindowEncoder(wc), ws, ts, pane, &buf); err != nil {
		t.Fatal(err)
	}
	if err := exec.MakeElementEncoder(c).Encode(v, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestElementCodec(t *testing.T) {
	kvCoder := coder.NewKV([]*coder.Coder{coder.NewString(), coder.NewVarInt()})
	iw := []typex.Window{window.IntervalWindow{Start: 1000, End: 2000}, window.IntervalWindow{Start: 1500, End: 2500}}
	late := typex.PaneInfo{Timing: typex.PaneLate, Index: 3, NonSpeculativeIndex: 1}

	tests := []struct {
		name      string
		wv        string
		raw       []byte
		ts        int64
		nWindows  int
		key, elem []byte
	}{{
		name:     "KV<string,varint> in two interval windows, late pane",
		wv:       "wv_kv",
		raw:      encode(t, kvCoder, coder.NewIntervalWindow(), 1234, iw, late, &exec.FullValue{Elm: "key", Elm2: int64(300)}),
		ts:       1234,
		nWindows: 2,
		key:      []byte("\x03key"),
		elem:     []byte("\x03key\xac\x02"),
	}, {
		name:     "KV<bytes, iterable<double>> in the global window",
		wv:       "wv_kvit",
		raw:      append(encode(t, coder.NewBytes(), coder.NewGlobalWindow(), mtime.MinTimestamp, window.SingleGlobalWindow, typex.NoFiringPane(), &exec.FullValue{Elm: []byte("k")}), 0, 0, 0, 2, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0),
		ts:       int64(mtime.MinTimestamp),
		nWindows: 1,
		key:      []byte("\x01k"),
		elem:     []byte("\x01k\x00\x00\x00\x02\x3f\xf0\x00\x00\x00\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00"),
	}, {
		// A paged group (host/internal/task/gbkpages.go): one value inline,
		// the rest behind the state token "tok".
		name:     "KV<bytes, iterable<double>> state-backed",
		wv:       "wv_kvit",
		raw:      append(encode(t, coder.NewBytes(), coder.NewGlobalWindow(), mtime.MinTimestamp, window.SingleGlobalWindow, typex.NoFiringPane(), &exec.FullValue{Elm: []byte("k")}), 0xff, 0xff, 0xff, 0xff, 1, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 3, 't', 'o', 'k'),
		ts:       int64(mtime.MinTimestamp),
		nWindows: 1,
		key:      []byte("\x01k"),
		elem:     []byte("\x01k\xff\xff\xff\xff\x01\x3f\xf0\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x03tok"),
	}, {
		name:     "string in the global window, no firing pane (Locate's fast path)",
		wv:       "wv_str",
		raw:      encode(t, coder.NewString(), coder.NewGlobalWindow(), 77, window.SingleGlobalWindow, typex.NoFiringPane(), &exec.FullValue{Elm: "quick brown fox"}),
		ts:       77,
		nWindows: 1,
		elem:     []byte("\x0fquick brown fox"),
	}, {
		name:     "long string in the global window, late pane",
		wv:       "wv_str",
		raw:      encode(t, coder.NewString(), coder.NewGlobalWindow(), 77, window.SingleGlobalWindow, late, &exec.FullValue{Elm: string(bytes.Repeat([]byte("x"), 300))}),
		ts:       77,
		nWindows: 1,
		elem:     append([]byte("\xac\x02"), bytes.Repeat([]byte("x"), 300)...),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewElementCodec(testCoders, tc.wv)
			if err != nil {
				t.Fatal(err)
			}
			// Two values back to back, as on the data channel.
			stream := append(append([]byte(nil), tc.raw...), tc.raw...)
			for i := 0; i < 2; i++ {
				wv, err := c.Next(stream)
				if err != nil {
					t.Fatalf("value %d: %v", i, err)
				}
				if !bytes.Equal(wv.Raw, tc.raw) {
					t.Fatalf("value %d: raw %x, want %x", i, wv.Raw, tc.raw)
				}
				if wv.Timestamp != tc.ts || wv.NWindows != tc.nWindows {
					t.Errorf("timestamp %d windows %d, want %d %d", wv.Timestamp, wv.NWindows, tc.ts, tc.nWindows)
				}
				if !bytes.Equal(wv.Elem, tc.elem) {
					t.Errorf("elem %x, want %x", wv.Elem, tc.elem)
				}
				if tc.key != nil {
					k, _, err := c.SplitKV(wv.Elem)
					if err != nil || !bytes.Equal(k, tc.key) {
						t.Errorf("key %x (%v), want %x", k, err, tc.key)
					}
				}
				ws, err := c.SplitWindows(wv)
				if err != nil || len(ws) != tc.nWindows {
					t.Errorf("windows %x (%v)", ws, err)
				}
				stream = stream[len(wv.Raw):]
			}
			checkScan(t, c, append(append([]byte(nil), tc.raw...), tc.raw[:len(tc.raw)-1]...))
			// Every strict prefix is short, never a wrong value.
			for n := 0; n < len(tc.raw); n++ {
				if _, err := c.Next(tc.raw[:n]); !errors.Is(err, ErrShort) {
					t.Fatalf("prefix of %d bytes: %v, want ErrShort", n, err)
				}
			}
		})
	}
}

func TestElementCodecRefusesUnknownCoders(t *testing.T) {
	if _, err := NewElementCodec(testCoders, "wv_bad"); err == nil {
		t.Fatal("a custom coder that is not length-prefixed must be refused")
	}
	if _, err := NewElementCodec(testCoders, "wv_lp"); err != nil {
		t.Fatalf("a length-prefixed custom coder: %v", err)
	}
}

// FuzzElementCodec: arbitrary bytes never panic, a parsed value never
// claims more bytes than it was given, and Locate's fast path agrees with
// the general one.
func FuzzElementCodec(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Add([]byte("\x7f\xdf\x3b\x64\x5a\x1c\xac\x09\x00\x00\x00\x01\x03\x03key\x05"))
	f.Add([]byte("\x80\x00\x00\x00\x00\x00\x00\x4d\x00\x00\x00\x01\x0f\x03fox"))
	f.Add([]byte("\x80\x00\x00\x00\x00\x00\x00\x4d\x00\x00\x00\x01\x0f\x04fox"))
	codecs := []*ElementCodec{}
	for _, id := range []string{"wv_kv", "wv_kvit", "wv_lp", "wv_str", "wv_stri"} {
		c, err := NewElementCodec(testCoders, id)
		if err != nil {
			f.Fatal(err)
		}
		codecs = append(codecs, c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range codecs {
			wv, err := c.Next(b)
			if err == nil && len(wv.Raw) > len(b) {
				t.Fatalf("parsed %d bytes out of %d", len(wv.Raw), len(b))
			}
			general := *c
			general.globalOnly, general.elemPrefixed = false, false
			l, err := c.Locate(b)
			gl, gerr := general.Locate(b)
			if l != gl || (err == nil) != (gerr == nil) || errors.Is(err, ErrShort) != errors.Is(gerr, ErrShort) {
				t.Fatalf("Locate %+v, %v; the general path %+v, %v", l, err, gl, gerr)
			}
			checkScan(t, c, b)
		}
	})
}

func TestWatermarkEnvelope(t *testing.T) {
	for _, tc := range []struct {
		producer string
		wm       int64
	}{{"0/0", int64(mtime.MinTimestamp)}, {"12/3", 0}, {"1/1", int64(mtime.MaxTimestamp)}, {"", -5}} {
		p, wm, err := DecodeWatermark(EncodeWatermark(tc.producer, tc.wm))
		if err != nil || p != tc.producer || wm != tc.wm {
			t.Errorf("round trip of (%q, %d): (%q, %d, %v)", tc.producer, tc.wm, p, wm, err)
		}
	}
	if _, _, err := DecodeWatermark([]byte{KindWatermark, 5, 'a'}); err == nil {
		t.Error("a truncated report must be an error")
	}
}

func FuzzDecodeWatermark(f *testing.F) {
	f.Add(EncodeWatermark("3/1", 42))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, wm, err := DecodeWatermark(b)
		if err == nil {
			p2, wm2, err := DecodeWatermark(EncodeWatermark(p, wm))
			if err != nil || p2 != p || wm2 != wm {
				t.Fatalf("decoded (%q,%d) from %x, which does not round trip: (%q,%d,%v)", p, wm, b, p2, wm2, err)
			}
		}
	})
}

// checkScan checks Scan against Locate called value after value: the same
// locations, stopping at the same offset with the same kind of error.
func checkScan(t *testing.T, c *ElementCodec, b []byte) {
	t.Helper()
	for _, limit := range []int{1, 20, len(b) + 1} {
		got, end, err := c.Scan(nil, b, 0, limit)
		var want []Location
		off := 0
		var werr error
		for off < len(b) && (len(want) == 0 || off < limit) {
			l, err := c.Locate(b[off:])
			if err != nil {
				werr = err
				break
			}
			l.Start, l.Pane, l.Elem, l.End = off, off+l.Pane, off+l.Elem, off+l.End
			want = append(want, l)
			off = l.End
		}
		if len(got) != len(want) || end != off || (err == nil) != (werr == nil) || errors.Is(err, ErrShort) != errors.Is(werr, ErrShort) {
			t.Fatalf("limit %d: Scan %d values to %d (%v), Locate %d values to %d (%v)", limit, len(got), end, err, len(want), off, werr)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("limit %d: value %d: Scan %+v, Locate %+v", limit, i, got[i], want[i])
			}
		}
	}
}

// TestNullableLength: a nullable value is a flag byte, then (flag 1) the
// component nested, as Java's and Python's NullableCoder encode it.
func TestNullableLength(t *testing.T) {
	coders := map[string]*pipepb.Coder{
		"b": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:bytes:v1"}},
		"n": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:nullable:v1"}, ComponentCoderIds: []string{"b"}},
	}
	length, err := ValueLength(coders, "n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   []byte
		want int
	}{
		{[]byte{0, 9, 9}, 1},           // null
		{[]byte{1, 2, 'a', 'b', 9}, 4}, // "ab"
		{[]byte{1, 0}, 2},              // empty, not null
	} {
		if n, err := length(tc.in); err != nil || n != tc.want {
			t.Errorf("length(%x) = %d, %v; want %d", tc.in, n, err, tc.want)
		}
	}
	if _, err := length(nil); err == nil {
		t.Error("an empty buffer has a length")
	}
}
