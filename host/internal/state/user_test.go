package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/harness"
)

// cells are user state cells that differ from base in exactly one part of
// the key (and a few whose parts only concatenate alike), so a test can
// check that writing or clearing one leaves its neighbours alone.
func cells(t testing.TB) (base userKey, neighbours map[string]userKey) {
	w1, w2 := intervalWin(t, 0, 1000), intervalWin(t, 1000, 2000)
	base = userKey{"t1", "s1", w1, str(t, "k1")}
	return base, map[string]userKey{
		"other transform": {"t2", "s1", w1, str(t, "k1")},
		"other state":     {"t1", "s2", w1, str(t, "k1")},
		"other window":    {"t1", "s1", w2, str(t, "k1")},
		"other key":       {"t1", "s1", w1, str(t, "k2")},
		"longer key":      {"t1", "s1", w1, str(t, "k10")},
		// "t" + "1s1" concatenates like "t1" + "s1": the length prefixes
		// keep them apart.
		"shifted ids": {"t", "1s1", w1, str(t, "k1")},
	}
}

// bagAppend is one Append of data to the bag of k.
type bagAppend struct {
	k    userKey
	data []byte
}

func TestBagAppendGet(t *testing.T) {
	base, nb := cells(t)
	other := nb["other key"]
	tests := []struct {
		name            string
		appends         []bagAppend
		want, wantOther []byte
	}{
		{name: "empty bag reads nothing"},
		{
			name:    "values come back in append order",
			appends: []bagAppend{{base, str(t, "b")}, {base, str(t, "a")}, {base, str(t, "c")}},
			want:    strs(t, "b", "a", "c"),
		},
		{
			name:    "one append of several values",
			appends: []bagAppend{{base, strs(t, "x", "y")}, {base, str(t, "z")}},
			want:    strs(t, "x", "y", "z"),
		},
		{
			name:      "interleaved cells keep their own values",
			appends:   []bagAppend{{base, str(t, "1")}, {other, str(t, "2")}, {base, str(t, "3")}, {other, str(t, "4")}},
			want:      strs(t, "1", "3"),
			wantOther: strs(t, "2", "4"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewStageHandler(newUser(t, memDB(t), testPrefix), nil, nil)
			for _, a := range tc.appends {
				mustAppend(t, h, a.k.bag(), a.data)
			}
			if got := mustGet(t, h, base.bag()); !bytes.Equal(got, tc.want) {
				t.Errorf("bag = %x, want %x", got, tc.want)
			}
			if got := mustGet(t, h, other.bag()); !bytes.Equal(got, tc.wantOther) {
				t.Errorf("neighbouring bag = %x, want %x", got, tc.wantOther)
			}
		})
	}
}

func TestMultimapUserState(t *testing.T) {
	base, nb := cells(t)
	h := NewStageHandler(newUser(t, memDB(t), testPrefix), nil, nil)
	// Map keys chosen so that their store order (by length-prefixed
	// encoding) differs from the order they were first written in.
	for _, a := range []struct{ mk, v string }{
		{"aa", "1"}, {"b", "2"}, {"aa", "3"}, {"c", "4"}, {"b", "5"}, {"aa", "6"},
	} {
		mustAppend(t, h, base.multimap(str(t, a.mk)), str(t, a.v))
	}
	mustAppend(t, h, nb["other key"].multimap(str(t, "z")), str(t, "9"))
	for _, tc := range []struct {
		name string
		key  *fnpb.StateKey
		want []byte
	}{
		{"values of one map key, in append order", base.multimap(str(t, "aa")), strs(t, "1", "3", "6")},
		{"values of another map key", base.multimap(str(t, "b")), strs(t, "2", "5")},
		{"an absent map key", base.multimap(str(t, "a")), nil},
		{"keys: each once, in store order", base.multimapKeys(), strs(t, "b", "c", "aa")},
		{"keys of another user key", nb["other key"].multimapKeys(), strs(t, "z")},
		{"keys of an empty multimap", nb["other state"].multimapKeys(), nil},
		{"a bag of the same ids is another store", base.bag(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustGet(t, h, tc.key); !bytes.Equal(got, tc.want) {
				t.Errorf("got %x, want %x", got, tc.want)
			}
		})
	}
}

// clearFixture fills a bag, a multimap and an ordered list of base and a
// bag of each neighbour, and returns the reads to check with their expected
// contents.
func clearFixture(t *testing.T, h *StageHandler) (reads map[string]*fnpb.StateKey, want map[string][]byte) {
	t.Helper()
	base, nb := cells(t)
	reads, want = map[string]*fnpb.StateKey{}, map[string][]byte{}
	put := func(name string, key, read *fnpb.StateKey, data []byte) {
		mustAppend(t, h, key, data)
		reads[name] = read
		want[name] = append(want[name], data...)
	}
	put("bag", base.bag(), base.bag(), strs(t, "b1", "b2"))
	for name, k := range nb {
		put(name, k.bag(), k.bag(), str(t, name))
	}
	put("mm a", base.multimap(str(t, "a")), base.multimap(str(t, "a")), strs(t, "a1", "a2"))
	put("mm b", base.multimap(str(t, "b")), base.multimap(str(t, "b")), str(t, "b1"))
	reads["mm keys"], want["mm keys"] = base.multimapKeys(), strs(t, "a", "b")
	put("mm other key", nb["other key"].multimap(str(t, "a")), nb["other key"].multimap(str(t, "a")), str(t, "o1"))
	put("ordered", base.ordered(0, 0), base.ordered(-100, 100), orderedEntries(t, entry{-5, "m"}, entry{0, "n"}, entry{7, "o"}))
	return reads, want
}

func TestClearRemovesExactlyItsKeys(t *testing.T) {
	base, nb := cells(t)
	tests := []struct {
		name  string
		clear *fnpb.StateKey
		after map[string][]byte // reads that change
	}{
		{"bag", base.bag(), map[string][]byte{"bag": nil}},
		{"a neighbouring bag", nb["longer key"].bag(), map[string][]byte{"longer key": nil}},
		{"an empty bag", userKey{"t9", "s9", nil, nil}.bag(), nil},
		{"one map key", base.multimap(str(t, "a")), map[string][]byte{"mm a": nil, "mm keys": str(t, "b")}},
		{"a whole multimap", base.multimapKeys(), map[string][]byte{"mm a": nil, "mm b": nil, "mm keys": nil}},
		{"an ordered list range", base.ordered(-5, 7), map[string][]byte{"ordered": orderedEntries(t, entry{7, "o"})}},
		{"an empty ordered list range", base.ordered(1, 7), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := memDB(t)
			u := newUser(t, db, testPrefix)
			h := NewStageHandler(u, nil, testOrdered(t))
			reads, want := clearFixture(t, h)
			// Half the state committed, half still in the batch: Clear must
			// remove both.
			if err := u.Commit(); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, h, base.bag(), str(t, "b3"))
			want["bag"] = append(want["bag"], str(t, "b3")...)
			mustClear(t, h, tc.clear)
			for name, v := range tc.after {
				want[name] = v
			}
			check := func(when string, h *StageHandler) {
				for name, key := range reads {
					if got := mustGet(t, h, key); !bytes.Equal(got, want[name]) {
						t.Errorf("%s: %s = %x, want %x", when, name, got, want[name])
					}
				}
			}
			check("before commit", h)
			if err := u.Commit(); err != nil {
				t.Fatal(err)
			}
			check("after commit", NewStageHandler(newUser(t, db, testPrefix), nil, testOrdered(t)))
		})
	}
}

// TestClearLeavesOtherTasks: a task's Clear never reaches the committed
// state of the neighbouring task with the same state ids.
func TestClearLeavesOtherTasks(t *testing.T) {
	db := memDB(t)
	base, _ := cells(t)
	mine, theirs := newUser(t, db, testPrefix), newUser(t, db, otherPrefix)
	hm, ht := NewStageHandler(mine, nil, nil), NewStageHandler(theirs, nil, nil)
	mustAppend(t, ht, base.bag(), str(t, "theirs"))
	mustAppend(t, hm, base.bag(), str(t, "mine"))
	for _, u := range []*User{mine, theirs} {
		if err := u.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	mustClear(t, hm, base.bag())
	if err := mine.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, NewStageHandler(newUser(t, db, otherPrefix), nil, nil), base.bag()); !bytes.Equal(got, str(t, "theirs")) {
		t.Errorf("the other task's bag = %x after this task cleared its own", got)
	}
	if got := mustGet(t, hm, base.bag()); got != nil {
		t.Errorf("cleared bag = %x", got)
	}
}

// seqInStore is the sequence number committed for prefix, 0 if none.
func seqInStore(t *testing.T, db *pebble.DB, prefix []byte) uint64 {
	t.Helper()
	v, closer, err := db.Get(Key(prefix, Seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if len(v) != 8 {
		t.Fatalf("sequence value %x, want 8 bytes", v)
	}
	return binary.BigEndian.Uint64(v)
}

func TestCommitAbortAndSequence(t *testing.T) {
	base, _ := cells(t)
	bag := base.bag()
	type step struct {
		appendVals []string
		end        string // "commit", "abort" or "" (the batch stays open)
	}
	tests := []struct {
		name    string
		steps   []step
		want    []string // the bag read by a fresh NewUser afterwards
		wantSeq uint64   // committed sequence number
	}{
		{"nothing is written before a commit", []step{{[]string{"a"}, ""}}, nil, 0},
		{"a commit persists", []step{{[]string{"a", "b"}, "commit"}}, []string{"a", "b"}, 2},
		{"an abort drops the cycle", []step{{[]string{"a"}, "abort"}}, nil, 0},
		{"an abort drops only the uncommitted cycle", []step{{[]string{"a"}, "commit"}, {[]string{"b", "c"}, "abort"}}, []string{"a"}, 1},
		{
			// A store reopened after a commit continues the sequence: values
			// appended then come after, and do not overwrite, the old ones.
			"the sequence survives a reopen",
			[]step{{[]string{"a", "b"}, "commit"}, {[]string{"c"}, "commit"}, {[]string{"d"}, "commit"}},
			[]string{"a", "b", "c", "d"}, 4,
		},
		{
			"an aborted cycle's sequence numbers are reused after a reopen",
			[]step{{[]string{"a"}, "commit"}, {[]string{"x", "y"}, "abort"}, {[]string{"b"}, "commit"}},
			[]string{"a", "b"}, 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := memDB(t)
			for _, s := range tc.steps {
				// Every step is a new owner of the task, as after a restart.
				u := newUser(t, db, testPrefix)
				h := NewStageHandler(u, nil, nil)
				for _, v := range s.appendVals {
					mustAppend(t, h, bag, str(t, v))
				}
				switch s.end {
				case "commit":
					if err := u.Commit(); err != nil {
						t.Fatal(err)
					}
				case "abort":
					u.Abort()
				}
			}
			if got, want := mustGet(t, NewStageHandler(newUser(t, db, testPrefix), nil, nil), bag), strs(t, tc.want...); !bytes.Equal(got, want) {
				t.Errorf("bag after reopening = %x, want %x", got, want)
			}
			if got := seqInStore(t, db, testPrefix); got != tc.wantSeq {
				t.Errorf("committed sequence = %d, want %d", got, tc.wantSeq)
			}
		})
	}
}

// TestCommitKeepsServing: after a commit the store goes on with a new batch
// that sees the committed state and the next cycle's writes.
func TestCommitKeepsServing(t *testing.T) {
	base, _ := cells(t)
	db := memDB(t)
	u := newUser(t, db, testPrefix)
	h := NewStageHandler(u, nil, nil)
	for i, v := range []string{"a", "b", "c"} {
		mustAppend(t, h, base.bag(), str(t, v))
		if err := u.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := seqInStore(t, db, testPrefix); got != uint64(i+1) {
			t.Errorf("after commit %d: sequence %d", i+1, got)
		}
	}
	if got, want := mustGet(t, h, base.bag()), strs(t, "a", "b", "c"); !bytes.Equal(got, want) {
		t.Errorf("bag = %x, want %x", got, want)
	}
}

// TestChanges: the cycle's batch handed to the changelog holds the pending
// writes and the current sequence number, and fn's error comes back.
func TestChanges(t *testing.T) {
	base, _ := cells(t)
	db := memDB(t)
	u := newUser(t, db, testPrefix)
	h := NewStageHandler(u, nil, nil)
	mustAppend(t, h, base.bag(), strs(t, "a"))
	mustAppend(t, h, base.bag(), strs(t, "b"))
	var keys [][]byte
	var seq []byte
	err := u.Changes(func(b *pebble.Batch) error {
		keys = storeKeys(t, b, testPrefix, PrefixEnd(testPrefix))
		v, closer, err := b.Get(Key(testPrefix, Seq))
		if err != nil {
			return err
		}
		seq = append([]byte(nil), v...)
		return closer.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := binary.BigEndian.AppendUint64(nil, 2); !bytes.Equal(seq, want) {
		t.Errorf("sequence in the batch = %x, want %x", seq, want)
	}
	// The sequence number and the two bag values, in the documented layout.
	bag := Key(testPrefix, Bag, LP([]byte(base.transform), []byte(base.state), base.win, base.key))
	want := [][]byte{Key(testPrefix, Seq), binary.BigEndian.AppendUint64(bytes.Clone(bag), 1), binary.BigEndian.AppendUint64(bytes.Clone(bag), 2)}
	if !slices.EqualFunc(keys, want, bytes.Equal) {
		t.Errorf("batch keys %x, want %x", keys, want)
	}
	if got := seqInStore(t, db, testPrefix); got != 0 {
		t.Errorf("Changes committed the batch: sequence %d in the store", got)
	}
	boom := errors.New("boom")
	if err := u.Changes(func(*pebble.Batch) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Changes = %v, want fn's error", err)
	}
}

// fakeSide is a side input handler that answers every Get with the side
// input's id and the token it was given.
type fakeSide struct{ harness.UnsupportedState }

func (fakeSide) Get(_ context.Context, key *fnpb.StateKey, token []byte) ([]byte, []byte, error) {
	return []byte("side:" + key.GetIterableSideInput().GetSideInputId()), append([]byte("next:"), token...), nil
}

func TestStageHandlerForwardsSideInputs(t *testing.T) {
	side := sideKey{"t1", "si", nil}.iterable()
	for _, tc := range []struct {
		name string
		user *User
	}{{"with user state", newUser(t, memDB(t), testPrefix)}, {"without user state", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewStageHandler(tc.user, fakeSide{}, nil)
			data, next, err := h.Get(context.Background(), side, []byte("tok"))
			if err != nil || string(data) != "side:si" || string(next) != "next:tok" {
				t.Errorf("Get = %q, %q, %v; want the side handler's answer", data, next, err)
			}
		})
	}
}

// TestStageHandlerWithoutUserState: a stage without user state refuses user
// state requests, naming the key, instead of failing inside the handler.
func TestStageHandlerWithoutUserState(t *testing.T) {
	base, _ := cells(t)
	h := NewStageHandler(nil, nil, nil)
	ctx := context.Background()
	for _, key := range []*fnpb.StateKey{base.bag(), base.multimapKeys(), base.ordered(0, 1)} {
		if _, _, err := h.Get(ctx, key, nil); err == nil || !strings.Contains(err.Error(), "user_state") {
			t.Errorf("Get(%v) = %v, want an error naming the user state", key, err)
		}
		if err := h.Append(ctx, key, str(t, "x")); err == nil {
			t.Errorf("Append(%v) succeeded without a user store", key)
		}
		if err := h.Clear(ctx, key); err == nil {
			t.Errorf("Clear(%v) succeeded without a user store", key)
		}
	}
}

func TestStageHandlerRefuses(t *testing.T) {
	base, _ := cells(t)
	h := NewStageHandler(newUser(t, memDB(t), testPrefix), nil, testOrdered(t))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"Get of a side input without side inputs", func() error { _, _, err := h.Get(ctx, sideKey{"t1", "si", nil}.iterable(), nil); return err }(), "iterable_side_input"},
		{"Get of a runner key", func() error { _, _, err := h.Get(ctx, runnerKey(), nil); return err }(), "runner"},
		{"Append to a runner key", h.Append(ctx, runnerKey(), []byte{1}), "runner"},
		{"Append to the keys of a multimap", h.Append(ctx, base.multimapKeys(), str(t, "k")), "multimap_keys_user_state"},
		{"Clear of a side input", h.Clear(ctx, sideKey{"t1", "si", nil}.iterable()), "iterable_side_input"},
		{"Append to an unknown ordered list", h.Append(ctx, userKey{"t1", "nope", nil, nil}.ordered(0, 1), orderedEntries(t, entry{1, "x"})), "unknown ordered list state nope"},
		{"Append of a bad ordered list timestamp", h.Append(ctx, base.ordered(0, 1), []byte{0x80}), "bad timestamp"},
		{"Append of a truncated ordered list element", h.Append(ctx, base.ordered(0, 1), append(orderedEntries(t, entry{1, "x"}), 2, 5, 'a')), "ordered list state s1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", tc.err, tc.want)
			}
		})
	}
}

// TestConcurrentRequests: the Fn API state service, the timer output and the
// task's timer firing share one store; under -race this checks they do so
// under its lock, and no write is lost.
func TestConcurrentRequests(t *testing.T) {
	base, nb := cells(t)
	u := newUser(t, memDB(t), testPrefix)
	h := NewStageHandler(u, nil, nil)
	const n = 50
	var wg sync.WaitGroup
	for _, k := range []userKey{base, nb["other key"], nb["other window"]} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; i < n; i++ {
				if err := h.Append(ctx, k.bag(), []byte{byte(i)}); err != nil {
					t.Error(err)
				}
				if _, _, err := h.Get(ctx, k.bag(), nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if _, err := u.DueTimers(maxTime, 0); err != nil {
				t.Error(err)
			}
			if _, err := u.TimerHold(); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i)
	}
	for _, k := range []userKey{base, nb["other key"], nb["other window"]} {
		if got := mustGet(t, h, k.bag()); !bytes.Equal(got, want) {
			t.Errorf("bag %x = %x, want %x", k.key, got, want)
		}
	}
}

// A bag of several MB is read in pages of about userPageBytes, each a run
// of whole values, that together are the bag in append order; a
// continuation token of another cell is refused.
func TestBagPaging(t *testing.T) {
	base, nb := cells(t)
	h := NewStageHandler(newUser(t, memDB(t), testPrefix), nil, nil)
	var want []byte
	for i := range 40 {
		v := str(t, strings.Repeat(string(rune('a'+i%26)), 100<<10))
		mustAppend(t, h, base.bag(), v)
		want = append(want, v...)
	}
	mustAppend(t, h, nb["other key"].bag(), str(t, "x"))
	var got, token []byte
	pages := 0
	for {
		data, next, err := h.Get(context.Background(), base.bag(), token)
		if err != nil {
			t.Fatal(err)
		}
		if pages++; len(data) > userPageBytes+(101<<10) {
			t.Errorf("page %d of %d bytes", pages, len(data))
		}
		got = append(got, data...)
		if next == nil {
			break
		}
		token = next
	}
	if !bytes.Equal(got, want) {
		t.Errorf("bag read in %d pages: %d bytes, want %d", pages, len(got), len(want))
	}
	if pages < 3 {
		t.Errorf("a bag of %d bytes read in %d pages", len(want), pages)
	}
	if _, _, err := h.Get(context.Background(), nb["other key"].bag(), token); err == nil {
		t.Error("another bag's continuation token was accepted")
	}
}

// A bag cleared and written again, as a value state is at every write,
// reads exactly what came after its last clear: within a cycle, across
// commits, paged, with its neighbours untouched, and from a store opened
// again (the task reopened: its clears' floors start over).
func TestBagClearAndRewrite(t *testing.T) {
	base, nb := cells(t)
	db := memDB(t)
	u := newUser(t, db, testPrefix)
	h := NewStageHandler(u, nil, nil)
	bag := base.bag()
	for _, k := range nb {
		mustAppend(t, h, k.bag(), str(t, "n"))
	}
	check := func(what string, want []byte) {
		t.Helper()
		if got := mustGet(t, h, bag); !bytes.Equal(got, want) {
			if len(got) > 64 || len(want) > 64 {
				t.Errorf("%s: read %d bytes, want %d", what, len(got), len(want))
				return
			}
			t.Errorf("%s: read %x, want %x", what, got, want)
		}
	}
	mustAppend(t, h, bag, strs(t, "a", "b"))
	mustClear(t, h, bag)
	check("cleared", nil)
	mustAppend(t, h, bag, str(t, "c"))
	check("written after a clear", strs(t, "c"))
	for i := range 100 { // a value state written 100 times
		mustClear(t, h, bag)
		mustAppend(t, h, bag, str(t, fmt.Sprint(i)))
	}
	check("the last of 100 writes", strs(t, "99"))
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, h, bag, str(t, "d"))
	check("appended after the commit", strs(t, "99", "d"))
	mustClear(t, h, bag)
	big := str(t, strings.Repeat("x", 400<<10))
	var want []byte
	for range 4 {
		mustAppend(t, h, bag, big)
		want = append(want, big...)
	}
	check("paged after a clear", want)
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	h = NewStageHandler(newUser(t, db, testPrefix), nil, nil)
	check("the store opened again", want)
	mustClear(t, h, bag)
	mustAppend(t, h, bag, str(t, "e"))
	check("opened again, cleared and written", strs(t, "e"))
	for name, k := range nb {
		if got := mustGet(t, h, k.bag()); !bytes.Equal(got, str(t, "n")) {
			t.Errorf("%s: read %x after the clears of its neighbour", name, got)
		}
	}
}

// One map key's values of a multimap, put again and again (a map state's
// Put is a clear and an append), read exactly the last put; the other map
// keys and the key listing are untouched.
func TestMultimapRewrite(t *testing.T) {
	base, _ := cells(t)
	h := NewStageHandler(newUser(t, memDB(t), testPrefix), nil, nil)
	m1, m2 := base.multimap(str(t, "m1")), base.multimap(str(t, "m2"))
	mustAppend(t, h, m2, str(t, "other"))
	for i := range 50 {
		mustClear(t, h, m1)
		mustAppend(t, h, m1, str(t, fmt.Sprint(i)))
	}
	if got := mustGet(t, h, m1); !bytes.Equal(got, str(t, "49")) {
		t.Errorf("m1 after 50 puts: %x, want the last", got)
	}
	if got := mustGet(t, h, m2); !bytes.Equal(got, str(t, "other")) {
		t.Errorf("m2: %x", got)
	}
	if got, want := mustGet(t, h, base.multimapKeys()), strs(t, "m1", "m2"); !bytes.Equal(got, want) {
		t.Errorf("keys %x, want %x", got, want)
	}
	mustClear(t, h, base.multimapKeys())
	mustAppend(t, h, m1, str(t, "again"))
	if got := mustGet(t, h, m1); !bytes.Equal(got, str(t, "again")) {
		t.Errorf("m1 after clearing the map and a put: %x", got)
	}
	if got := mustGet(t, h, m2); got != nil {
		t.Errorf("m2 after clearing the map: %x", got)
	}
}

// Ordered list ranges and multimap key lists of several MB are read in
// pages of about userPageBytes, each whole entries (whole map keys), that
// together are what one read returns: the range in order, each map key
// once. A token is refused by a read it did not come from.
func TestOrderedAndMultimapKeysPaging(t *testing.T) {
	base, nb := cells(t)
	const n, size = 40, 100 << 10
	letter := func(i int) string { return strings.Repeat(string(rune('a'+i%26))+string(rune('a'+i/26)), size/2) }
	tests := []struct {
		name  string
		fill  func(h *StageHandler)
		read  *fnpb.StateKey
		want  []byte
		other *fnpb.StateKey // a read the tokens must not be good for
	}{
		{
			name: "ordered list, whole range",
			fill: func(h *StageHandler) {
				for i := n - 1; i >= 0; i-- { // appended in reverse, read sorted
					mustAppend(t, h, base.ordered(0, 0), orderedEntries(t, entry{int64(i), letter(i)}))
				}
			},
			read: base.ordered(0, n),
			want: func() []byte {
				var es []entry
				for i := range n {
					es = append(es, entry{int64(i), letter(i)})
				}
				return orderedEntries(t, es...)
			}(),
			other: base.ordered(n, 2*n),
		},
		{
			name: "ordered list, part of the range",
			fill: func(h *StageHandler) {
				for i := range n {
					mustAppend(t, h, base.ordered(0, 0), orderedEntries(t, entry{int64(i), letter(i)}))
				}
			},
			read: base.ordered(5, 35),
			want: func() []byte {
				var es []entry
				for i := 5; i < 35; i++ {
					es = append(es, entry{int64(i), letter(i)})
				}
				return orderedEntries(t, es...)
			}(),
			other: nb["other key"].ordered(0, n),
		},
		{
			name: "multimap keys",
			fill: func(h *StageHandler) {
				for i := range n {
					// Two values each: a key is listed once, in one page.
					mustAppend(t, h, base.multimap(str(t, letter(i))), str(t, "v1"))
					mustAppend(t, h, base.multimap(str(t, letter(i))), str(t, "v2"))
				}
			},
			read: base.multimapKeys(),
			want: func() []byte {
				var ks []string
				for i := range n {
					ks = append(ks, letter(i))
				}
				slices.Sort(ks) // keys of one length: store order is byte order
				return strs(t, ks...)
			}(),
			other: nb["other key"].multimapKeys(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewStageHandler(newUser(t, memDB(t), testPrefix), nil, testOrdered(t))
			tc.fill(h)
			var got, token, firstToken []byte
			pages := 0
			for {
				data, next, err := h.Get(context.Background(), tc.read, token)
				if err != nil {
					t.Fatal(err)
				}
				if pages++; len(data) > userPageBytes+size+16 {
					t.Errorf("page %d of %d bytes", pages, len(data))
				}
				got = append(got, data...)
				if next == nil {
					break
				}
				if firstToken == nil {
					firstToken = next
				}
				token = next
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("read in %d pages: %d bytes, want %d", pages, len(got), len(tc.want))
			}
			if pages < 3 {
				t.Errorf("%d bytes read in %d pages", len(tc.want), pages)
			}
			if _, _, err := h.Get(context.Background(), tc.other, firstToken); err == nil {
				t.Errorf("a token of %v accepted by a read of %v", tc.read, tc.other)
			}
		})
	}
}
