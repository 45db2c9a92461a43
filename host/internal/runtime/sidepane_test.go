package runtime

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate/windowing"
)

// sideKVCodec is the codec of windowed KV<string, varint> elements in the
// global window.
func sideKVCodec(t *testing.T) *shuffle.ElementCodec {
	t.Helper()
	spec := func(urn string, comps ...string) *pipepb.Coder {
		return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: comps}
	}
	c, err := shuffle.NewElementCodec(map[string]*pipepb.Coder{
		"wv":  spec("beam:coder:windowed_value:v1", "kv", "gw"),
		"kv":  spec("beam:coder:kv:v1", "str", "int"),
		"str": spec("beam:coder:string_utf8:v1"),
		"int": spec("beam:coder:varint:v1"),
		"gw":  spec("beam:coder:global_window:v1"),
	}, "wv")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sideKV encodes KV<key, v> in the global window in pane index pane.
func sideKV(t *testing.T, key string, v int64, pane int64) []byte {
	t.Helper()
	b := binary.BigEndian.AppendUint64(nil, 1<<63) // timestamp 0
	b = binary.BigEndian.AppendUint32(b, 1)        // one window: the global one
	p, err := windowing.EncodePane(typex.PaneInfo{Timing: typex.PaneEarly, IsFirst: pane == 0, Index: pane, NonSpeculativeIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, p...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return binary.AppendUvarint(b, uint64(v))
}

// sideContents reads back the side topic's iterable (every element, in
// order, as "key=v") and multimap entries of the global window.
func sideContents(t *testing.T, db *pebble.DB, topic string) (iter, multimap []string) {
	t.Helper()
	read := func(store byte) []string {
		lower := state.SideKey(store, topic, nil, nil, nil)
		upper := append(slices.Clone(lower), 0xFF, 0xFF)
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var out []string
		for it.First(); it.Valid(); it.Next() {
			out = append(out, fmt.Sprintf("%x", it.Value()))
		}
		return out
	}
	return read('S'), read('M')
}

// encodedKV is how sideContents shows KV<key, v>'s iterable entry.
func encodedKV(key string, v int64) string {
	b := binary.AppendUvarint(nil, uint64(len(key)))
	b = append(b, key...)
	return fmt.Sprintf("%x", binary.AppendUvarint(b, uint64(v)))
}

// A side topic whose PCollection may fire several panes keeps, per key of
// its KV elements, the elements of the latest pane: a later pane replaces
// the key's earlier one, elements of the same pane add up, an older pane
// is dropped, and other keys keep theirs. Without pane groups (the default
// trigger) every element stays.
func TestSideInputLatestPane(t *testing.T) {
	for _, latest := range []bool{true, false} {
		t.Run(fmt.Sprintf("latest=%v", latest), func(t *testing.T) {
			db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: pebbleLogger{slog.New(slog.NewTextHandler(io.Discard, nil))}})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			st := &sideTopic{name: "sums-side", codec: sideKVCodec(t), multimap: true}
			if latest {
				st.panes = map[string]*latestPane{}
			}
			r := &sideInputReader{db: db}
			values := [][]byte{
				sideKV(t, "a", 1, 0),
				sideKV(t, "b", 10, 0),
				sideKV(t, "a", 3, 1), // a's second firing replaces its first
				sideKV(t, "a", 4, 1), // the same pane: kept beside it
				sideKV(t, "a", 2, 0), // an older pane of a: dropped
				sideKV(t, "b", 30, 2),
			}
			for i, v := range values {
				b := db.NewBatch()
				if err := r.applyValue(b, st, v, int64(i)); err != nil {
					t.Fatal(err)
				}
				if err := b.Commit(pebble.NoSync); err != nil {
					t.Fatal(err)
				}
			}
			iter, mm := sideContents(t, db, st.name)
			want := []string{encodedKV("a", 3), encodedKV("a", 4), encodedKV("b", 30)}
			if !latest {
				want = []string{encodedKV("a", 1), encodedKV("b", 10), encodedKV("a", 3), encodedKV("a", 4), encodedKV("a", 2), encodedKV("b", 30)}
			}
			if !slices.Equal(iter, want) {
				t.Errorf("iterable entries %v, want %v", iter, want)
			}
			if len(mm) != len(want) {
				t.Errorf("%d multimap entries %v, want %d (one per iterable entry)", len(mm), mm, len(want))
			}
		})
	}
}
