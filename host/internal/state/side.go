package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/harness"
	"github.com/ksrunner/ksrunner/translate"
)

// Side inputs, read whole by every instance into its store (the runtime's
// side input reader writes them; SideInputs serves the Fn API's reads).
//
// Store layout (the 0xFF prefix, SidePrefix, is out of the range of task prefixes, whose
// first byte is the high byte of a small sub-topology id):
//
//	0xFF 'S' len topic | topic | len win | win | offset → encoded element
//	0xFF 'M' len topic | topic | len win | win | len key | key | offset → encoded value
//
// The record's offset makes every write idempotent, so re-reading the topic
// after a restart changes nothing.

// SideKey builds a side input store key; with key nil it is the prefix of a
// window's (or, for 'M', of a window and key's) entries when off is nil.
func SideKey(store byte, topic string, win, key, off []byte) []byte {
	k := append(append([]byte(nil), SidePrefix...), store)
	k = AppendLP(k, []byte(topic))
	k = AppendLP(k, win)
	if key != nil {
		k = AppendLP(k, key)
	}
	return append(k, off...)
}

// SideInputs serves the Fn API state requests of one stage's side inputs.
type SideInputs struct {
	harness.UnsupportedState
	db     *pebble.DB
	cache  *SideCache                        // nil: none
	topics map[[2]string]translate.SideInput // by transform id, side input id
}

const sidePageBytes = 1 << 20

// NewSideInputs serves the side inputs of stage s from db, through cache
// (nil: none).
func NewSideInputs(db *pebble.DB, cache *SideCache, s *translate.Stage) *SideInputs {
	st := &SideInputs{db: db, cache: cache, topics: map[[2]string]translate.SideInput{}}
	for _, si := range s.SideInputs {
		st.topics[[2]string{si.TransformID, si.LocalName}] = si
	}
	return st
}

// Get implements harness.StateHandler for iterable and multimap side inputs.
// The continuation token is the store key to resume from.
func (s *SideInputs) Get(ctx context.Context, key *fnpb.StateKey, token []byte) ([]byte, []byte, error) {
	var prefix []byte
	keysOnly := false
	switch {
	case key.GetIterableSideInput() != nil:
		k := key.GetIterableSideInput()
		si, ok := s.topics[[2]string{k.GetTransformId(), k.GetSideInputId()}]
		if !ok {
			return nil, nil, fmt.Errorf("transform %s: unknown side input %s", k.GetTransformId(), k.GetSideInputId())
		}
		prefix = SideKey('S', si.Topic, k.GetWindow(), nil, nil)
	case key.GetMultimapSideInput() != nil:
		k := key.GetMultimapSideInput()
		si, ok := s.topics[[2]string{k.GetTransformId(), k.GetSideInputId()}]
		if !ok || !si.Multimap {
			return nil, nil, fmt.Errorf("transform %s: unknown multimap side input %s", k.GetTransformId(), k.GetSideInputId())
		}
		prefix = SideKey('M', si.Topic, k.GetWindow(), k.GetKey(), nil)
	case key.GetMultimapKeysSideInput() != nil:
		k := key.GetMultimapKeysSideInput()
		si, ok := s.topics[[2]string{k.GetTransformId(), k.GetSideInputId()}]
		if !ok || !si.Multimap {
			return nil, nil, fmt.Errorf("transform %s: unknown multimap side input %s", k.GetTransformId(), k.GetSideInputId())
		}
		prefix = SideKey('M', si.Topic, k.GetWindow(), nil, nil)
		keysOnly = true
	default:
		return s.UnsupportedState.Get(ctx, key, token)
	}
	lower := prefix
	if len(token) > 0 {
		if !bytes.HasPrefix(token, prefix) {
			return nil, nil, fmt.Errorf("state continuation token does not belong to this side input")
		}
		lower = token
	}
	// The cache key: the read's kind (keys of a multimap, or values), its
	// prefix's length and where it starts.
	ck := make([]byte, 0, 2+binary.MaxVarintLen64+len(lower))
	ck = append(ck, 'v')
	if keysOnly {
		ck[0] = 'k'
	}
	ck = binary.AppendUvarint(ck, uint64(len(prefix)))
	ck = append(ck, lower...)
	p, ok, gen := s.cache.get(ck)
	if ok {
		return p.page, p.next, nil
	}
	page, next, err := s.read(prefix, lower, keysOnly)
	if err == nil {
		s.cache.put(ck, sidePage{page: page, next: next}, gen)
	}
	return page, next, err
}

// read reads a page of the side input entries under prefix from lower on:
// the entries' values, or with keysOnly the distinct keys of a multimap.
func (s *SideInputs) read(prefix, lower []byte, keysOnly bool) ([]byte, []byte, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: PrefixEnd(prefix)})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	var out []byte
	var lastKey []byte
	for it.First(); it.Valid(); it.Next() {
		if keysOnly {
			// Entries are ordered by key: emit each distinct key once.
			k, _, err := ReadLP(it.Key()[len(prefix):])
			if err != nil {
				return nil, nil, err
			}
			if lastKey != nil && bytes.Equal(k, lastKey) {
				continue
			}
			lastKey = append(lastKey[:0], k...)
			out = append(out, k...)
		} else {
			out = append(out, it.Value()...)
		}
		if len(out) >= sidePageBytes && !keysOnly {
			if it.Next() {
				return out, append([]byte(nil), it.Key()...), it.Error()
			}
			break
		}
	}
	return out, nil, it.Error()
}
