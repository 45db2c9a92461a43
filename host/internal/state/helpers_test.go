package state

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ksrunner/ksrunner/harness"
)

// Shared helpers of the package's tests: an in-memory store, Fn API state
// keys, and values encoded with the Beam Go SDK's own coders, so the tests
// check compatibility with what an SDK sends rather than the code against
// itself.

// quietLogger drops Pebble's informational messages (one per store opened),
// keeping its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf(format, args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	pebble.DefaultLogger.Fatalf(format, args...)
}

// memDB opens an empty Pebble store in memory, closed when the test ends.
func memDB(t testing.TB) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return db
}

// testPrefix is the task prefix the user store tests use; otherPrefix is a
// neighbouring task's.
var (
	testPrefix  = TaskPrefix(3, 7)
	otherPrefix = TaskPrefix(3, 8)
)

func newUser(t testing.TB, db *pebble.DB, prefix []byte) *User {
	t.Helper()
	u, err := NewUser(db, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// encodeWith encodes v with the SDK's element encoder of c.
func encodeWith(t testing.TB, c *coder.Coder, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := exec.MakeElementEncoder(c).Encode(&exec.FullValue{Elm: v}, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// str is s in Beam's string_utf8 coder (nested: a varint length, then s).
func str(t testing.TB, s string) []byte { return encodeWith(t, coder.NewString(), s) }

// strs is the concatenation of the encodings of ss, as the state API sends
// and returns several values.
func strs(t testing.TB, ss ...string) []byte {
	var b []byte
	for _, s := range ss {
		b = append(b, str(t, s)...)
	}
	return b
}

// intervalWin is the interval window [start, end) in Beam's window coder.
func intervalWin(t testing.TB, start, end int64) []byte {
	t.Helper()
	var b bytes.Buffer
	w := window.IntervalWindow{Start: mtime.FromMilliseconds(start), End: mtime.FromMilliseconds(end)}
	if err := exec.MakeWindowEncoder(coder.NewIntervalWindow()).EncodeSingle(w, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// userKey names one user state cell in the tests.
type userKey struct {
	transform, state string
	win, key         []byte
}

func (k userKey) bag() *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_BagUserState_{BagUserState: &fnpb.StateKey_BagUserState{
		TransformId: k.transform, UserStateId: k.state, Window: k.win, Key: k.key}}}
}

func (k userKey) multimapKeys() *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_MultimapKeysUserState_{MultimapKeysUserState: &fnpb.StateKey_MultimapKeysUserState{
		TransformId: k.transform, UserStateId: k.state, Window: k.win, Key: k.key}}}
}

func (k userKey) multimap(mapKey []byte) *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_MultimapUserState_{MultimapUserState: &fnpb.StateKey_MultimapUserState{
		TransformId: k.transform, UserStateId: k.state, Window: k.win, Key: k.key, MapKey: mapKey}}}
}

func (k userKey) ordered(start, end int64) *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_OrderedListUserState_{OrderedListUserState: &fnpb.StateKey_OrderedListUserState{
		TransformId: k.transform, UserStateId: k.state, Window: k.win, Key: k.key,
		Range: &fnpb.OrderedListRange{Start: start, End: end}}}}
}

// sideKey names one side input of a stage in the tests.
type sideKey struct {
	transform, id string
	win           []byte
}

func (k sideKey) iterable() *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_IterableSideInput_{IterableSideInput: &fnpb.StateKey_IterableSideInput{
		TransformId: k.transform, SideInputId: k.id, Window: k.win}}}
}

func (k sideKey) multimap(key []byte) *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_MultimapSideInput_{MultimapSideInput: &fnpb.StateKey_MultimapSideInput{
		TransformId: k.transform, SideInputId: k.id, Window: k.win, Key: key}}}
}

func (k sideKey) multimapKeys() *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_MultimapKeysSideInput_{MultimapKeysSideInput: &fnpb.StateKey_MultimapKeysSideInput{
		TransformId: k.transform, SideInputId: k.id, Window: k.win}}}
}

// runnerKey is a state key type neither store serves.
func runnerKey() *fnpb.StateKey {
	return &fnpb.StateKey{Type: &fnpb.StateKey_Runner_{Runner: &fnpb.StateKey_Runner{Key: []byte("r")}}}
}

// mustGet reads key whole (every page) and fails the test on an error.
func mustGet(t testing.TB, h harness.StateHandler, key *fnpb.StateKey) []byte {
	t.Helper()
	var out, token []byte
	for {
		data, next, err := h.Get(context.Background(), key, token)
		if err != nil {
			t.Fatalf("Get(%v): %v", key, err)
		}
		out = append(out, data...)
		if next == nil {
			return out
		}
		token = next
	}
}

func mustAppend(t testing.TB, h harness.StateHandler, key *fnpb.StateKey, data []byte) {
	t.Helper()
	if err := h.Append(context.Background(), key, data); err != nil {
		t.Fatalf("Append(%v): %v", key, err)
	}
}

func mustClear(t testing.TB, h harness.StateHandler, key *fnpb.StateKey) {
	t.Helper()
	if err := h.Clear(context.Background(), key); err != nil {
		t.Fatalf("Clear(%v): %v", key, err)
	}
}

// storeKeys lists the keys of db (committed state) in [lower, upper).
func storeKeys(t testing.TB, r pebble.Reader, lower, upper []byte) [][]byte {
	t.Helper()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.Fatal(err)
	}
	var keys [][]byte
	for it.First(); it.Valid(); it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// globalWin is the global window in Beam's window coder (no bytes).
var globalWin = []byte{}
