package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/translate"
)

// sideStage has an iterable and a multimap side input of one transform, and
// an iterable of another transform with the same local name whose topic
// name is a prefix of the first one's.
var sideStage = &translate.Stage{SideInputs: []translate.SideInput{
	{TransformID: "t1", LocalName: "iter", Topic: "topic"},
	{TransformID: "t1", LocalName: "mm", Topic: "topic-mm", Multimap: true},
	{TransformID: "t2", LocalName: "iter", Topic: "topi"},
}}

var (
	sideIter   = sideKey{"t1", "iter", globalWin}
	sideMM     = sideKey{"t1", "mm", globalWin}
	sideOther  = sideKey{"t2", "iter", globalWin}
	sideAbsent = sideKey{"t3", "iter", globalWin}
)

// putSide writes one side input record as the runtime's side input reader
// does: the element under 'S' and, for a multimap (key non-nil), the value
// under 'M'.
func putSide(t testing.TB, b *pebble.Batch, topic string, win []byte, offset uint64, key, value []byte) {
	t.Helper()
	off := binary.BigEndian.AppendUint64(nil, offset)
	if err := b.Set(SideKey('S', topic, win, nil, off), append(bytes.Clone(key), value...), nil); err != nil {
		t.Fatal(err)
	}
	if key != nil {
		if err := b.Set(SideKey('M', topic, win, key, off), value, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func commitBatch(t testing.TB, b *pebble.Batch) {
	t.Helper()
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

func TestSideInputs(t *testing.T) {
	db := memDB(t)
	w1 := intervalWin(t, 0, 1000)
	b := db.NewBatch()
	for _, r := range []struct {
		topic string
		win   []byte
		off   uint64
		value string
	}{
		{"topic", globalWin, 256, "e"}, {"topic", globalWin, 5, "c"}, {"topic", globalWin, 1, "a"},
		{"topic", globalWin, 255, "d"}, {"topic", globalWin, 3, "b"},
		{"topic", w1, 2, "in w1"},
		{"topi", globalWin, 1, "x"},
		{"topic2", globalWin, 1, "y"},
	} {
		putSide(t, b, r.topic, r.win, r.off, nil, str(t, r.value))
	}
	for _, r := range []struct {
		win        []byte
		off        uint64
		key, value string
	}{
		{globalWin, 10, "k1", "v1"}, {globalWin, 11, "k2", "v2"}, {globalWin, 12, "k1", "v3"},
		{globalWin, 13, "kk", "v4"}, {w1, 14, "k1", "v5"}, {globalWin, 15, "a", "v6"},
	} {
		putSide(t, b, "topic-mm", r.win, r.off, str(t, r.key), str(t, r.value))
	}
	commitBatch(t, b)
	for _, cached := range []bool{false, true} {
		var cache *SideCache
		if cached {
			cache = NewSideCache(1 << 20)
		}
		s := NewSideInputs(db, cache, sideStage)
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) { checkSideReads(t, s, w1) })
		if hits, misses, _ := cache.Stats(); cached && (hits != 11 || misses != 11) {
			t.Errorf("cache: %d hits and %d misses, want 11 each (every read twice)", hits, misses)
		}
	}
}

// checkSideReads reads TestSideInputs' store through s, every read twice.
func checkSideReads(t *testing.T, s *SideInputs, w1 []byte) {
	for _, tc := range []struct {
		name string
		key  *fnpb.StateKey
		want []byte
	}{
		{"iterable: by offset", sideIter.iterable(), strs(t, "a", "b", "c", "d", "e")},
		{"iterable: one window", sideKey{"t1", "iter", w1}.iterable(), strs(t, "in w1")},
		{"iterable: an empty window", sideKey{"t1", "iter", intervalWin(t, 0, 999)}.iterable(), nil},
		{"iterable: same local name, other transform", sideOther.iterable(), strs(t, "x")},
		{"iterable of a multimap: the whole elements", sideMM.iterable(), strs(t, "k1", "v1", "k2", "v2", "k1", "v3", "kk", "v4", "a", "v6")},
		{"multimap: one key's values", sideMM.multimap(str(t, "k1")), strs(t, "v1", "v3")},
		{"multimap: another key", sideMM.multimap(str(t, "kk")), strs(t, "v4")},
		{"multimap: an absent key", sideMM.multimap(str(t, "k")), nil},
		{"multimap: one window", sideKey{"t1", "mm", w1}.multimap(str(t, "k1")), strs(t, "v5")},
		{"multimap keys: each once, in store order", sideMM.multimapKeys(), strs(t, "a", "k1", "k2", "kk")},
		{"multimap keys: one window", sideKey{"t1", "mm", w1}.multimapKeys(), strs(t, "k1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 {
				data, next, err := s.Get(context.Background(), tc.key, nil)
				if err != nil {
					t.Fatal(err)
				}
				if next != nil {
					t.Errorf("continuation token %x for a small side input", next)
				}
				if !bytes.Equal(data, tc.want) {
					t.Errorf("got %x, want %x", data, tc.want)
				}
			}
		})
	}
}

func TestSideInputsRefuse(t *testing.T) {
	db := memDB(t)
	b := db.NewBatch()
	putSide(t, b, "topic", globalWin, 1, nil, str(t, "a"))
	commitBatch(t, b)
	s := NewSideInputs(db, NewSideCache(1<<20), sideStage)
	foreign := SideKey('S', "topic", intervalWin(t, 0, 1), nil, binary.BigEndian.AppendUint64(nil, 1))
	for _, tc := range []struct {
		name  string
		key   *fnpb.StateKey
		token []byte
		want  string
	}{
		{"unknown iterable", sideAbsent.iterable(), nil, "transform t3: unknown side input iter"},
		{"unknown local name", sideKey{"t1", "nope", nil}.iterable(), nil, "unknown side input nope"},
		{"multimap of an iterable side input", sideIter.multimap(str(t, "k")), nil, "unknown multimap side input iter"},
		{"multimap keys of an iterable side input", sideIter.multimapKeys(), nil, "unknown multimap side input iter"},
		{"unknown multimap", sideAbsent.multimap(str(t, "k")), nil, "unknown multimap side input"},
		{"unknown multimap keys", sideAbsent.multimapKeys(), nil, "unknown multimap side input"},
		{"a token of another window", sideIter.iterable(), foreign, "does not belong"},
		{"a token of another side input", sideOther.iterable(), SideKey('S', "topic", globalWin, nil, nil), "does not belong"},
		{"user state", userKey{"t1", "s", nil, nil}.bag(), nil, "bag_user_state"},
		{"a runner key", runnerKey(), nil, "runner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.Get(context.Background(), tc.key, tc.token)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
	if err := s.Append(context.Background(), sideIter.iterable(), []byte{1}); err == nil {
		t.Error("Append to a side input succeeded")
	}
}

// TestSideInputPaging: a page ends with the value that brings it to
// sidePageBytes or more, and its token resumes at exactly the next value.
func TestSideInputPaging(t *testing.T) {
	const p = sidePageBytes
	tests := []struct {
		size, count int
		pages       []int // values per page
	}{
		{1, 10, []int{10}},
		{p / 4, 4, []int{4}}, // exactly full, nothing after: no token
		{p / 4, 5, []int{4, 1}},
		{p/4 - 1, 5, []int{5}},
		{p/4 - 1, 6, []int{5, 1}},
		{p / 2, 4, []int{2, 2}},
		{p + 1, 3, []int{1, 1, 1}}, // a value larger than a page is served whole
		{p - 1, 2, []int{2}},
	}
	readers := []struct {
		name string
		key  *fnpb.StateKey
	}{{"iterable", sideIter.iterable()}, {"multimap", sideMM.multimap(str(t, "k"))}}
	for _, tc := range tests {
		for _, r := range readers {
			for _, cacheBytes := range []int{0, 8 * p} {
				t.Run(fmt.Sprintf("%s %d values of %d bytes, cache %d", r.name, tc.count, tc.size, cacheBytes), func(t *testing.T) {
					db := memDB(t)
					b := db.NewBatch()
					for i := 0; i < tc.count; i++ {
						v := bytes.Repeat([]byte{byte('a' + i)}, tc.size)
						putSide(t, b, "topic", globalWin, uint64(i), nil, v)
						putSide(t, b, "topic-mm", globalWin, uint64(i), str(t, "k"), v)
					}
					// Neighbours the last page must not run into.
					putSide(t, b, "topic", intervalWin(t, 0, 1), 0, nil, []byte("other window"))
					putSide(t, b, "topic-mm", globalWin, 0, str(t, "l"), []byte("other key"))
					commitBatch(t, b)
					s := NewSideInputs(db, NewSideCache(cacheBytes), sideStage)
					var token []byte
					next := 0 // the first value the page should hold
					for i, want := range tc.pages {
						data, tok, err := s.Get(context.Background(), r.key, token)
						if err != nil {
							t.Fatalf("page %d: %v", i, err)
						}
						// Asking again with the same token serves the same page.
						again, tok2, err := s.Get(context.Background(), r.key, token)
						if err != nil || !bytes.Equal(again, data) || !bytes.Equal(tok, tok2) {
							t.Fatalf("page %d differs when asked again (%v)", i, err)
						}
						var wantData []byte
						for j := next; j < next+want; j++ {
							wantData = append(wantData, bytes.Repeat([]byte{byte('a' + j)}, tc.size)...)
						}
						if !bytes.Equal(data, wantData) {
							t.Fatalf("page %d: %d bytes starting %q, want %d values from %c", i, len(data), data[:min(len(data), 1)], want, 'a'+next)
						}
						next += want
						if last := i == len(tc.pages)-1; last != (tok == nil) {
							t.Fatalf("page %d of %d: token %x", i, len(tc.pages), tok)
						}
						token = tok
					}
				})
			}
		}
	}
}

// TestSideCache: a cached read is served from memory (the store no longer
// has it: a side input's contents are final before any read); reads of
// different kinds, keys and pages do not share entries; the cache stays
// within its limit, evicting, and keeps no page over a quarter of it.
func TestSideCache(t *testing.T) {
	db := memDB(t)
	b := db.NewBatch()
	putSide(t, b, "topic-mm", globalWin, 1, str(t, "k1"), str(t, "v1"))
	putSide(t, b, "topic-mm", globalWin, 2, str(t, "k2"), str(t, "v2"))
	commitBatch(t, b)
	cache := NewSideCache(64 << 10)
	s := NewSideInputs(db, cache, sideStage)
	uncached := NewSideInputs(db, nil, sideStage)
	get := func(s *SideInputs, key *fnpb.StateKey) []byte {
		t.Helper()
		data, _, err := s.Get(context.Background(), key, nil)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	reads := []struct {
		key  *fnpb.StateKey
		want []byte
	}{
		{sideMM.multimap(str(t, "k1")), strs(t, "v1")},
		{sideMM.multimap(str(t, "k2")), strs(t, "v2")},
		{sideMM.multimapKeys(), strs(t, "k1", "k2")},
		{sideMM.iterable(), strs(t, "k1", "v1", "k2", "v2")},
	}
	for _, r := range reads {
		if got := get(s, r.key); !bytes.Equal(got, r.want) {
			t.Fatalf("first read: %x, want %x", got, r.want)
		}
	}
	// Empty the store: the cache still answers, each read its own.
	if err := db.DeleteRange(SidePrefix, append(bytes.Clone(SidePrefix), 0xFF), nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range reads {
		if got := get(s, r.key); !bytes.Equal(got, r.want) {
			t.Errorf("cached read: %x, want %x", got, r.want)
		}
		if got := get(uncached, r.key); got != nil {
			t.Errorf("uncached read after the delete: %x, want nothing", got)
		}
	}

	// Bounded: many pages of 1 KiB in a 64 KiB cache.
	for i := range 1000 {
		cache.put([]byte(fmt.Sprintf("key %d", i)), sidePage{page: make([]byte, 1024)}, cache.gen)
		if _, _, n := cache.Stats(); n > 64<<10 {
			t.Fatalf("after %d puts the cache holds %d bytes, over its 64 KiB", i+1, n)
		}
	}
	if _, ok, _ := cache.get([]byte("key 999")); !ok {
		t.Error("the last page put is not in the cache")
	}
	cache.put([]byte("big"), sidePage{page: make([]byte, 16<<10)}, cache.gen)
	if _, ok, _ := cache.get([]byte("big")); ok {
		t.Error("a page over a quarter of the cache was kept")
	}
}

// TestSideCacheInvalidate: a write to the side inputs (a late pane, say)
// invalidates what was cached, and a read that began before the write does
// not keep its page.
func TestSideCacheInvalidate(t *testing.T) {
	db := memDB(t)
	b := db.NewBatch()
	putSide(t, b, "topic-mm", globalWin, 1, str(t, "k1"), str(t, "v1"))
	commitBatch(t, b)
	cache := NewSideCache(64 << 10)
	s := NewSideInputs(db, cache, sideStage)
	key := sideMM.multimap(str(t, "k1"))
	read := func(want []byte) {
		t.Helper()
		got, _, err := s.Get(context.Background(), key, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %x (%v), want %x", got, err, want)
		}
	}
	read(strs(t, "v1")) // cached now
	late := db.NewBatch()
	putSide(t, late, "topic-mm", globalWin, 2, str(t, "k1"), str(t, "late"))
	commitBatch(t, late)
	cache.Invalidate() // as the side input reader does after its commit
	read(strs(t, "v1", "late"))

	// A read of the store that began before a write and Invalidate.
	_, _, gen := cache.get([]byte("stale"))
	cache.Invalidate()
	cache.put([]byte("stale"), sidePage{page: []byte("old")}, gen)
	if _, ok, _ := cache.get([]byte("stale")); ok {
		t.Error("a page read before an Invalidate was kept")
	}
}

// Tokens name the side inputs' contents: the same until a write, new after
// one, never another cache's (another instance's), none without a cache.
func TestSideCacheToken(t *testing.T) {
	a, b := NewSideCache(1<<20), NewSideCache(1<<20)
	t0 := a.Token()
	if !bytes.Equal(t0, a.Token()) {
		t.Error("token changed without a write")
	}
	if bytes.Equal(t0, b.Token()) {
		t.Errorf("two caches made the same token %x", t0)
	}
	a.Invalidate()
	if bytes.Equal(t0, a.Token()) {
		t.Errorf("token %x unchanged after a write", t0)
	}
	var none *SideCache
	if tok := none.Token(); tok != nil {
		t.Errorf("nil cache: token %x, want none", tok)
	}
}
