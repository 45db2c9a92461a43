package guest

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
)

// The coders must produce exactly what the Beam Go SDK's encoders produce.
func TestCodersMatchBeam(t *testing.T) {
	beam := func(f func(*bytes.Buffer) error) []byte {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	check := func(name string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", name, got, want)
		}
	}
	for _, s := range []string{"", "a", "héllo", strings.Repeat("x", 300)} {
		check("string "+s, String.Append(nil, s), beam(func(b *bytes.Buffer) error { return coder.EncodeStringUTF8(s, b) }))
		check("bytes "+s, Bytes.Append(nil, []byte(s)), beam(func(b *bytes.Buffer) error { return coder.EncodeBytes([]byte(s), b) }))
		roundTrip(t, String, s)
		roundTrip(t, StringRef, s)
		roundTrip(t, LengthPrefixed(String), s)
	}
	for _, v := range []int64{0, 1, 127, 128, -1, math.MaxInt64, math.MinInt64} {
		check("varint", VarInt.Append(nil, v), beam(func(b *bytes.Buffer) error { return coder.EncodeVarInt(v, b) }))
		roundTrip(t, VarInt, v)
	}
	for _, v := range []float64{0, -1.5, math.Inf(1), math.MaxFloat64} {
		check("double", Double.Append(nil, v), beam(func(b *bytes.Buffer) error { return coder.EncodeDouble(v, b) }))
		roundTrip(t, Double, v)
	}
	for _, v := range []bool{false, true} {
		check("bool", Bool.Append(nil, v), beam(func(b *bytes.Buffer) error { return coder.EncodeBool(v, b) }))
		roundTrip(t, Bool, v)
	}
	kv := KVOf(String, VarInt)
	check("kv", kv.Append(nil, KV[string, int64]{"k", 300}), beam(func(b *bytes.Buffer) error {
		if err := coder.EncodeStringUTF8("k", b); err != nil {
			return err
		}
		return coder.EncodeVarInt(300, b)
	}))
	roundTrip(t, kv, KV[string, int64]{"key", -7})
	it := IterableOf(String)
	check("iterable", it.Append(nil, []string{"a", "bc"}), beam(func(b *bytes.Buffer) error {
		if err := coder.EncodeInt32(2, b); err != nil {
			return err
		}
		for _, s := range []string{"a", "bc"} {
			if err := coder.EncodeStringUTF8(s, b); err != nil {
				return err
			}
		}
		return nil
	}))
	// The block encoding (count -1) decodes too.
	blocks := []byte{0xff, 0xff, 0xff, 0xff, 2, 1, 'a', 1, 'b', 1, 1, 'c', 0, 0xAA}
	vs, rest, err := it.Decode(blocks)
	if err != nil || !slices.Equal(vs, []string{"a", "b", "c"}) || !bytes.Equal(rest, []byte{0xAA}) {
		t.Errorf("block iterable: %q %x %v", vs, rest, err)
	}
	// A length prefix longer than one byte.
	lp := LengthPrefixed(String)
	long := strings.Repeat("y", 200)
	enc := lp.Append([]byte{9}, long)
	if enc[0] != 9 || !bytes.Equal(enc[1:], append([]byte{0xca, 1}, String.Append(nil, long)...)) {
		t.Errorf("length prefix: %x", enc[:4])
	}
}

func roundTrip[T any](t *testing.T, c Coder[T], v T) {
	t.Helper()
	b := c.Append([]byte{0xEE}, v)
	got, rest, err := c.Decode(b[1:])
	if err != nil || len(rest) != 0 {
		t.Fatalf("decode %v: rest %x, %v", v, rest, err)
	}
	if !equalAny(got, v) {
		t.Errorf("round trip: got %v, want %v", got, v)
	}
	// Truncated input is an error, not a panic.
	if len(b) > 1 {
		if _, _, err := c.Decode(b[1 : len(b)-1]); err == nil {
			t.Errorf("truncated %v decoded", v)
		}
	}
}

func equalAny[T any](a, b T) bool {
	return slices.Equal(Bytes.Append(nil, anyBytes(a)), Bytes.Append(nil, anyBytes(b)))
}

func anyBytes(v any) []byte {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	return []byte(fmtAny(v))
}
