package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// User state and timers of stateful stages. A stateful stage reads a topic
// keyed by its input's key, so every key's state and timers live in exactly
// one task. They are written to the task's user batch, which only the Fn API
// state service (one request at a time per worker), the SDK's timer output
// and the task's timer firing touch, under userMu; the batch is applied with
// the task's other state once the commit cycle committed (its changes are in
// the changelog, see changelog.go), like every other write.
//
// Store layout after the task prefix:
//
//	'U' len transform | transform | len state | state | len win | win | len key | key | seq → bag value
//	'V' … same … | len map key | map key | seq                                        → multimap value
//	'Q'                                                     → next seq (8 bytes)
//	'E' domain | fire ts | timer id                         → encoded timer (the index fired by range scans)
//	'R' timer id                                            → domain | fire ts | hold ts (to replace or clear)
//	'X' expiry | kind | len transform | transform | len state | state | len win | win → (empty) (expiry.go)
//
// where timer id = len transform | transform | len family | family | len key
// | key | len win | win | len tag | tag, and domain is 'e' (event time) or
// 'p' (processing time).
//
// (The kinds are declared in keys.go.)

// User is one task's user state and timers store.
type User struct {
	db     *pebble.DB
	prefix []byte
	mu     sync.Mutex
	batch  *pebble.Batch
	seq    uint64
	// due bounds the fire times of the pending timers per domain (0 event
	// time, 1 processing time), so DueTimers does not walk the tombstones
	// of the timers fired before (Floor). A User lives for one opening
	// of its task: an aborted cycle reopens the task, and with it the
	// store, so the floors never cover writes that were dropped.
	due [2]Floor
	// bagFloors holds, per bag (its store prefix; a multimap's values for
	// one map key are a bag too), the sequence number its
	// last Clear deleted up to: every entry of the bag at or below it is
	// deleted, and entries appended since have higher ones (the sequence
	// only grows). Reads and clears of the bag start past it (bagLower)
	// instead of at the prefix, so they do not walk the deleted entries,
	// which stay behind in the batch and then as tombstones in the store.
	// Without it a value state (a bag cleared and appended to at every
	// write) written once per element cost a walk over every earlier
	// write: 0.95 ms an element at 10,000 writes a cycle. It is a cache:
	// an entry dropped (the map past maxBagFloors) only costs that walk
	// again. Like due, it lives for one opening of the task, so it never
	// covers a Clear that an abort dropped.
	bagFloors map[string]uint64
	// expiry maps the transforms whose state expires to the allowed
	// lateness of their windows; indexed holds the scopes (kind and
	// LP(transform, state, window)) whose expiry entry this opening of
	// the task wrote, and expiryFloor bounds the entries' times
	// (expiry.go). Like due, they live for one opening of the task.
	expiry      map[string]int64
	indexed     map[string]bool
	expiryFloor Floor
	scratch     []byte // noteAppend's lookup key
}

// maxBagFloors bounds User.bagFloors; past it the map starts over.
const maxBagFloors = 1 << 16

// bagLower is where a read or clear of the bag under prefix starts: past
// the entries its last Clear deleted (bagFloors). Under u.mu.
func (u *User) bagLower(prefix []byte) []byte {
	f, ok := u.bagFloors[string(prefix)]
	if !ok {
		return prefix
	}
	return binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), f+1)
}

// bagCleared records that the bag under prefix has no entry up to the
// current sequence number. Under u.mu.
func (u *User) bagCleared(prefix []byte) {
	if u.bagFloors == nil || len(u.bagFloors) >= maxBagFloors {
		u.bagFloors = map[string]uint64{}
	}
	u.bagFloors[string(prefix)] = u.seq
}

// dueFloor is the floor of a domain's timers.
func (u *User) dueFloor(domain byte) *Floor {
	if domain == 'e' {
		return &u.due[0]
	}
	return &u.due[1]
}

// NewUser opens the user store of the task whose keys start with prefix.
func NewUser(db *pebble.DB, prefix []byte) (*User, error) {
	u := &User{db: db, prefix: prefix, batch: db.NewIndexedBatch()}
	v, closer, err := u.batch.Get(u.key(Seq))
	if err == nil {
		u.seq = binary.BigEndian.Uint64(v)
		closer.Close()
	} else if err != pebble.ErrNotFound {
		return nil, err
	}
	return u, nil
}

func (u *User) key(kind Kind, parts ...[]byte) []byte { return Key(u.prefix, kind, parts...) }

// Changes calls fn with the cycle's batch, under the store's lock, after
// recording the sequence in it (the sequence is state too: a restored store
// must not reuse it; Commit writes it again, with the same value).
func (u *User) Changes(fn func(*pebble.Batch) error) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.batch.Set(u.key(Seq), binary.BigEndian.AppendUint64(nil, u.seq), nil); err != nil {
		return err
	}
	return fn(u.batch)
}

// Commit applies the user batch; the caller has closed every bundle.
func (u *User) Commit() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.batch.Set(u.key(Seq), binary.BigEndian.AppendUint64(nil, u.seq), nil); err != nil {
		return err
	}
	if err := u.batch.Commit(pebble.NoSync); err != nil {
		return err
	}
	u.batch.Close() // committed: only releases it for reuse
	u.batch = u.db.NewIndexedBatch()
	return nil
}

// Abort drops the cycle's writes.
func (u *User) Abort() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.batch.Close()
}

func (u *User) nextSeq() []byte {
	u.seq++
	return binary.BigEndian.AppendUint64(nil, u.seq)
}

// StageHandler serves one stage's Fn API state requests: user state from the
// task's user store, side inputs from the instance's side input store.
type StageHandler struct {
	user *User // nil: no user state
	side harness.StateHandler
	// ordered splits the values of each ordered list state (by transform,
	// state id) into elements.
	ordered map[[2]string]func([]byte) (int, error)
}

// NewStageHandler serves a stage's user state from user and its side inputs
// from side (either may be nil); ordered splits the values of each ordered
// list state, by (transform id, state id), into elements.
func NewStageHandler(user *User, side harness.StateHandler, ordered map[[2]string]func([]byte) (int, error)) *StageHandler {
	return &StageHandler{user: user, side: side, ordered: ordered}
}

// orderedPrefix is the store prefix of one ordered list state; entries
// continue with the sortable timestamp and a sequence number.
func (s *StageHandler) orderedPrefix(k *fnpb.StateKey_OrderedListUserState) []byte {
	return s.user.key(Ordered, LP([]byte(k.GetTransformId()), []byte(k.GetUserStateId()), k.GetWindow(), k.GetKey()))
}

func (s *StageHandler) orderedRange(k *fnpb.StateKey_OrderedListUserState) (lower, upper []byte) {
	p := s.orderedPrefix(k)
	lower = binary.BigEndian.AppendUint64(append([]byte(nil), p...), EventTimeBits(k.GetRange().GetStart()))
	upper = binary.BigEndian.AppendUint64(append([]byte(nil), p...), EventTimeBits(k.GetRange().GetEnd()))
	return lower, upper
}

func (s *StageHandler) prefix(key *fnpb.StateKey) (store Kind, prefix []byte, keysOnly bool, ok bool) {
	t := s.user
	switch {
	case t == nil:
		return 0, nil, false, false
	case key.GetBagUserState() != nil:
		k := key.GetBagUserState()
		return Bag, t.key(Bag, LP([]byte(k.GetTransformId()), []byte(k.GetUserStateId()), k.GetWindow(), k.GetKey())), false, true
	case key.GetMultimapKeysUserState() != nil:
		k := key.GetMultimapKeysUserState()
		return Multimap, t.key(Multimap, LP([]byte(k.GetTransformId()), []byte(k.GetUserStateId()), k.GetWindow(), k.GetKey())), true, true
	case key.GetMultimapUserState() != nil:
		k := key.GetMultimapUserState()
		return Multimap, t.key(Multimap, LP([]byte(k.GetTransformId()), []byte(k.GetUserStateId()), k.GetWindow(), k.GetKey(), k.GetMapKey())), false, true
	}
	return 0, nil, false, false
}

// userStateScope is the transform, state id and window of a bag or
// multimap state key.
func userStateScope(key *fnpb.StateKey) (transform, id string, win []byte) {
	if k := key.GetBagUserState(); k != nil {
		return k.GetTransformId(), k.GetUserStateId(), k.GetWindow()
	}
	k := key.GetMultimapUserState()
	return k.GetTransformId(), k.GetUserStateId(), k.GetWindow()
}

// userPageBytes is the size a page of bag or multimap values stops growing
// at.
const userPageBytes = 1 << 20

// Get implements harness.StateHandler. Every read is served in pages of
// about userPageBytes (bundles see their own writes: the pages read the
// user batch); a continuation token is the store key the next page starts
// at, and must lie in the state it was given for.
func (s *StageHandler) Get(ctx context.Context, key *fnpb.StateKey, token []byte) ([]byte, []byte, error) {
	if k := key.GetOrderedListUserState(); k != nil && s.user != nil {
		lower, upper := s.orderedRange(k)
		if len(token) > 0 {
			if bytes.Compare(token, lower) < 0 || bytes.Compare(token, upper) >= 0 {
				return nil, nil, fmt.Errorf("%s state: continuation token does not belong to this range", harness.StateKeyType(key))
			}
			lower = token
		}
		s.user.mu.Lock()
		defer s.user.mu.Unlock()
		it, err := s.user.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			return nil, nil, err
		}
		defer it.Close()
		var out []byte
		for it.First(); it.Valid(); it.Next() {
			if len(out) >= userPageBytes {
				return out, slices.Clone(it.Key()), it.Error()
			}
			out = append(out, it.Value()...)
		}
		return out, nil, it.Error()
	}
	_, prefix, keysOnly, ok := s.prefix(key)
	if !ok {
		if s.side == nil {
			return harness.UnsupportedState{}.Get(ctx, key, token)
		}
		return s.side.Get(ctx, key, token)
	}
	s.user.mu.Lock()
	defer s.user.mu.Unlock()
	lower := prefix
	if !keysOnly { // a bag, or one map key's values: bagFloors
		lower = s.user.bagLower(prefix)
	}
	if len(token) > 0 {
		if !bytes.HasPrefix(token, prefix) {
			return nil, nil, fmt.Errorf("%s state: continuation token does not belong to this state", harness.StateKeyType(key))
		}
		if bytes.Compare(token, lower) > 0 {
			lower = token
		}
	}
	it, err := s.user.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: PrefixEnd(prefix)})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	var out, last []byte
	for it.First(); it.Valid(); it.Next() {
		if !keysOnly {
			// Values page like side inputs: the token is the store key
			// to go on from, so a bag of any size is never whole here.
			if len(out) >= userPageBytes {
				return out, slices.Clone(it.Key()), it.Error()
			}
			out = append(out, it.Value()...)
			continue
		}
		mk, _, err := ReadLP(it.Key()[len(prefix):])
		if err != nil {
			return nil, nil, err
		}
		if last != nil && bytes.Equal(mk, last) {
			continue
		}
		// A page ends before a map key's first entry, so the next page
		// starts with that key and no key is listed twice.
		if len(out) >= userPageBytes {
			return out, slices.Clone(it.Key()), it.Error()
		}
		last = append(last[:0], mk...)
		out = append(out, mk...)
	}
	return out, nil, it.Error()
}

// Append implements harness.StateHandler: data is one or more encoded values
// appended after the existing ones.
func (s *StageHandler) Append(ctx context.Context, key *fnpb.StateKey, data []byte) error {
	if k := key.GetOrderedListUserState(); k != nil && s.user != nil {
		// Values are a varint timestamp then the element: split them, and
		// store each under its timestamp so reads come back sorted.
		elemLen := s.ordered[[2]string{k.GetTransformId(), k.GetUserStateId()}]
		if elemLen == nil {
			return fmt.Errorf("transform %s: unknown ordered list state %s", k.GetTransformId(), k.GetUserStateId())
		}
		p := s.orderedPrefix(k)
		s.user.mu.Lock()
		defer s.user.mu.Unlock()
		if err := s.user.noteAppend(Ordered, k.GetTransformId(), k.GetUserStateId(), k.GetWindow()); err != nil {
			return err
		}
		for len(data) > 0 {
			ts, n := binary.Uvarint(data)
			if n <= 0 {
				return fmt.Errorf("ordered list state %s: bad timestamp", k.GetUserStateId())
			}
			el, err := elemLen(data[n:])
			if err != nil {
				return fmt.Errorf("ordered list state %s: %w", k.GetUserStateId(), err)
			}
			key := binary.BigEndian.AppendUint64(append([]byte(nil), p...), EventTimeBits(int64(ts)))
			key = append(key, s.user.nextSeq()...)
			if err := s.user.batch.Set(key, data[:n+el], nil); err != nil {
				return err
			}
			data = data[n+el:]
		}
		return nil
	}
	kind, prefix, keysOnly, ok := s.prefix(key)
	if !ok || keysOnly {
		return harness.UnsupportedState{}.Append(ctx, key, data)
	}
	s.user.mu.Lock()
	defer s.user.mu.Unlock()
	transform, id, win := userStateScope(key)
	if err := s.user.noteAppend(kind, transform, id, win); err != nil {
		return err
	}
	return s.user.batch.Set(append(prefix, s.user.nextSeq()...), data, nil)
}

// Clear implements harness.StateHandler.
func (s *StageHandler) Clear(ctx context.Context, key *fnpb.StateKey) error {
	if k := key.GetOrderedListUserState(); k != nil && s.user != nil {
		lower, upper := s.orderedRange(k)
		s.user.mu.Lock()
		defer s.user.mu.Unlock()
		return DeleteRange(s.user.batch, lower, upper)
	}
	_, prefix, keysOnly, ok := s.prefix(key)
	if !ok {
		return harness.UnsupportedState{}.Clear(ctx, key)
	}
	s.user.mu.Lock()
	defer s.user.mu.Unlock()
	if keysOnly {
		// The whole multimap: its entries go on with each map key, not
		// with a sequence number, so no floor applies.
		return DeleteRange(s.user.batch, prefix, PrefixEnd(prefix))
	}
	if err := DeleteRange(s.user.batch, s.user.bagLower(prefix), PrefixEnd(prefix)); err != nil {
		return err
	}
	s.user.bagCleared(prefix)
	return nil
}

func timerID(transform, family string, tm shuffle.Timer, win []byte) []byte {
	return LP([]byte(transform), []byte(family), tm.Key, win, tm.Tag)
}

func domainByte(eventTime bool) byte {
	if eventTime {
		return 'e'
	}
	return 'p'
}

// SetTimers records the timers a bundle set (or cleared) for one family. A
// timer replaces the one with the same key, window and tag.
func (u *User) SetTimers(fam translate.TimerFamily, codec *shuffle.TimerCodec, data []byte, carry *[]byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(*carry) > 0 {
		data = append(*carry, data...)
	}
	for len(data) > 0 {
		tm, err := codec.Next(data)
		if err == shuffle.ErrShort {
			break
		}
		if err != nil {
			return fmt.Errorf("timer family %s of %s: %w", fam.FamilyID, fam.TransformID, err)
		}
		for _, win := range tm.Windows {
			id := timerID(fam.TransformID, fam.FamilyID, tm, win)
			ref := u.key(TimerRefs, id)
			if old, closer, err := u.batch.Get(ref); err == nil {
				oldKey := u.key(UserTimers, old[:9], id)
				closer.Close()
				if err := u.batch.Delete(oldKey, nil); err != nil {
					return err
				}
			} else if err != pebble.ErrNotFound {
				return err
			}
			if tm.Clear {
				if err := u.batch.Delete(ref, nil); err != nil {
					return err
				}
				continue
			}
			when := append([]byte{domainByte(fam.EventTime)}, binary.BigEndian.AppendUint64(nil, EventTimeBits(tm.Fire))...)
			if err := u.batch.Set(ref, binary.BigEndian.AppendUint64(append([]byte(nil), when...), EventTimeBits(tm.Hold)), nil); err != nil {
				return err
			}
			// Deliver the timer for this one window.
			one := reencodeTimerWindow(tm, win)
			if err := u.batch.Set(u.key(UserTimers, when, id), one, nil); err != nil {
				return err
			}
			u.dueFloor(when[0]).Wrote(tm.Fire)
		}
		data = data[len(tm.Raw):]
	}
	*carry = append((*carry)[:0], data...)
	return nil
}

// reencodeTimerWindow returns the timer encoded with only window win.
func reencodeTimerWindow(tm shuffle.Timer, win []byte) []byte {
	if len(tm.Windows) == 1 {
		return append([]byte(nil), tm.Raw...)
	}
	head := len(tm.Key) + len(tm.Tag)
	tailStart := head + 4
	for _, w := range tm.Windows {
		tailStart += len(w)
	}
	out := append([]byte(nil), tm.Raw[:head]...)
	out = binary.BigEndian.AppendUint32(out, 1)
	out = append(out, win...)
	return append(out, tm.Raw[tailStart:]...)
}

// DueTimer is a timer ready to fire.
type DueTimer struct {
	key    []byte // its index key
	refKey []byte
	// Family is the timer's (transform id, family id).
	Family [2]string
	// Encoded is the timer in its family's coder, for this one window.
	Encoded []byte
}

// DueTimers returns the timers that fire now: event-time timers the input
// watermark has passed, processing-time timers whose time has come (all of
// them once the input is complete). A processing-time timer of a window
// whose state expired (expiry.go) is deleted instead, as Java's runners
// ignore it: its state is gone. (An event-time timer of a window is due
// at the latest at its expiry, so it fired before.)
func (u *User) DueTimers(inputWM, now int64) ([]DueTimer, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out, expired []DueTimer
	scan := func(domain byte, upTo int64) error {
		prefix := u.key(UserTimers, []byte{domain})
		upper := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), EventTimeBits(upTo))
		floor := u.dueFloor(domain)
		lower := floor.Lower(prefix)
		if bytes.Compare(lower, upper) >= 0 {
			return nil // nothing pending before upTo
		}
		// Every timer found is deleted below: none is left before upTo.
		defer floor.Raise(upTo)
		it, err := u.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			return err
		}
		defer it.Close()
		for it.First(); it.Valid(); it.Next() {
			k := append([]byte(nil), it.Key()...)
			id := k[len(prefix)+8:]
			tr, rest, err := ReadLP(id)
			if err != nil {
				return err
			}
			fam, rest, err := ReadLP(rest)
			if err != nil {
				return err
			}
			d := DueTimer{
				key: k, refKey: u.key(TimerRefs, id),
				Family: [2]string{string(tr), string(fam)}, Encoded: append([]byte(nil), it.Value()...),
			}
			if domain == 'p' {
				_, rest, err := ReadLP(rest) // the key
				if err != nil {
					return err
				}
				win, _, err := ReadLP(rest)
				if err != nil {
					return err
				}
				if u.windowExpired(string(tr), win, inputWM) {
					expired = append(expired, d)
					continue
				}
			}
			out = append(out, d)
		}
		return it.Error()
	}
	// Event-time timers fire once the watermark is past them; at the end of
	// time every timer fires (the input is complete: nothing can come
	// after, and a timer set at the maximum itself would otherwise wait
	// forever).
	eventUpTo, upTo := inputWM, now+1
	if inputWM >= maxTime {
		eventUpTo, upTo = maxTime+1, maxTime+1
	}
	if err := scan('e', eventUpTo); err != nil {
		return nil, err
	}
	if err := scan('p', upTo); err != nil {
		return nil, err
	}
	for _, d := range append(expired, out...) {
		if err := u.batch.Delete(d.key, nil); err != nil {
			return nil, err
		}
		if err := u.batch.Delete(d.refKey, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TimerHold is the smallest output timestamp of pending timers.
func (u *User) TimerHold() (int64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	it, err := u.batch.NewIter(&pebble.IterOptions{LowerBound: u.key(TimerRefs), UpperBound: u.key(TimerRefs + 1)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	hold := maxTime
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		if len(v) >= 17 {
			hold = min(hold, int64(binary.BigEndian.Uint64(v[9:])^(1<<63)))
		}
	}
	return hold, it.Error()
}
