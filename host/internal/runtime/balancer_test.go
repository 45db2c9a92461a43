package runtime

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// testMember is a group member as the leader sees it at a join.
type testMember struct {
	id         string
	topics     []string
	owned      map[string][]int32
	stored     map[string][]int32
	generation int32
}

// balanceMembers runs stateBalancer's leader side over members and
// returns each member's assignment.
func balanceMembers(t *testing.T, members []testMember, topics map[string]int32) (got, sticky map[string]map[string][]int32) {
	t.Helper()
	var join []kmsg.JoinGroupResponseMember
	for _, m := range members {
		b := newStateBalancer(func() map[string][]int32 { return m.stored })
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		jm.ProtocolMetadata = b.JoinGroupMetadata(m.topics, m.owned, m.generation)
		join = append(join, jm)
	}
	b := newStateBalancer(nil)
	b.stickyPlan = func(p map[string]map[string][]int32) { sticky = p }
	mb, _, err := b.MemberBalancer(join)
	if err != nil {
		t.Fatal(err)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(topics)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]int32{}
	for _, a := range into.IntoSyncAssignment() {
		got, err := b.ParseSyncAssignment(a.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		for topic, ps := range got {
			slices.Sort(ps)
			got[topic] = ps
		}
		out[a.MemberID] = got
	}
	return out, sticky
}

// A member that died leaves its two tasks unowned; the two survivors each
// hold the store of one of them (as their standbys). Each task goes to the
// survivor with its store, whichever way round the stores lie; the owned
// tasks stay put and each survivor gets one.
func TestStateBalancerFreeTasksGoToTheirStores(t *testing.T) {
	topics := map[string]int32{"in": 6}
	for _, holders := range [][2]string{{"a", "b"}, {"b", "a"}} {
		stored := map[string]map[string][]int32{
			holders[0]: {"in": {4}},
			holders[1]: {"in": {5}},
		}
		got, _ := balanceMembers(t, []testMember{
			{id: "a", topics: []string{"in"}, owned: map[string][]int32{"in": {0, 1}}, stored: stored["a"], generation: 3},
			{id: "b", topics: []string{"in"}, owned: map[string][]int32{"in": {2, 3}}, stored: stored["b"], generation: 3},
		}, topics)
		want := map[string][]int32{"a": {0, 1}, "b": {2, 3}}
		want[holders[0]] = append(want[holders[0]], 4)
		want[holders[1]] = append(want[holders[1]], 5)
		for id, ps := range want {
			if !slices.Equal(got[id]["in"], ps) {
				t.Errorf("stores %v: member %s got %v, want %v", stored, id, got[id]["in"], ps)
			}
		}
	}
}

// Properties of any balance: no partition twice; an owned partition stays
// with its owner or is left out this round (the cooperative revocation);
// each member takes only topics it subscribes to; the members' counts are
// the sticky balancer's; and no unowned partition misses a holder that
// got an unowned partition of no store of its own (a swap would place
// both better).
func TestStateBalancerProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		topics := map[string]int32{}
		names := []string{"s0", "s1", "s2"}[:1+rng.IntN(3)]
		for _, n := range names {
			topics[n] = int32(1 + rng.IntN(8))
		}
		var members []testMember
		owned := map[string]map[int32]string{}
		for m := range 1 + rng.IntN(4) {
			tm := testMember{id: fmt.Sprintf("m%d", m), owned: map[string][]int32{}, stored: map[string][]int32{}, generation: int32(rng.IntN(2)*5 - 1)}
			for _, n := range names {
				if rng.IntN(5) > 0 || len(tm.topics) == 0 && n == names[len(names)-1] {
					tm.topics = append(tm.topics, n)
				}
			}
			for _, n := range tm.topics {
				for p := range topics[n] {
					if tm.generation >= 0 && owned[n][p] == "" && rng.IntN(3) == 0 {
						tm.owned[n] = append(tm.owned[n], p)
						if owned[n] == nil {
							owned[n] = map[int32]string{}
						}
						owned[n][p] = tm.id
					}
					if rng.IntN(3) == 0 {
						tm.stored[n] = append(tm.stored[n], p)
					}
				}
			}
			members = append(members, tm)
		}
		got, stickyPlan := balanceMembers(t, members, topics)
		sticky := map[string]int{}
		for id, tps := range stickyPlan {
			for _, ps := range tps {
				sticky[id] += len(ps)
			}
		}
		seen := map[string]map[int32]string{}
		for _, m := range members {
			n := 0
			for topic, ps := range got[m.id] {
				if !slices.Contains(m.topics, topic) {
					t.Fatalf("round %d: %s got %s, which it does not subscribe to", round, m.id, topic)
				}
				for _, p := range ps {
					n++
					if seen[topic] == nil {
						seen[topic] = map[int32]string{}
					}
					if other := seen[topic][p]; other != "" {
						t.Fatalf("round %d: %s/%d to %s and %s", round, topic, p, other, m.id)
					}
					seen[topic][p] = m.id
					if o := owned[topic][p]; o != "" && o != m.id {
						t.Fatalf("round %d: %s/%d owned by %s went to %s in the same round", round, topic, p, o, m.id)
					}
				}
			}
			if n != sticky[m.id] {
				t.Fatalf("round %d: %s got %d partitions, the sticky balancer gives it %d", round, m.id, n, sticky[m.id])
			}
		}
		// No swap of two unowned partitions between two members would
		// give either a store it lacks now without taking one away.
		type fp struct {
			topic string
			p     int32
		}
		free := map[string][]fp{}
		for topic, ps := range seen {
			for p, id := range ps {
				if owned[topic][p] == "" {
					free[id] = append(free[id], fp{topic, p})
				}
			}
		}
		storedBy := func(id string, f fp) bool {
			for _, m := range members {
				if m.id == id {
					return slices.Contains(m.stored[f.topic], f.p)
				}
			}
			return false
		}
		subscribes := func(id, topic string) bool {
			for _, m := range members {
				if m.id == id {
					return slices.Contains(m.topics, topic)
				}
			}
			return false
		}
		for a, fa := range free {
			for b, fb := range free {
				for _, x := range fa {
					for _, y := range fb {
						if a == b || storedBy(a, x) || !storedBy(b, x) || storedBy(b, y) || !subscribes(a, y.topic) || !subscribes(b, x.topic) {
							continue
						}
						// x sits on a without its store while b
						// holds it, and y sits on b without its
						// store: swapping puts x on its store.
						t.Fatalf("round %d: %s/%d on %s (no store) while %s holds it and has %s/%d without a store", round, x.topic, x.p, a, b, y.topic, y.p)
					}
				}
			}
		}
	}
}

func TestStateUserDataRoundTrip(t *testing.T) {
	for _, stored := range []map[string][]int32{{}, {"a": {0, 3, 9}, "b": {1}}} {
		sticky := []byte{0, 0, 0, 1, 2, 3}
		gotSticky, got, err := decodeStateUserData(encodeStateUserData(sticky, stored))
		if err != nil || !slices.Equal(gotSticky, sticky) || !maps.EqualFunc(got, stored, slices.Equal) {
			t.Errorf("%v: decoded %v %v (%v)", stored, gotSticky, got, err)
		}
	}
	if _, _, err := decodeStateUserData([]byte{0, 0, 0, 1}); err == nil {
		t.Error("sticky user data alone decoded as ksrunner's")
	}
}

// Three members of a group on a broker, each reporting the stores it
// holds; one leaves. Its two tasks go to the two survivors holding their
// stores, whichever survivor holds which.
func TestStateBalancerInAGroup(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	topic := kafkatest.UniqueName(t, "in")
	kafkatest.CreateTopic(t, bootstrap, topic, 6)
	for _, swap := range []bool{false, true} {
		group := kafkatest.UniqueName(t, "g")
		type member struct {
			cl     *kgo.Client
			mu     sync.Mutex
			stored map[string][]int32
			owned  map[int32]bool
		}
		ms := make([]*member, 3)
		for n := range ms {
			m := &member{owned: map[int32]bool{}}
			stored := func() map[string][]int32 { m.mu.Lock(); defer m.mu.Unlock(); return m.stored }
			track := func(add bool) func(context.Context, *kgo.Client, map[string][]int32) {
				return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
					m.mu.Lock()
					defer m.mu.Unlock()
					for _, p := range ps[topic] {
						m.owned[p] = add
					}
				}
			}
			m.cl = kafkatest.Client(t, bootstrap,
				kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.Balancers(newStateBalancer(stored), kgo.CooperativeStickyBalancer()),
				kgo.OnPartitionsAssigned(track(true)), kgo.OnPartitionsRevoked(track(false)), kgo.OnPartitionsLost(track(false)),
			)
			ms[n] = m
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		owns := func(m *member) []int32 {
			m.mu.Lock()
			defer m.mu.Unlock()
			var ps []int32
			for p, ok := range m.owned {
				if ok {
					ps = append(ps, p)
				}
			}
			slices.Sort(ps)
			return ps
		}
		pollUntil := func(what string, done func() bool) {
			for !done() {
				for _, m := range ms {
					if m.cl != nil {
						pctx, pcancel := context.WithTimeout(ctx, 50*time.Millisecond)
						m.cl.PollFetches(pctx)
						pcancel()
					}
				}
				if ctx.Err() != nil {
					t.Fatalf("%s: %v", what, ctx.Err())
				}
			}
		}
		pollUntil("three members with two tasks each", func() bool {
			return len(owns(ms[0])) == 2 && len(owns(ms[1])) == 2 && len(owns(ms[2])) == 2
		})
		gone := owns(ms[2])
		a, b := ms[0], ms[1]
		if swap {
			a, b = b, a
		}
		a.mu.Lock()
		a.stored = map[string][]int32{topic: {gone[0]}}
		a.mu.Unlock()
		b.mu.Lock()
		b.stored = map[string][]int32{topic: {gone[1]}}
		b.mu.Unlock()
		want := map[*member][]int32{a: append(owns(a), gone[0]), b: append(owns(b), gone[1])}
		for m := range want {
			slices.Sort(want[m])
		}
		ms[2].cl.Close()
		ms[2].cl = nil
		pollUntil("the leaver's tasks taken", func() bool { return len(owns(a))+len(owns(b)) == 6 })
		for m, w := range want {
			if got := owns(m); !slices.Equal(got, w) {
				t.Errorf("swap %v: a survivor owns %v, want %v (the leaver's %v, stores %v)", swap, got, w, gone, m.stored)
			}
		}
		for _, m := range ms[:2] {
			m.cl.Close()
		}
		cancel()
	}
}

// storedTasks lists the tasks of stateful sub-topologies whose store has a
// changelog position above 0, skipping other keys of those tasks, tasks of
// other sub-topologies and side inputs.
func TestStoredTasksRefresh(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	set := func(k []byte, v uint64) {
		if err := db.Set(k, binary.BigEndian.AppendUint64(nil, v), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		sub       int
		partition int32
		pos       uint64
	}{{1, 0, 5}, {1, 3, 9}, {1, 7, 0}, {2, 2, 1}, {4, 0, 8}, {300, 1, 2}} {
		prefix := state.TaskPrefix(tc.sub, tc.partition)
		set(state.Key(prefix, state.Buffer, []byte("k")), 1)
		set(state.Key(prefix, state.Changelog), tc.pos)
		set(state.Key(prefix, state.Timer, []byte("t")), 1)
	}
	set(append(slices.Clone(state.SidePrefix), 1, 2, 3), 1)
	s := newStoredTasks(map[uint32]string{1: "a", 2: "b", 3: "c", 300: "d"})
	if err := s.refresh(db); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int32{"a": {0, 3}, "b": {2}, "d": {1}}
	if got := s.get(); !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("stored tasks %v, want %v", got, want)
	}
}
