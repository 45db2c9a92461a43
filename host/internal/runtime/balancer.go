package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/host/internal/state"
)

// Tasks land where their state is.
//
// Under the classic protocol the group's leader assigns partitions with
// franz-go's cooperative-sticky balancer, which keeps every owned partition
// where it is and spreads the rest evenly, blind to where their stores
// are. The rest are the partitions nobody owns: those of a member that
// died, left or was revoked from in the previous round (a cooperative move
// is two rounds: revoke, then assign), and all of them when the
// application starts. Each of those tasks restores its store on the member
// that gets it, in full if that member has none, while a standby replica,
// or a member that owned it before, may hold it nearly complete.
//
// stateBalancer is the sticky balancer plus one step. Every member adds to
// its join metadata the tasks whose store it holds (a changelog position
// in its Pebble DB: a task it ran, or followed as a standby). The leader
// takes the sticky plan and trades unowned partitions between members so
// that more of them sit on their stores, keeping how many each member got
// (so balance is exactly the sticky balancer's; dealFree). Owned
// partitions are not touched, so the cooperative revocation rounds the
// sticky balancer planned stay as planned.
//
// The set a member reports changes only when it gains or drops a store,
// not with its positions: a static member that rejoins with other
// metadata makes the coordinator rebalance.
//
// Under group_protocol=consumer the broker assigns (KIP-848), and knows
// nothing of stores: there a task lands where the broker's uniform
// assignor puts it.

// stateBalancerProtocol is the protocol name members advertise first. A
// group with a member that does not know it (an older ksrunner) agrees on
// cooperative-sticky, which every member also advertises.
const stateBalancerProtocol = "ksrunner-state-sticky"

// stateUserDataMagic starts the user data of stateBalancer's join metadata:
// the sticky balancer's own user data, then the stored tasks.
var stateUserDataMagic = []byte("ksr\x01")

type stateBalancer struct {
	sticky kgo.GroupBalancer
	// stored returns the tasks this member holds a store of, by input
	// topic, partitions sorted.
	stored func() map[string][]int32
	// stickyPlan, when set (by tests), sees each sticky plan before the
	// trades.
	stickyPlan func(map[string]map[string][]int32)
}

func newStateBalancer(stored func() map[string][]int32) *stateBalancer {
	return &stateBalancer{sticky: kgo.CooperativeStickyBalancer(), stored: stored}
}

func (*stateBalancer) ProtocolName() string { return stateBalancerProtocol }
func (*stateBalancer) IsCooperative() bool  { return true }

func (b *stateBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (b *stateBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	raw := b.sticky.JoinGroupMetadata(interests, current, generation)
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(raw); err != nil {
		return raw // cannot happen: franz-go encoded it
	}
	meta.UserData = encodeStateUserData(meta.UserData, b.stored())
	return meta.AppendTo(nil)
}

func (b *stateBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// Balance is the sticky plan with the unowned partitions dealt to the
// members holding their stores.
func (b *stateBalancer) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	plan, err := b.balance(cb, topics)
	if err != nil {
		cb.SetError(err)
		return cb.NewPlan()
	}
	return plan
}

func (b *stateBalancer) balance(cb *kgo.ConsumerBalancer, topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	members := cb.Members()
	// The sticky balancer reads its own user data: hand it the members'
	// metadata as it wrote it.
	plain := make([]kmsg.JoinGroupResponseMember, len(members))
	stored := make(map[string]map[string][]int32, len(members))
	subscribed := make(map[string]map[string]bool, len(members))
	owner := map[string]map[int32]bool{}
	for n, m := range members {
		plain[n] = m
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
			return nil, fmt.Errorf("member %s: join metadata: %w", m.MemberID, err)
		}
		sticky, tasks, err := decodeStateUserData(meta.UserData)
		if err != nil {
			return nil, fmt.Errorf("member %s: join metadata: %w", m.MemberID, err)
		}
		meta.UserData = sticky
		plain[n].ProtocolMetadata = meta.AppendTo(nil)
		stored[m.MemberID] = tasks
		subscribed[m.MemberID] = map[string]bool{}
		for _, t := range meta.Topics {
			subscribed[m.MemberID][t] = true
		}
		for _, o := range meta.OwnedPartitions {
			if owner[o.Topic] == nil {
				owner[o.Topic] = map[int32]bool{}
			}
			for _, p := range o.Partitions {
				owner[o.Topic][p] = true
			}
		}
	}
	scb, err := kgo.NewConsumerBalancer(b.sticky.(kgo.ConsumerBalancerBalance), plain)
	if err != nil {
		return nil, err
	}
	into := b.sticky.(kgo.ConsumerBalancerBalance).Balance(scb, topics)
	sticky, ok := into.(*kgo.BalancePlan)
	if !ok {
		return into, nil
	}
	planned := sticky.AsMemberIDMap()
	if b.stickyPlan != nil {
		b.stickyPlan(planned)
	}

	ids := make([]string, len(members))
	byID := make(map[string]*kmsg.JoinGroupResponseMember, len(members))
	for n := range members {
		ids[n] = members[n].MemberID
		byID[ids[n]] = &members[n]
	}
	var free []freePartition
	for _, id := range ids {
		for topic, ps := range planned[id] {
			for _, p := range ps {
				if !owner[topic][p] {
					free = append(free, freePartition{topic, p, id})
				}
			}
		}
	}
	dealt := dealFree(free, stored, subscribed)

	out := cb.NewPlan()
	for _, id := range ids {
		for topic, ps := range planned[id] {
			var keep []int32
			for _, p := range ps {
				if owner[topic][p] {
					keep = append(keep, p)
				}
			}
			out.AddPartitions(byID[id], topic, keep)
		}
	}
	for _, f := range dealt {
		out.AddPartition(byID[f.member], f.topic, f.partition)
	}
	return out, nil
}

// freePartition is an unowned partition and the member it goes to.
type freePartition struct {
	topic     string
	partition int32
	member    string
}

// dealFree moves the free partitions between members to put them on
// their stores, by swaps: a partition x on a member without its store and
// a partition y on a member b that holds x's store trade places when b
// may take x and a may take y (their subscriptions) and the swap puts
// more partitions on their stores than before. Swaps keep every member's
// count, the sticky plan's, so the balance is the sticky balancer's; each
// one adds a partition on its store, so there are at most len(free) of
// them. It ends when no swap helps: no pair of members would both do
// better by trading, though a longer cycle of trades might.
func dealFree(free []freePartition, stored map[string]map[string][]int32, subscribed map[string]map[string]bool) []freePartition {
	out := slices.Clone(free)
	has := func(member string, f freePartition) int {
		if holds(stored[member], f.topic, f.partition) {
			return 1
		}
		return 0
	}
	for improved := true; improved; {
		improved = false
		for n := range out {
			x := out[n]
			if has(x.member, x) == 1 {
				continue
			}
			for m := range out {
				y := out[m]
				if y.member == x.member || has(y.member, x) == 0 || !subscribed[y.member][x.topic] || !subscribed[x.member][y.topic] {
					continue
				}
				if 1+has(x.member, y)-has(y.member, y) > 0 {
					out[n].member, out[m].member = y.member, x.member
					improved = true
					break
				}
			}
		}
	}
	return out
}

func holds(stored map[string][]int32, topic string, p int32) bool {
	_, ok := slices.BinarySearch(stored[topic], p)
	return ok
}

// encodeStateUserData is the magic, the sticky balancer's user data
// (length-prefixed), and the stored tasks in the sticky user data's own
// layout (topic, partitions).
func encodeStateUserData(sticky []byte, stored map[string][]int32) []byte {
	out := append(slices.Clone(stateUserDataMagic), binary.AppendUvarint(nil, uint64(len(sticky)))...)
	out = append(out, sticky...)
	s := kmsg.NewStickyMemberMetadata()
	s.Generation = -1
	for _, topic := range slices.Sorted(maps.Keys(stored)) {
		a := kmsg.NewStickyMemberMetadataCurrentAssignment()
		a.Topic = topic
		a.Partitions = stored[topic]
		s.CurrentAssignment = append(s.CurrentAssignment, a)
	}
	return s.AppendTo(out)
}

func decodeStateUserData(data []byte) (sticky []byte, stored map[string][]int32, err error) {
	if !bytes.HasPrefix(data, stateUserDataMagic) {
		return nil, nil, errors.New("not ksrunner's state user data")
	}
	data = data[len(stateUserDataMagic):]
	n, k := binary.Uvarint(data)
	if k <= 0 || uint64(len(data)-k) < n {
		return nil, nil, errors.New("truncated state user data")
	}
	sticky, data = data[k:k+int(n)], data[k+int(n):]
	var s kmsg.StickyMemberMetadata
	if err := s.ReadFrom(data); err != nil {
		return nil, nil, fmt.Errorf("stored tasks: %w", err)
	}
	stored = make(map[string][]int32, len(s.CurrentAssignment))
	for _, a := range s.CurrentAssignment {
		stored[a.Topic] = slices.Sorted(slices.Values(a.Partitions))
	}
	return sticky, stored, nil
}

// storedRefresh is how often the commit loop lists the stored tasks again:
// a standby gains stores between rebalances, and the next join should say
// so.
const storedRefresh = 5 * time.Second

// storedTasks keeps the set of tasks with a store in the instance's DB for
// its join metadata. It is read by the client's group goroutine at each
// join and written by the commit loop, which alone reads the DB here (the
// DB closes after the loop ends, while the client may still rejoin).
type storedTasks struct {
	inputs map[uint32]string // stateful sub-topology id → input topic
	set    atomic.Pointer[map[string][]int32]
}

func newStoredTasks(inputs map[uint32]string) *storedTasks {
	s := &storedTasks{inputs: inputs}
	s.set.Store(&map[string][]int32{})
	return s
}

func (s *storedTasks) get() map[string][]int32 { return *s.set.Load() }

// refresh scans db for task prefixes with a changelog position, hopping
// from one task prefix to the next, so that it costs a seek per task.
func (s *storedTasks) refresh(db *pebble.DB) error {
	if len(s.inputs) == 0 {
		return nil
	}
	it, err := db.NewIter(&pebble.IterOptions{UpperBound: state.SidePrefix})
	if err != nil {
		return err
	}
	defer it.Close()
	set := map[string][]int32{}
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < state.TaskPrefixLen {
			valid = it.Next()
			continue
		}
		prefix := slices.Clone(k[:state.TaskPrefixLen])
		sub, partition := binary.BigEndian.Uint32(prefix), int32(binary.BigEndian.Uint32(prefix[4:]))
		if topic, ok := s.inputs[sub]; ok {
			pos, err := changelogPosition(db, prefix)
			if err != nil {
				return err
			}
			if pos > 0 {
				set[topic] = append(set[topic], partition) // ascending: keys are ordered
			}
		}
		next := binary.BigEndian.Uint64(prefix) + 1
		if next == 0 {
			break
		}
		valid = it.SeekGE(binary.BigEndian.AppendUint64(nil, next))
	}
	s.set.Store(&set)
	return nil
}
