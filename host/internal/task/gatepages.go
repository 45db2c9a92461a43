package task

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
)

// Paged groups parked for side inputs.
//
// A stage reading a windowed GroupByKey's panes in pages (Stage.PagedGroups)
// may also read side inputs that the root does not wait for: its input is
// gated (gate.go). A pane ready as it comes goes on at once, with the
// cycle's token. One that must wait outlives the cycle, which its token
// does not (gbkpages.go), so it is parked alone, and all its values are
// copied into the store first:
//
//	GatePages | stage | seq | n  →  values, concatenated as a page holds them
//
// seq is the parked piece's sequence number (its Gate key ends in it), n
// counts the copy's pieces, each at most about maxStoredValue bytes (one
// changelog record): first the values that travelled inline, then the
// pages. The parked element carries none inline, and a parked token,
// "gated/" and seq, in place of the cycle's token.
//
// Invariants:
//   - Both tokens have pageTokenLen bytes, so one replaces the other in
//     place and the element's encoding stays valid.
//   - A parked piece with a parked token holds exactly that element, and
//     its copy is deleted in the batch of the cycle that releases it: the
//     pages are read from the DB, which keeps the copy until that cycle
//     commits (a copy in the DB was written by an earlier, committed cycle).
//   - A piece is released in a later cycle than the one that parked it
//     (groupPages.parked), even when its side inputs are ready before this
//     one ends: until it commits, the copy is only in the batch, which the
//     pages never read.
//   - The copy holds the values once each: redeliveries were skipped while
//     copying, so the copy is read as a range run, which skips nothing.

// pageTokenLen is the length of a paged group's token, live or parked.
const pageTokenLen = 14

var (
	parkedTokenPrefix = []byte("gated/")
	// pagedTail precedes the token at the end of a paged group: the
	// iterable's varint(-1) and the token's length (pagedIterable).
	pagedTail = append(binary.AppendUvarint(nil, math.MaxUint64), pageTokenLen)
)

// pagedGroupAt returns where the iterable of values and the token of the
// paged group wv (a grouped element of a GroupByKey's output) start in
// wv.Raw, or -1s when its values are all inline. Only pagedIterable writes
// an iterable of unknown length into a root's output, and it always ends
// it with a token.
func pagedGroupAt(codec *shuffle.ElementCodec, wv shuffle.WindowedValue) (iterAt, tokenAt int, err error) {
	_, v, err := codec.SplitKV(wv.Elem)
	if err != nil {
		return 0, 0, err
	}
	if len(v) < 4 || binary.BigEndian.Uint32(v) != math.MaxUint32 {
		return -1, -1, nil
	}
	at := len(wv.Raw) - pageTokenLen
	if at-len(pagedTail) < len(wv.Raw)-len(v)+4 || !bytes.Equal(wv.Raw[at-len(pagedTail):at], pagedTail) {
		return 0, 0, errors.New("a group of unknown length that does not end in a runner token")
	}
	return len(wv.Raw) - len(v), at, nil
}

// parkPaged parks the paged group raw (its iterable at iterAt, its token at
// tokenAt, its timestamp ts, its windows' largest maximum timestamp maxWin)
// alone, with all its values copied into the store, those inline too, so
// that the parked element stays small (one changelog record holds it).
func (t *Task) parkPaged(sr *stageRun, codec *shuffle.ElementCodec, raw []byte, iterAt, tokenAt int, ts, maxWin int64) error {
	seq := t.nextGateSeq()
	var n uint64
	err := t.groupValues(codec, raw, iterAt, tokenAt, func(data []byte) error {
		k := t.key(state.GatePages, []byte{sr.idx}, seq, binary.BigEndian.AppendUint64(nil, n))
		n++
		return t.batch.Set(k, data, nil)
	})
	if err != nil {
		return fmt.Errorf("parking a group: %w", err)
	}
	t.pages.park(seq)
	return t.parkAt(sr, seq, withToken(raw, iterAt, append(slices.Clone(parkedTokenPrefix), seq...)), 1, ts, maxWin, true)
}

// groupValues passes every value of the paged group raw (its iterable at
// iterAt, its token at tokenAt) to put, in order, in pieces of whole values
// of at most about maxStoredValue bytes (one changelog record): first those
// inline, then the pages. put must not keep its argument.
func (t *Task) groupValues(codec *shuffle.ElementCodec, raw []byte, iterAt, tokenAt int, put func([]byte) error) error {
	// The inline values: int32(-1), then at most one block (a varint
	// count and the values) before pagedTail.
	inline := raw[iterAt+4 : tokenAt-len(pagedTail)]
	if len(inline) > 0 {
		_, l := binary.Uvarint(inline)
		if l <= 0 {
			return errors.New("a bad count of inline values")
		}
		inline = inline[l:]
	}
	for start, off := 0, 0; off < len(inline); {
		l, err := codec.GroupedValueLength(inline[off:])
		if err != nil {
			return fmt.Errorf("inline value: %w", err)
		}
		off += l
		if off-start >= maxStoredValue || off == len(inline) {
			if err := put(inline[start:off]); err != nil {
				return err
			}
			start = off
		}
	}
	live := raw[tokenAt:]
	var cont []byte
	for {
		data, next, err := t.pages.pageUpTo(live, cont, maxStoredValue)
		if err != nil {
			return err
		}
		if len(data) > 0 {
			if err := put(data); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		cont = next
	}
}

// withToken is the paged group raw (its iterable at iterAt) with no value
// inline and token (pageTokenLen bytes) for all of them.
func withToken(raw []byte, iterAt int, token []byte) []byte {
	el := make([]byte, 0, iterAt+4+len(pagedTail)+pageTokenLen)
	el = append(el, raw[:iterAt]...)
	el = binary.BigEndian.AppendUint32(el, math.MaxUint32)
	el = append(el, pagedTail...)
	return append(el, token...)
}

// unparkPaged returns data (a released piece of sr's parked input) with a
// parked group given a token served in this cycle, and deletes the group's
// copy from the batch.
func (t *Task) unparkPaged(sr *stageRun, codec *shuffle.ElementCodec, data []byte) ([]byte, error) {
	wv, err := codec.Next(data)
	if err != nil {
		return nil, fmt.Errorf("parked input: %w", err)
	}
	_, at, err := pagedGroupAt(codec, wv)
	if err != nil {
		return nil, fmt.Errorf("parked input: %w", err)
	}
	if at < 0 {
		return data, nil // whole elements, none paged
	}
	token := wv.Raw[at:]
	if !bytes.HasPrefix(token, parkedTokenPrefix) || len(wv.Raw) != len(data) {
		return nil, fmt.Errorf("parked input: a group with token %q in a piece of %d bytes, not a parked group alone", token, len(data))
	}
	lower := t.key(state.GatePages, []byte{sr.idx}, token[len(parkedTokenPrefix):])
	upper := state.PrefixEnd(lower)
	if err := state.DeleteRange(t.batch, lower, upper); err != nil {
		return nil, err
	}
	copy(wv.Raw[at:], t.pages.add(&pagedGroup{last: -1, runs: []pagedRun{{lower: lower, upper: upper}}}))
	return data, nil
}
