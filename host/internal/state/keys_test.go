package state

import (
	"bytes"
	"math"
	"testing"
)

// TestKindsDistinct: the registry's kinds are distinct bytes, so keys of
// different stores of one task can never collide or nest (every kind is one
// byte after a fixed-length prefix).
func TestKindsDistinct(t *testing.T) {
	seen := map[Kind]int{}
	for i, k := range Kinds() {
		if j, ok := seen[k]; ok {
			t.Fatalf("kind %q declared twice (positions %d and %d)", k, j, i)
		}
		seen[k] = i
	}
	if len(seen) < 20 {
		t.Fatalf("only %d kinds registered", len(seen))
	}
}

// TestKeysPrefixFree: for every pair of kinds, no key of one starts with the
// prefix of the other, within a task and against other tasks and the side
// input store.
func TestKeysPrefixFree(t *testing.T) {
	prefixes := [][]byte{TaskPrefix(0, 0), TaskPrefix(0, 1), TaskPrefix(1, 0), TaskPrefix(0xFEFFFFFF, 0x7fffffff)}
	var all [][]byte
	for _, p := range prefixes {
		for _, k := range Kinds() {
			all = append(all, Key(p, k))
		}
	}
	all = append(all, append(append([]byte(nil), SidePrefix...), 'S'), append(append([]byte(nil), SidePrefix...), 'M'))
	for i, a := range all {
		for j, b := range all {
			if i != j && bytes.HasPrefix(a, b) {
				t.Fatalf("store prefix %x starts with %x", a, b)
			}
		}
	}
	if err := CheckSubTopology(0xFF << 24); err == nil {
		t.Fatal("a sub-topology id whose prefix starts with the side prefix was accepted")
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte{1, 2}, []byte{1, 3}},
		{[]byte{1, 0xff}, []byte{2}},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := PrefixEnd(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", tc.in, got, tc.want)
		}
	}
}

func FuzzLP(f *testing.F) {
	f.Add([]byte("a"), []byte(""), []byte("ccc"))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		enc := LP(a, b, c)
		rest := enc
		for _, want := range [][]byte{a, b, c} {
			got, r, err := ReadLP(rest)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("ReadLP = %x, %v; want %x", got, err, want)
			}
			rest = r
		}
		if len(rest) != 0 {
			t.Fatalf("%d bytes left", len(rest))
		}
		// Order of EventTimeBits follows the order of the times.
		x, y := int64(len(a))-int64(len(b)), int64(len(c))
		if (x < y) != (EventTimeBits(x) < EventTimeBits(y)) {
			t.Fatalf("EventTimeBits order differs for %d, %d", x, y)
		}
	})
}

// TestKeyLayout: the encodings every writer shares, byte for byte.
func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []byte
	}{
		{"task prefix", TaskPrefix(0x01020304, -2), []byte{1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe}},
		{"key", Key([]byte{9, 9}, Bag, []byte("ab"), nil, []byte{0}), []byte{9, 9, 'U', 'a', 'b', 0}},
		{"key without parts", Key(nil, Seq), []byte{'Q'}},
		{"length-prefixed parts", LP([]byte("ab"), nil, bytes.Repeat([]byte{7}, 130)), append([]byte{2, 'a', 'b', 0, 0x82, 0x01}, bytes.Repeat([]byte{7}, 130)...)},
		{"side key", SideKey('M', "tp", []byte{5}, []byte("k"), []byte{0, 1}), []byte{0xff, 'M', 2, 't', 'p', 1, 5, 1, 'k', 0, 1}},
		{"side key prefix", SideKey('S', "tp", nil, nil, nil), []byte{0xff, 'S', 2, 't', 'p', 0}},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: %x, want %x", tc.name, tc.got, tc.want)
		}
	}
	if len(TaskPrefix(1, 1)) != TaskPrefixLen {
		t.Errorf("task prefix of %d bytes, want %d", len(TaskPrefix(1, 1)), TaskPrefixLen)
	}
	for _, tc := range []struct {
		ms   int64
		want uint64
	}{{math.MinInt64, 0}, {-1, 1<<63 - 1}, {0, 1 << 63}, {math.MaxInt64, math.MaxUint64}} {
		if got := EventTimeBits(tc.ms); got != tc.want {
			t.Errorf("EventTimeBits(%d) = %x, want %x", tc.ms, got, tc.want)
		}
	}
}

func TestReadLPCorrupt(t *testing.T) {
	for _, b := range [][]byte{nil, {3, 'a', 'b'}, {0x80}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if p, rest, err := ReadLP(b); err == nil {
			t.Errorf("ReadLP(%x) = %x, %x; want an error", b, p, rest)
		}
	}
}

func TestCheckSubTopology(t *testing.T) {
	for _, tc := range []struct {
		id int
		ok bool
	}{{0, true}, {0xFF<<24 - 1, true}, {-1, false}, {0xFF << 24, false}} {
		if err := CheckSubTopology(tc.id); (err == nil) != tc.ok {
			t.Errorf("CheckSubTopology(%d) = %v", tc.id, err)
		}
	}
	// Kinds is a copy: changing it does not change the registry.
	k := Kinds()
	k[0] = 0
	if Kinds()[0] != Watermark {
		t.Error("Kinds returned the registry itself")
	}
}
