package task

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/harness"
)

// Paged groups: a GroupByKey's group is never whole in memory.
//
// Where translate allows it (Root.PagedGroups: every reader of the root's
// output is a harness stage that consumes its input at once, and its
// descriptor declares the iterable state-backed), emitGroup puts the
// values of a group inline only up to inlineGroupBytes. The rest of the
// group stays in the store, and the element carries a token instead, in
// the Fn API's encoding of an iterable of unknown length:
//
//	int32(-1) varint(n) value×n varint(-1) varint(len(token)) token
//
// The SDK reads the rest through the state API (StateKey.Runner with the
// token), page by page with continuation tokens, each page at most about
// groupPageBytes, and may read it again from the start (a re-iterable).
//
// Invariants:
//   - A paged group's runs are readable until the cycle ends. emitGroup
//     deletes them in the task's batch, as for any group, so the pages are
//     not read through the batch: a run already committed is read from the
//     DB, which changes only when the cycle commits; a run written in this
//     cycle (only in the batch) is copied when the group is emitted, at most
//     one cycle's input of that key.
//   - Every bundle of the cycle finishes before the cycle commits or aborts
//     (bundles never straddle a commit), the readers never split their
//     input (translate), and a reader that parks its input for side inputs
//     copies the rest of a parked group into the store and parks it with a
//     token of its own (gatepages.go), so no element holding a token
//     outlives the cycle: CommitState and Abort drop every paged group.
//   - Pages skip values delivered twice exactly as the inline part does
//     (both read runs with appendRun: a value at or below the last offset
//     taken is a redelivery), carrying the last offset in the continuation
//     token.
//   - The pages are served from the SDK's goroutine while the task's goes
//     on: they read only the DB and the copies, never the batch.

// inlineGroupBytes is how much of a paged group's values travel inline.
const inlineGroupBytes = 1 << 20

// groupPageBytes is the size a page of a paged group stops growing at.
const groupPageBytes = 1 << 20

// groupPages are the paged groups of the task's current cycle.
type groupPages struct {
	db     *pebble.DB
	mu     sync.Mutex
	seq    uint64
	groups map[string]*pagedGroup // by token
	// parked holds the sequence numbers of the groups parked in this
	// cycle (gatepages.go).
	parked map[string]bool
}

// pagedGroup is the part of a group that is served in pages.
type pagedGroup struct {
	runs []pagedRun
	last int64 // the offset of the last value sent inline
}

// pagedRun is one stored run of a paged group, or (windowed panes, whose
// values are stored one a key) a range of the DB's keys, each holding one
// value.
type pagedRun struct {
	key   []byte // its store key, when the DB has it
	data  []byte // else the run itself
	first int64  // the offset of its first value

	// A range run: every DB key in [lower, upper) is a value of the group,
	// in order (paneRuns checked the DB has no others there).
	lower, upper []byte
}

// add registers a group's remaining runs and returns its token.
func (p *groupPages) add(g *pagedGroup) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	token := binary.BigEndian.AppendUint64([]byte("group/"), p.seq) // pageTokenLen bytes
	if p.groups == nil {
		p.groups = map[string]*pagedGroup{}
	}
	p.groups[string(token)] = g
	return token
}

// park records that a paged group was parked in this cycle under seq.
func (p *groupPages) park(seq []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked == nil {
		p.parked = map[string]bool{}
	}
	p.parked[string(seq)] = true
}

// parkedNow reports whether the parked input under seq is a paged group
// parked in this cycle.
func (p *groupPages) parkedNow(seq []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parked[string(seq)]
}

// reset drops every paged group: the cycle ended.
func (p *groupPages) reset() {
	p.mu.Lock()
	p.groups, p.parked = nil, nil
	p.mu.Unlock()
}

// page returns the values of the group named by token from the position
// in cont (nil: the start), and the continuation token of the next page
// (nil: none).
func (p *groupPages) page(token, cont []byte) (data, next []byte, err error) {
	return p.pageUpTo(token, cont, groupPageBytes)
}

// pageUpTo is page with pages that stop growing at limit bytes.
func (p *groupPages) pageUpTo(token, cont []byte, limit int) (data, next []byte, err error) {
	p.mu.Lock()
	g := p.groups[string(token)]
	p.mu.Unlock()
	if g == nil {
		return nil, nil, fmt.Errorf("runner state %q: no such group in this cycle", token)
	}
	run, pos, last, from := 0, 0, g.last, []byte(nil)
	if len(cont) > 0 {
		if run, pos, last, from, err = decodeGroupCont(cont); err != nil {
			return nil, nil, err
		}
	}
	for ; run < len(g.runs); run, pos, from = run+1, 0, nil {
		r := g.runs[run]
		if r.upper != nil {
			var more []byte
			if data, more, err = p.appendRange(data, r, from, limit); err != nil {
				return nil, nil, fmt.Errorf("runner state %q: %w", token, err)
			}
			if more != nil {
				return data, encodeGroupCont(run, 0, last, more), nil
			}
			continue
		}
		b := r.data
		if b == nil {
			v, closer, err := p.db.Get(r.key)
			if err != nil {
				return nil, nil, fmt.Errorf("runner state %q: run %x: %w", token, r.key, err)
			}
			b = v
			defer closer.Close()
		}
		if pos > len(b) {
			return nil, nil, fmt.Errorf("runner state %q: continuation at byte %d of a run of %d", token, pos, len(b))
		}
		var full bool
		data, _, pos, full, err = appendRun(data, b, r.first, pos, &last, limit)
		if err != nil {
			return nil, nil, err
		}
		if full && (pos < len(b) || run+1 < len(g.runs)) {
			if pos == len(b) {
				run, pos = run+1, 0
			}
			return data, encodeGroupCont(run, pos, last, nil), nil
		}
	}
	return data, nil, nil
}

// appendRange appends the values of a range run from key from on (nil:
// its start) to data while they fit in limit bytes (at least one key's: a
// key holds one value of a pane, or whole values of a parked group); more
// is the key to go on from (nil: the range is done).
func (p *groupPages) appendRange(data []byte, r pagedRun, from []byte, limit int) (_, more []byte, err error) {
	lower := r.lower
	if from != nil {
		if bytes.Compare(from, r.lower) < 0 || bytes.Compare(from, r.upper) >= 0 {
			return nil, nil, errors.New("continuation key outside its run")
		}
		lower = from
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: r.upper})
	if err != nil {
		return nil, nil, err
	}
	for it.First(); it.Valid(); it.Next() {
		if len(data) > 0 && len(data)+len(it.Value()) > limit {
			more = slices.Clone(it.Key())
			break
		}
		data = append(data, it.Value()...)
	}
	if err := it.Close(); err != nil {
		return nil, nil, err
	}
	return data, more, nil
}

// A continuation token: the run, the byte position in it, the offset of
// the last value sent and, in a range run, the key to go on from.
func encodeGroupCont(run, pos int, last int64, from []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(run))
	b = binary.AppendUvarint(b, uint64(pos))
	b = binary.AppendVarint(b, last)
	b = binary.AppendUvarint(b, uint64(len(from)))
	return append(b, from...)
}

func decodeGroupCont(b []byte) (run, pos int, last int64, from []byte, err error) {
	bad := errors.New("bad continuation token of a paged group")
	r, n := binary.Uvarint(b)
	if n <= 0 || r > math.MaxInt32 {
		return 0, 0, 0, nil, bad
	}
	b = b[n:]
	pu, n := binary.Uvarint(b)
	if n <= 0 || pu > math.MaxInt32 {
		return 0, 0, 0, nil, bad
	}
	b = b[n:]
	if last, n = binary.Varint(b); n <= 0 {
		return 0, 0, 0, nil, bad
	}
	b = b[n:]
	fl, n := binary.Uvarint(b)
	if n <= 0 || fl != uint64(len(b)-n) {
		return 0, 0, 0, nil, bad
	}
	if fl > 0 {
		from = b[n:]
	}
	return int(r), int(pu), last, from, nil
}

// pagedIterable rewrites a grouped element whose values end at the end of
// out (the iterable's int32 count at countAt, n values after it) into the
// encoding of an iterable of unknown length whose rest is behind token.
func pagedIterable(out []byte, countAt, n int, token []byte) []byte {
	values := out[countAt+4:]
	res := make([]byte, 0, countAt+4+binary.MaxVarintLen64*3+len(values)+len(token))
	res = append(res, out[:countAt]...)
	res = binary.BigEndian.AppendUint32(res, math.MaxUint32) // int32(-1): chunks follow
	if n > 0 {
		res = binary.AppendUvarint(res, uint64(n))
		res = append(res, values...)
	}
	res = binary.AppendUvarint(res, math.MaxUint64) // varint(-1): the rest is state
	res = binary.AppendUvarint(res, uint64(len(token)))
	return append(res, token...)
}

// pagedState serves the pages of the task's paged groups (StateKey.Runner)
// to a stage reading them, and every other state request from next.
type pagedState struct {
	pages *groupPages
	next  harness.StateHandler // nil: none
}

func (s pagedState) Get(ctx context.Context, key *fnpb.StateKey, token []byte) ([]byte, []byte, error) {
	if r := key.GetRunner(); r != nil {
		return s.pages.page(r.GetKey(), token)
	}
	return s.handler().Get(ctx, key, token)
}

func (s pagedState) Append(ctx context.Context, key *fnpb.StateKey, data []byte) error {
	return s.handler().Append(ctx, key, data)
}

func (s pagedState) Clear(ctx context.Context, key *fnpb.StateKey) error {
	return s.handler().Clear(ctx, key)
}

func (s pagedState) handler() harness.StateHandler {
	if s.next == nil {
		return harness.UnsupportedState{}
	}
	return s.next
}

// pagedRun is the run under store key k (value v, first offset first) of
// a group being paged: its key if the DB has it, else a copy of it.
func (t *Task) pagedRun(k, v []byte, first int64) (pagedRun, error) {
	_, closer, err := t.env.DB.Get(k)
	switch {
	case err == nil:
		closer.Close()
		return pagedRun{key: slices.Clone(k), first: first}, nil
	case errors.Is(err, pebble.ErrNotFound):
		return pagedRun{data: slices.Clone(v), first: first}, nil
	}
	return pagedRun{}, err
}

// paneRuns is the paged rest of a windowed pane: the values from where it
// (an iterator over the task's batch, on the pane's values, bounded above
// by upper) stands to its end, as runs. The batch holds the pane's values
// one a key; those the DB holds too (committed in an earlier cycle) become
// range runs read from the DB, the others (written in this cycle) are
// copied, at most one cycle's input of the pane. A DB key the batch
// deleted (a pane cleared in this cycle) ends a range, so a range never
// reads it.
func paneRuns(db *pebble.DB, it *pebble.Iterator, upper []byte) (*pagedGroup, error) {
	g := &pagedGroup{last: -1}
	dbIt, err := db.NewIter(&pebble.IterOptions{LowerBound: slices.Clone(it.Key()), UpperBound: upper})
	if err != nil {
		return nil, err
	}
	defer dbIt.Close()
	var rng *pagedRun // the range being extended
	var copied *pagedRun
	var seq int64 // offsets of copied values: only ordered, never skipped
	end := func() {
		if rng != nil {
			rng.upper = append(rng.upper, 0) // the key after the last
			g.runs = append(g.runs, *rng)
			rng = nil
		}
		if copied != nil {
			g.runs = append(g.runs, *copied)
			copied = nil
		}
	}
	dbValid := dbIt.First()
	for ; it.Valid(); it.Next() {
		k := it.Key()
		for dbValid && bytes.Compare(dbIt.Key(), k) < 0 {
			end() // a value the batch deleted
			dbValid = dbIt.Next()
		}
		if dbValid && bytes.Equal(dbIt.Key(), k) {
			if copied != nil {
				end()
			}
			if rng == nil {
				rng = &pagedRun{lower: slices.Clone(k)}
			}
			rng.upper = append(rng.upper[:0], k...) // the last key, for now
			dbValid = dbIt.Next()
			continue
		}
		if rng != nil {
			end()
		}
		if copied == nil {
			copied = &pagedRun{data: []byte{}, first: seq}
		}
		copied.data = binary.AppendUvarint(copied.data, uint64(seq-copied.first))
		copied.data = binary.AppendUvarint(copied.data, uint64(len(it.Value())))
		copied.data = append(copied.data, it.Value()...)
		seq++
	}
	end()
	if err := it.Error(); err != nil {
		return nil, err
	}
	return g, dbIt.Error()
}
