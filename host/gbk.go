package host

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/cockroachdb/pebble/v2"
)

// The group-by-key root buffers every value under its key and window in the
// task's store, and sets an end-of-window timer per key and window. When the
// input watermark passes a window's maximum timestamp, the timer fires: the
// values are read back in arrival order, emitted as one KV<K, Iterable<V>>
// with the ON_TIME pane at the end of the window, and deleted.
//
// Only the default trigger with non-merging windows reaches here (translate
// refuses the rest), so each key and window fires exactly once.

// endOfGlobalWindow is the global window's maximum timestamp.
var endOfGlobalWindow = int64(mtime.EndOfGlobalWindowTime)

// windowMaxTimestamp reads a window's maximum timestamp from its encoding:
// the global window encodes as nothing, an interval window starts with its
// maximum timestamp in Beam's event-time encoding.
func windowMaxTimestamp(win []byte) (int64, error) {
	switch {
	case len(win) == 0:
		return endOfGlobalWindow, nil
	case len(win) >= 8:
		return int64(binary.BigEndian.Uint64(win) ^ (1 << 63)), nil
	}
	return 0, fmt.Errorf("window encoding of %d bytes", len(win))
}

func appendLP(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func readLP(b []byte) (p, rest []byte, err error) {
	n, l := binary.Uvarint(b)
	if l <= 0 || uint64(len(b)-l) < n {
		return nil, nil, fmt.Errorf("corrupt state key")
	}
	return b[l : l+int(n)], b[l+int(n):], nil
}

// buffer stores one GBK input record (an encoded windowed KV). The record's
// offset makes the value's key unique and redelivery idempotent.
//
// A key and window's end-of-window timer is set once per state batch, on its
// first value (gbkScratch.timers), rather than once per value.
func (t *task) buffer(raw []byte, offset int64) error {
	codec := t.inst.codecs[t.sub.Root.Output+"#input"]
	if codec == nil {
		codec = t.inst.codecs[t.inst.cfg.topics.byName[t.sub.Input].PCollection]
	}
	wv, err := codec.Next(raw)
	if err != nil {
		return err
	}
	key, value, err := codec.SplitKV(wv.Elem)
	if err != nil {
		return err
	}
	windows, err := codec.SplitWindows(wv)
	if err != nil {
		return err
	}
	g := &t.gbk
	if g.batch != t.batch {
		g.batch = t.batch
		clear(g.timers)
	}
	for _, win := range windows {
		maxTs, err := windowMaxTimestamp(win)
		if err != nil {
			return err
		}
		// Batch.Set copies key and value, so the scratch key is reused.
		k := append(g.key[:0], t.prefix...)
		k = append(k, storeBuffer)
		kwAt := len(k)
		k = appendLP(appendLP(k, key), win)
		kw := k[kwAt:]
		k = binary.BigEndian.AppendUint64(k, uint64(offset))
		g.key = k
		if err := t.batch.Set(k, value, nil); err != nil {
			return err
		}
		if _, ok := g.timers[string(kw)]; ok {
			continue
		}
		if g.timers == nil {
			g.timers = map[string]struct{}{}
		}
		g.timers[string(kw)] = struct{}{}
		tk := append(g.timerKey[:0], t.prefix...)
		tk = append(tk, storeTimer)
		tk = binary.BigEndian.AppendUint64(tk, eventTimeBits(maxTs))
		tk = append(tk, kw...)
		g.timerKey = tk
		if err := t.batch.Set(tk, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// gbkScratch is a group-by-key task's per-value working state.
type gbkScratch struct {
	key, timerKey []byte // reused state keys
	// timers holds the key+window (the timer key's suffix) of every timer
	// set in batch, the task's state batch it was filled for: cleared when
	// the task has a new batch, and a fired timer leaves it. (Should Pebble
	// hand a pooled batch back with the same pointer, every entry is still
	// a timer that exists, committed; only an aborted batch loses timers,
	// and an aborted task is dropped.)
	timers map[string]struct{}
	batch  *pebble.Batch
}

// earliestTimer is the smallest pending end-of-window timer, or the maximum
// watermark when none is pending: the hold on the output watermark.
func (t *task) earliestTimer() (int64, error) {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(storeTimer), UpperBound: t.key(storeTimer + 1)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.First() {
		return maxWatermark, it.Error()
	}
	k := it.Key()[len(t.prefix)+1:]
	return int64(binary.BigEndian.Uint64(k) ^ (1 << 63)), nil
}

// fire emits every key and window whose maximum timestamp the input
// watermark has passed.
func (t *task) fire(inputWM int64) error {
	upper := t.key(storeTimer, binary.BigEndian.AppendUint64(nil, eventTimeBits(inputWM)))
	timers, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(storeTimer), UpperBound: upper})
	if err != nil {
		return err
	}
	type due struct{ timerKey, kw []byte }
	var fired []due
	for timers.First(); timers.Valid(); timers.Next() {
		k := timers.Key()
		fired = append(fired, due{timerKey: append([]byte(nil), k...), kw: append([]byte(nil), k[len(t.prefix)+1+8:]...)})
	}
	if err := timers.Close(); err != nil {
		return err
	}
	for _, d := range fired {
		delete(t.gbk.timers, string(d.kw))
		if err := t.emitGroup(d.kw); err != nil {
			return err
		}
		if err := t.batch.Delete(d.timerKey, nil); err != nil {
			return err
		}
	}
	return nil
}

// emitGroup emits KV<key, [values...]> for one key and window and clears it.
func (t *task) emitGroup(kw []byte) error {
	key, rest, err := readLP(kw)
	if err != nil {
		return err
	}
	win, _, err := readLP(rest)
	if err != nil {
		return err
	}
	maxTs, err := windowMaxTimestamp(win)
	if err != nil {
		return err
	}
	lower := t.key(storeBuffer, kw)
	upper := append(append([]byte(nil), lower...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint64(make([]byte, 0, 256), eventTimeBits(maxTs))
	out = binary.BigEndian.AppendUint32(out, 1)
	out = append(out, win...)
	out = append(out, 0x07) // pane: first, last, ON_TIME, index 0
	out = append(out, key...)
	countAt := len(out)
	out = append(out, 0, 0, 0, 0)
	n := 0
	for it.First(); it.Valid(); it.Next() {
		if len(it.Key()) != len(lower)+8 {
			continue // a longer key sharing this prefix
		}
		out = append(out, it.Value()...)
		n++
	}
	if err := it.Close(); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(out[countAt:], uint32(n))
	if err := t.batch.DeleteRange(lower, upper, nil); err != nil {
		return err
	}
	return t.route(t.sub.Root.Output, out)
}

// eventTimeBits is Beam's event-time encoding of ms: shifted so that the
// big-endian bytes sort like the timestamps.
func eventTimeBits(ms int64) uint64 { return uint64(ms) ^ (1 << 63) }
