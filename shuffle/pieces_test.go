package shuffle

import (
	"bytes"
	"testing"
)

func TestGroupPieceRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		kind     byte
		producer string
		seq, n   uint64
		data     []byte
	}{
		{KindGroupPiece, "3/7", 0, 0, []byte{1, 2, 3}},
		{KindGroupPiece, "12/0", 1<<63 + 5, 1<<40 + 1, bytes.Repeat([]byte{0xff}, 300)},
		{KindGroupEnd, "0/1", 42, 9, []byte("element")},
		{KindGroupEnd, "", 1, 0, nil},
	} {
		v := EncodeGroupPiece(tc.kind, tc.producer, tc.seq, tc.n, tc.data)
		if v[0] != tc.kind {
			t.Fatalf("kind byte %d, want %d", v[0], tc.kind)
		}
		p, err := DecodeGroupPiece(v)
		if err != nil {
			t.Fatalf("%q: %v", tc.producer, err)
		}
		if p.Producer != tc.producer || p.Seq != tc.seq || p.N != tc.n || !bytes.Equal(p.Data, tc.data) {
			t.Errorf("decoded %+v, want producer %q seq %d n %d data %x", p, tc.producer, tc.seq, tc.n, tc.data)
		}
	}
}

func TestGroupPieceRefusesDamage(t *testing.T) {
	good := EncodeGroupPiece(KindGroupPiece, "1/2", 3, 4, []byte{5})
	for name, v := range map[string][]byte{
		"empty":          nil,
		"another kind":   append([]byte{KindData}, good[1:]...),
		"no seq":         good[:1+1+3+8],
		"producer short": {KindGroupPiece, 200, 'a'},
		"bad varint":     {KindGroupPiece, 0x80},
	} {
		if _, err := DecodeGroupPiece(v); err == nil {
			t.Errorf("%s: decoded %x without an error", name, v)
		}
	}
}

func FuzzDecodeGroupPiece(f *testing.F) {
	f.Add(EncodeGroupPiece(KindGroupEnd, "1/2", 3, 4, []byte{5, 6}))
	f.Add([]byte{KindGroupPiece, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		p, err := DecodeGroupPiece(v)
		if err != nil {
			return
		}
		if again := EncodeGroupPiece(v[0], p.Producer, p.Seq, p.N, p.Data); !bytes.Equal(again, v) {
			// A non-minimal varint length decodes too; the re-encoding
			// must still decode to the same piece.
			q, err := DecodeGroupPiece(again)
			if err != nil || q.Producer != p.Producer || q.Seq != p.Seq || q.N != p.N || !bytes.Equal(q.Data, p.Data) {
				t.Fatalf("%x decoded to %+v, re-encoded to %x", v, p, again)
			}
		}
	})
}
