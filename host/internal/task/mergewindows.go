package task

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ksrunner/ksrunner/host/internal/executor"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/ksrunner/ksrunner/translate/windowing"
)

// A GroupByKey over a custom merging WindowFn (translate.Root.MergeWindows)
// cannot merge windows in the host: the SDK that defined the WindowFn does,
// through the merge stage (the Fn API's merge_windows transform). A round
// trip per element would be far too slow, so records wait in pending and
// flushPending merges them together, as Beam's ReduceFnRunner does per
// bundle: one merge_windows bundle with one element per key (the key's
// active windows and the new ones), then every waiting element is added to
// the window its own window merged into. The task flushes before anything
// that could observe the state or change the input watermark (watermark and
// processing-time records, prepareCommit, the end of a poll batch), so
// elements are never judged late against a watermark they preceded.

// pendingElement is a record of the input waiting for its windows to merge.
type pendingElement struct {
	key, value []byte
	ts         mtime.Time
	windows    [][]byte // encoded; nil once dropped as late
	offset     int64
}

func cloneAll(bs [][]byte) [][]byte {
	out := make([][]byte, len(bs))
	for i, b := range bs {
		out[i] = bytes.Clone(b)
	}
	return out
}

// keyWindows is one key's windows in a merge request.
type keyWindows struct {
	key     []byte
	windows []windowing.Window
	enc     map[windowing.Window][]byte
}

// flushPending merges the windows of the pending records in the SDK and
// adds the records to their merged windows.
func (g *windowedGBK) flushPending(ctx context.Context) error {
	if len(g.pending) == 0 {
		return nil
	}
	pending := g.pending
	g.pending = nil
	ev := g.t.ev
	now, sync := ev.now(), ev.syncTime
	if ev.synthetic {
		sync = now
	}
	in := mtime.Time(g.t.inputWatermark())

	byKey := map[string]*keyWindows{}
	var keys []*keyWindows
	for i := range pending {
		p := &pending[i]
		for j, wb := range p.windows {
			w, err := g.s.WindowCoder.Decode(wb)
			if err != nil {
				return err
			}
			if g.s.IsDroppable(w, in) {
				g.droppedLate++
				p.windows[j] = nil
				continue
			}
			kw := byKey[string(p.key)]
			if kw == nil {
				active, enc, err := g.activeWindows(p.key)
				if err != nil {
					return err
				}
				kw = &keyWindows{key: p.key, windows: active, enc: enc}
				byKey[string(p.key)] = kw
				keys = append(keys, kw)
			}
			if _, ok := kw.enc[w]; !ok {
				kw.windows = append(kw.windows, w)
				kw.enc[w] = wb
			}
		}
	}
	merges, err := g.mergeInSDK(ctx, keys)
	if err != nil {
		return err
	}
	into := map[string]map[windowing.Window]windowing.Window{}
	for _, kw := range keys {
		if into[string(kw.key)], err = g.applyMerges(kw.key, merges[string(kw.key)], kw.enc, now, sync); err != nil {
			return err
		}
	}
	for i := range pending {
		p := &pending[i]
		kw := byKey[string(p.key)]
		for j, wb := range p.windows {
			if wb == nil {
				continue
			}
			w, err := g.s.WindowCoder.Decode(wb)
			if err != nil {
				return err
			}
			if to, ok := into[string(p.key)][w]; ok {
				w, wb = to, kw.enc[to]
			}
			if err := g.addToWindow(p.key, p.value, p.ts, p.offset, j, len(p.windows), w, wb, now, sync); err != nil {
				return err
			}
		}
	}
	return nil
}

// mergeInSDK runs one merge_windows bundle over the keys' windows and
// returns the merges of each key (by key), with the windows the SDK
// returned decoded and their encodings added to the key's enc.
func (g *windowedGBK) mergeInSDK(ctx context.Context, keys []*keyWindows) (map[string][]windowing.Merge, error) {
	ms := g.t.sub.Root.MergeWindows
	var req []byte
	nonces := map[string]*keyWindows{}
	for _, kw := range keys {
		if len(kw.windows) < 2 {
			continue // nothing to merge with
		}
		elem := binary.AppendUvarint(nil, uint64(len(kw.key)))
		elem = append(elem, kw.key...)
		nonces[string(elem)] = kw
		elem = binary.BigEndian.AppendUint32(elem, uint32(len(kw.windows)))
		for _, w := range kw.windows {
			elem = append(elem, kw.enc[w]...)
		}
		req = append(req, globalWindowedHeader...)
		req = append(req, elem...)
	}
	out := map[string][]windowing.Merge{}
	if len(nonces) == 0 {
		return out, nil
	}
	var resp []byte
	b, err := g.merger.StartBundle(ctx, func(pcoll string, data []byte) error {
		resp = append(resp, data...)
		return nil
	}, executor.BundleIO{})
	if err != nil {
		return nil, fmt.Errorf("group-by-key %s: merging windows in stage %s: %w", g.t.sub.Root.TransformID, ms.ID, err)
	}
	if err := b.Process(req); err != nil {
		b.Finish()
		return nil, fmt.Errorf("group-by-key %s: merging windows in stage %s: %w", g.t.sub.Root.TransformID, ms.ID, err)
	}
	if _, err := b.Finish(); err != nil {
		return nil, fmt.Errorf("group-by-key %s: merging windows in stage %s: %w", g.t.sub.Root.TransformID, ms.ID, err)
	}
	for len(resp) > 0 {
		wv, err := g.mergeOut.Next(resp)
		if err != nil {
			return nil, fmt.Errorf("group-by-key %s: merge_windows output: %w", g.t.sub.Root.TransformID, err)
		}
		resp = resp[len(wv.Raw):]
		nonce, value, err := g.mergeOut.SplitKV(wv.Elem)
		if err != nil {
			return nil, fmt.Errorf("group-by-key %s: merge_windows output: %w", g.t.sub.Root.TransformID, err)
		}
		kw := nonces[string(nonce)]
		if kw == nil {
			return nil, fmt.Errorf("group-by-key %s: merge_windows output for a key that was not sent", g.t.sub.Root.TransformID)
		}
		merges, err := g.parseMerges(value, kw)
		if err != nil {
			return nil, fmt.Errorf("group-by-key %s: merge_windows output: %w", g.t.sub.Root.TransformID, err)
		}
		out[string(kw.key)] = append(out[string(kw.key)], merges...)
	}
	return out, nil
}

// parseMerges parses KV<Iterable<unmerged window>, Iterable<KV<result,
// Iterable<merged window>>>>. The merged windows must be ones that were
// sent; a result that is new gets its encoding recorded in kw.enc.
func (g *windowedGBK) parseMerges(b []byte, kw *keyWindows) ([]windowing.Merge, error) {
	_, b, err := splitIterable(b, g.winLen)
	if err != nil {
		return nil, err
	}
	mergeLen := func(b []byte) (int, error) {
		l, err := g.winLen(b)
		if err != nil {
			return 0, err
		}
		_, rest, err := splitIterable(b[l:], g.winLen)
		return len(b) - len(rest), err
	}
	results, b, err := splitIterable(b, mergeLen)
	if err != nil {
		return nil, err
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the merge results", len(b))
	}
	var merges []windowing.Merge
	for _, r := range results {
		l, _ := g.winLen(r)
		to, err := g.s.WindowCoder.Decode(r[:l])
		if err != nil {
			return nil, err
		}
		if _, ok := kw.enc[to]; !ok {
			kw.enc[to] = bytes.Clone(r[:l])
		}
		froms, _, err := splitIterable(r[l:], g.winLen)
		if err != nil {
			return nil, err
		}
		m := windowing.Merge{To: to}
		for _, fb := range froms {
			from, err := g.s.WindowCoder.Decode(fb)
			if err != nil {
				return nil, err
			}
			if _, ok := kw.enc[from]; !ok {
				return nil, fmt.Errorf("merged window %v was not one of the key's windows", from)
			}
			m.From = append(m.From, from)
		}
		if len(m.From) > 0 {
			merges = append(merges, m)
		}
	}
	return merges, nil
}

// globalWindowedHeader is the windowed-value header of a merge_windows
// input element: the minimum timestamp, the global window, no firing.
var globalWindowedHeader = impulseElement[:len(impulseElement)-1]

var errIterable = errors.New("truncated iterable")

// nextChunk reads a chunk count of an iterable of unknown length (0 ends it).
func nextChunk(b []byte) ([]byte, int, error) {
	c, m := binary.Uvarint(b)
	if m <= 0 {
		return nil, 0, errIterable
	}
	return b[m:], int(c), nil
}

// splitIterable splits an encoded iterable into its encoded elements and
// returns the bytes after it.
func splitIterable(b []byte, elemLen func([]byte) (int, error)) ([][]byte, []byte, error) {
	if len(b) < 4 {
		return nil, nil, errIterable
	}
	n := int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	var out [][]byte
	take := func(k int) error {
		for ; k > 0; k-- {
			l, err := elemLen(b)
			if err != nil {
				return err
			}
			out = append(out, b[:l])
			b = b[l:]
		}
		return nil
	}
	if n >= 0 {
		return out, b, take(int(n))
	}
	if n != -1 {
		return nil, nil, fmt.Errorf("iterable count %d", n)
	}
	for {
		var c int
		var err error
		if b, c, err = nextChunk(b); err != nil {
			return nil, nil, err
		}
		if c == 0 {
			return out, b, nil
		}
		if err := take(c); err != nil {
			return nil, nil, err
		}
	}
}
