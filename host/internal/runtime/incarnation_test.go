package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// A store follows one incarnation of its application's topics: marked on
// first sight (a store from before incarnations is kept), kept while the
// id stays, emptied (every key, durably) when the topics were made again,
// and then marked anew.
func TestCheckIncarnation(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	keys := []string{"\x00a", "t/1/x", "\xff\xffz"}
	put := func() {
		for _, k := range keys {
			if err := db.Set([]byte(k), []byte("v"), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func() int {
		it, err := db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		return n
	}
	put()
	for _, step := range []struct {
		id      string
		emptied bool
		keys    int
	}{
		{"", false, 3},  // a broker without topic ids: nothing checked or marked
		{"A", false, 3}, // first sight: marked, kept
		{"A", false, 3},
		{"B", true, 0}, // made again
		{"B", false, 0},
	} {
		emptied, err := checkIncarnation(db, dir, step.id)
		if err != nil {
			t.Fatalf("id %q: %v", step.id, err)
		}
		if emptied != step.emptied || count() != step.keys {
			t.Fatalf("id %q: emptied %v with %d keys left, want %v and %d", step.id, emptied, count(), step.emptied, step.keys)
		}
		if step.id != "" {
			if b, _ := os.ReadFile(filepath.Join(dir, incarnationFile)); string(b) != step.id+"\n" {
				t.Fatalf("id %q: file holds %q", step.id, b)
			}
		}
	}
	// Emptied for good: it stays so after a reopen.
	put()
	if emptied, err := checkIncarnation(db, dir, "C"); err != nil || !emptied {
		t.Fatalf("id C: emptied %v, %v", emptied, err)
	}
	db.Close()
	if db, err = pebble.Open(dir, &pebble.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d keys after the reopen, want 0", n)
	}
}
