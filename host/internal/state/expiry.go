package state

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Expiry of user state: Beam's garbage collection of a window's state.
//
// A stateful transform's state in window w expires once its stage's input
// watermark passes w's maximum timestamp plus the allowed lateness of the
// input's windowing (translate.Stage.StateExpiry, SetStateExpiry): from
// then on, no element of w arrives that is not late, and the timers of w
// that were due have fired. ExpireState then deletes that state for every
// key. Without it, a streaming job's state over fixed or sliding windows
// (and its changelog, whose keys never repeat) grew for as long as the job
// ran. The global window's state never expires.
//
// Store layout after the task prefix:
//
//	'X' expiry | kind | len transform | transform | len state | state | len win | win → (empty)
//
// one entry per state (kind Bag, Multimap or Ordered, transform, state id)
// and window that had a value appended, under the time the window expires.
// The state's keys continue that scope with the key (user.go), so one range
// holds every key's state of the window.
//
// Invariants:
//   - Every value appended to an expiring transform's state has its
//     scope's entry in the store by the time its cycle commits: Append
//     writes the entry to the same batch, unless this opening of the task
//     wrote it already (User.indexed). ExpireState drops the scopes it
//     deletes from indexed, so a value appended to an expired window (a
//     late element) indexes its scope again, and the next sweep deletes it.
//   - ExpireState runs after the cycle's timers fired (Task.PrepareCommit),
//     with the same watermark: an event-time timer of the window, due at
//     most at its expiry, has fired before the window's state goes.
//   - Nothing expires at the end of time (a watermark at the maximum): the
//     input is complete and the job ends; deleting all of a bounded job's
//     state, key by key, just before its topics are deleted would only cost.

// maxIndexed bounds User.indexed; past it the map starts over (an entry
// dropped only costs writing the index entry again).
const maxIndexed = 1 << 16

// SetStateExpiry makes transform's state expire lateness milliseconds after
// the end of each window (translate.Stage.StateExpiry).
func (u *User) SetStateExpiry(transform string, lateness int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.expiry == nil {
		u.expiry = map[string]int64{}
	}
	u.expiry[transform] = lateness
}

// noteAppend indexes the scope of a value appended to state (kind, transform,
// id) in window win under the window's expiry, if the transform's state
// expires. Under u.mu.
func (u *User) noteAppend(kind Kind, transform, id string, win []byte) error {
	lateness, ok := u.expiry[transform]
	if !ok || len(win) == 0 { // not expiring, or the global window (fast)
		return nil
	}
	// kind | scope, built in a reused buffer: the lookup, on every
	// append, allocates nothing.
	u.scratch = append(u.scratch[:0], byte(kind))
	u.scratch = AppendLP(AppendLP(AppendLP(u.scratch, []byte(transform)), []byte(id)), win)
	if u.indexed[string(u.scratch)] {
		return nil
	}
	cached := string(u.scratch)
	scope := []byte(cached[1:])
	expiry, expires, err := WindowExpiry(win, lateness)
	if err != nil {
		return fmt.Errorf("transform %s: state %s: %w", transform, id, err)
	}
	if !expires {
		return nil
	}
	k := u.key(StateExpiry, binary.BigEndian.AppendUint64(nil, EventTimeBits(expiry)), []byte{byte(kind)}, scope)
	if err := u.batch.Set(k, nil, nil); err != nil {
		return err
	}
	u.expiryFloor.Wrote(expiry)
	if u.indexed == nil || len(u.indexed) >= maxIndexed {
		u.indexed = map[string]bool{}
	}
	u.indexed[cached] = true
	return nil
}

// windowExpired reports whether transform's state in window win expired by
// watermark wm (never at the end of time, see above). Under u.mu.
func (u *User) windowExpired(transform string, win []byte, wm int64) bool {
	lateness, ok := u.expiry[transform]
	if !ok || wm >= maxTime {
		return false
	}
	expiry, expires, err := WindowExpiry(win, lateness)
	return err == nil && expires && expiry < wm
}

// WindowExpiry is the time state in the encoded window win expires:
// lateness after the window's maximum timestamp, the state gone once a
// watermark is past it. expires is false for a window whose state never
// expires: the global window (encoded as nothing), or one that would
// expire at the end of time (see above).
func WindowExpiry(win []byte, lateness int64) (expiry int64, expires bool, err error) {
	if len(win) == 0 {
		return 0, false, nil
	}
	if len(win) < 8 {
		return 0, false, fmt.Errorf("window encoding of %d bytes", len(win))
	}
	// An interval window starts with its end (exclusive) in Beam's
	// event-time encoding.
	maxTs := int64(binary.BigEndian.Uint64(win)^(1<<63)) - 1
	if maxTs >= maxTime-lateness {
		return 0, false, nil
	}
	return maxTs + lateness, true, nil
}

// ExpireState deletes the state of every window that expired before
// watermark wm, for every key, and returns how many scopes (state and
// window) it deleted.
func (u *User) ExpireState(wm int64) (int, error) {
	if wm >= maxTime {
		return 0, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	prefix := u.key(StateExpiry)
	upper := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), EventTimeBits(wm))
	lower := u.expiryFloor.Lower(prefix)
	if bytes.Compare(lower, upper) >= 0 {
		return 0, nil
	}
	it, err := u.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	var entries [][]byte
	for it.First(); it.Valid(); it.Next() {
		entries = append(entries, append([]byte(nil), it.Key()...))
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	for _, e := range entries {
		rest := e[len(prefix):]
		if len(rest) < 9 {
			return 0, fmt.Errorf("corrupt state expiry entry %x", e)
		}
		kind, scope := Kind(rest[8]), rest[9:]
		lo := u.key(kind, scope)
		if err := DeleteRange(u.batch, lo, PrefixEnd(lo)); err != nil {
			return 0, err
		}
		if err := u.batch.Delete(e, nil); err != nil {
			return 0, err
		}
		delete(u.indexed, string(kind)+string(scope))
	}
	u.expiryFloor.Raise(wm)
	return len(entries), nil
}
