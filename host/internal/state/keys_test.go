package state

import (
	"bytes"
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
