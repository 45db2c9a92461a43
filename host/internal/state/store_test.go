package state

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
)

// TestDeleteRange: every key in [lower, upper) goes, whether committed or
// only in the batch; the bounds' neighbours stay.
func TestDeleteRange(t *testing.T) {
	keys := func(ss ...string) [][]byte {
		var out [][]byte
		for _, s := range ss {
			out = append(out, []byte(s))
		}
		return out
	}
	committed := keys("a", "b", "b\x00", "ba", "c")
	pending := keys("a\xff", "bb", "c", "d")
	tests := []struct {
		name         string
		lower, upper string
		want         [][]byte
	}{
		{"a prefix's range", "b", "c", keys("a", "a\xff", "c", "d")},
		{"lower is inclusive, upper exclusive", "a\xff", "ba", keys("a", "ba", "bb", "c", "d")},
		{"an empty range", "bc", "bd", keys("a", "a\xff", "b", "b\x00", "ba", "bb", "c", "d")},
		{"everything", "a", "\xff", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := memDB(t)
			b := db.NewBatch()
			for _, k := range committed {
				if err := b.Set(k, []byte("v"), nil); err != nil {
					t.Fatal(err)
				}
			}
			commitBatch(t, b)
			ib := db.NewIndexedBatch()
			defer ib.Close()
			for _, k := range pending {
				if err := ib.Set(k, []byte("v"), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := DeleteRange(ib, []byte(tc.lower), []byte(tc.upper)); err != nil {
				t.Fatal(err)
			}
			if got := storeKeys(t, ib, nil, nil); !slices.EqualFunc(got, tc.want, bytes.Equal) {
				t.Errorf("keys in the batch %q, want %q", got, tc.want)
			}
			// Nothing reached the store before the batch commits.
			if got := storeKeys(t, db, nil, nil); !slices.EqualFunc(got, committed, bytes.Equal) {
				t.Errorf("store keys %q, want %q", got, committed)
			}
			commitBatch(t, ib)
			if got := storeKeys(t, db, nil, nil); !slices.EqualFunc(got, tc.want, bytes.Equal) {
				t.Errorf("store keys after commit %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDeleteRangeInChunks: a range of more keys than DeleteRange collects
// at a time goes whole, each chunk starting just past the last (a key that
// extends the last one by a zero byte among them).
func TestDeleteRangeInChunks(t *testing.T) {
	db := memDB(t)
	ib := db.NewIndexedBatch()
	defer ib.Close()
	for i := range deleteChunk*5/2 + 1 {
		k := []byte(fmt.Sprintf("p%06d", i))
		for _, k := range [][]byte{k, append(k, 0)} {
			if err := ib.Set(k, []byte("v"), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ib.Set([]byte("q"), []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if err := DeleteRange(ib, []byte("p"), []byte("q")); err != nil {
		t.Fatal(err)
	}
	if got := storeKeys(t, ib, nil, nil); len(got) != 1 || string(got[0]) != "q" {
		t.Errorf("%d keys left in the batch (first %q), want only q", len(got), got[0])
	}
}
