package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
)

// StateHandler serves the Fn API state requests of bundles: side inputs and
// user state, addressed by *fnpb.StateKey. The host implements it against
// its stores. Calls for one worker arrive one at a time, in the order the
// SDK sent them; ctx is the bundle's context.
type StateHandler interface {
	// Get returns the data stored under key, in the encoding the key type
	// prescribes (for iterable side inputs and bags: concatenated encoded
	// values). A handler may return the data in pages: a non-nil next is the
	// continuation token the SDK sends back to get the following page, and a
	// nil next means this is the last page. token is nil on the first call.
	Get(ctx context.Context, key *fnpb.StateKey, token []byte) (data, next []byte, err error)
	// Append adds encoded values to the state under key (user state).
	Append(ctx context.Context, key *fnpb.StateKey, data []byte) error
	// Clear removes the state under key (user state).
	Clear(ctx context.Context, key *fnpb.StateKey) error
}

// UnsupportedState is the StateHandler used when the host provides none: it
// fails every request with an error naming the state key type, so a
// pipeline using side inputs or user state fails loudly rather than reading
// nothing.
type UnsupportedState struct{}

// Get implements StateHandler.
func (UnsupportedState) Get(_ context.Context, key *fnpb.StateKey, _ []byte) ([]byte, []byte, error) {
	return nil, nil, fmt.Errorf("state key type %s is not supported yet", StateKeyType(key))
}

// Append implements StateHandler.
func (UnsupportedState) Append(_ context.Context, key *fnpb.StateKey, _ []byte) error {
	return fmt.Errorf("state key type %s is not supported yet", StateKeyType(key))
}

// Clear implements StateHandler.
func (UnsupportedState) Clear(_ context.Context, key *fnpb.StateKey) error {
	return fmt.Errorf("state key type %s is not supported yet", StateKeyType(key))
}

// StateKeyType names the kind of a state key for messages, e.g.
// "iterable_side_input" or "bag_user_state".
func StateKeyType(key *fnpb.StateKey) string {
	switch key.GetType().(type) {
	case *fnpb.StateKey_Runner_:
		return "runner"
	case *fnpb.StateKey_IterableSideInput_:
		return "iterable_side_input"
	case *fnpb.StateKey_MultimapSideInput_:
		return "multimap_side_input"
	case *fnpb.StateKey_MultimapKeysSideInput_:
		return "multimap_keys_side_input"
	case *fnpb.StateKey_BagUserState_:
		return "bag_user_state"
	case *fnpb.StateKey_MultimapUserState_:
		return "multimap_user_state"
	case *fnpb.StateKey_MultimapKeysUserState_:
		return "multimap_keys_user_state"
	case *fnpb.StateKey_OrderedListUserState_:
		return "ordered_list_user_state"
	case nil:
		return "<none>"
	default:
		return strings.TrimPrefix(fmt.Sprintf("%T", key.GetType()), "*fnexecution_v1.StateKey_")
	}
}

// SideInputs is an in-memory StateHandler serving iterable side inputs
// (beam:side_input:iterable:v1), for hosts that materialise a side input
// before running the bundles that read it. Values are encoded elements
// (in the side input PCollection's element coder, without windowed-value
// headers). Gets are paged by PageSize bytes, always at element boundaries
// (SDKs decode each page on its own). Other state key types fail as in
// UnsupportedState. Safe for concurrent use.
type SideInputs struct {
	// PageSize is the size a page of a Get grows to before the rest is left
	// to a continuation token. Zero means 1MiB.
	PageSize int

	mu     sync.Mutex
	values map[sideInputKey][][]byte
}

type sideInputKey struct {
	transformID, sideInputID, window string
}

// SetIterable sets the values the side input sideInputID of transform
// transformID has in the window whose encoding is window (empty for the
// global window).
func (s *SideInputs) SetIterable(transformID, sideInputID string, window []byte, values [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.values == nil {
		s.values = make(map[sideInputKey][][]byte)
	}
	s.values[sideInputKey{transformID, sideInputID, string(window)}] = values
}

// Get implements StateHandler. A side input with no values set reads as
// empty, as a side input PCollection without elements in that window would.
func (s *SideInputs) Get(ctx context.Context, key *fnpb.StateKey, token []byte) ([]byte, []byte, error) {
	ikey := key.GetIterableSideInput()
	if ikey == nil {
		return UnsupportedState{}.Get(ctx, key, token)
	}
	start := 0
	if len(token) > 0 {
		n, err := strconv.Atoi(string(token))
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("iterable side input %s of %s: bad continuation token %q", ikey.GetSideInputId(), ikey.GetTransformId(), token)
		}
		start = n
	}
	pageSize := s.PageSize
	if pageSize <= 0 {
		pageSize = 1 << 20
	}
	s.mu.Lock()
	values := s.values[sideInputKey{ikey.GetTransformId(), ikey.GetSideInputId(), string(ikey.GetWindow())}]
	s.mu.Unlock()
	if start > len(values) {
		return nil, nil, fmt.Errorf("iterable side input %s of %s: continuation token %q beyond its %d values", ikey.GetSideInputId(), ikey.GetTransformId(), token, len(values))
	}
	var page []byte
	i := start
	for ; i < len(values); i++ {
		if len(page) > 0 && len(page)+len(values[i]) > pageSize {
			break
		}
		page = append(page, values[i]...)
	}
	if i < len(values) {
		return page, []byte(strconv.Itoa(i)), nil
	}
	return page, nil, nil
}

// Append implements StateHandler: side inputs are read-only.
func (s *SideInputs) Append(ctx context.Context, key *fnpb.StateKey, data []byte) error {
	return UnsupportedState{}.Append(ctx, key, data)
}

// Clear implements StateHandler: side inputs are read-only.
func (s *SideInputs) Clear(ctx context.Context, key *fnpb.StateKey) error {
	return UnsupportedState{}.Clear(ctx, key)
}
