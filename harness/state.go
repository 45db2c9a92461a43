package harness

import (
	"context"
	"fmt"
	"strings"

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
