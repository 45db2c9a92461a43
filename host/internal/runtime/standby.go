package runtime

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/translate"
)

// Standby replicas (DESIGN.md §6, option num_standby_replicas).
//
// An instance keeps warm copies of tasks that other instances own, so that
// when such a task moves here (its owner died or left) its restore replays
// only the changelog's tail instead of the whole store. A standby copy is
// the task's key range in this instance's store, kept as restore would
// leave it: the committed changelog records applied in order, with the
// changelog position P (state.Changelog) in the same Pebble batch as the
// records it covers. restoreTask then starts from P like for any store
// that survived locally.
//
// Which tasks: the group's members ordered by identity (group.instance.id,
// else member id) form a ring; the standbys of a task are the N members
// after its owner on the ring (N = num_standby_replicas, at most the
// other members). Every instance computes the same choice from the group's
// description (chooseStandbys), which it reads after each assignment and
// every standbyRefresh (other members' assignments change without a
// callback here). Only stateful sub-topologies have standbys
// (statefulSubTopology): the others keep a few bookkeeping keys that
// restore in milliseconds.
//
// Invariants:
//   - A task's key range has one writer at a time: its task while it is
//     active here, else the standby. activate (called from onAssigned,
//     before the restore) returns only once the follower no longer applies
//     anything for the task; deactivate (after dropTasks) hands a revoked
//     task back to the follower, which resumes at the position the task
//     committed.
//   - The follower applies a record only at an offset at or past its
//     position, and writes the new position in the batch of the records,
//     so refetched records are never applied twice and a crash leaves a
//     position that matches the state.
//   - Nothing in here fails the job: a standby is an optimisation. Errors
//     are logged and the partition is followed again from its stored
//     position at the next refresh.
type standby struct {
	replicas  int
	group     string
	bootstrap string
	security  *kafkaconn.Security
	db        *pebble.DB
	logger    *slog.Logger
	// subs are the stateful sub-topologies by input topic, and by
	// changelog topic (Kafka names).
	subs        map[string]standbySub
	byChangelog map[string]standbySub
	// describe reads the group's members and assignment; stable is false
	// while the group rebalances. Tests replace it.
	describe func(ctx context.Context) (members []groupMember, stable bool, err error)
	// self is this instance's member id in the group ("" before it joined).
	self func() string
	// applied, if set (tests), runs after each batch the follower applied
	// with the positions of the tasks it covered.
	applied func(map[taskID]int64)

	wake chan struct{} // buffered (1): re-read the group now
	// fetchErrs are the fetch errors logged already (the follower's
	// goroutine only), so that one that persists is logged once.
	fetchErrs map[string]bool

	mu        sync.Mutex
	active    map[taskID]bool    // tasks owned here (onAssigned, dropTasks)
	chosen    map[taskID]bool    // tasks this instance stands by for, per the last description
	following map[taskID]*follow // chosen and not active: what cl consumes
	cl        *kgo.Client        // the follower's client, between start and its stop
}

// standbySub is a stateful sub-topology, by its Kafka topic names.
type standbySub struct {
	id               int
	input, changelog string
}

// follow is one task the follower consumes.
type follow struct {
	partition int32
	changelog string
	prefix    []byte
	next      int64 // the position: offset after the last applied record
}

// groupMember is one member of the consumer group as described.
type groupMember struct {
	id     string   // the ring order: group.instance.id, else the member id
	member string   // the member id, to recognise this instance
	client string   // the member's client id (observe.go)
	tasks  []taskID // assigned partitions of stateful sub-topologies
}

// standbyRefresh is how often the group is described when nothing here
// changed: another member's assignment changes without a callback here.
const standbyRefresh = 5 * time.Second

// standbyRetry is how soon the group is described again while it
// rebalances.
const standbyRetry = 200 * time.Millisecond

// newStandby returns the instance's standby, nil when it keeps none
// (num_standby_replicas 0) or the plan has no stateful sub-topology. A nil
// standby's methods do nothing.
func newStandby(i *instance) *standby {
	if i.cfg.NumStandbyReplicas <= 0 {
		return nil
	}
	s := &standby{
		replicas:    i.cfg.NumStandbyReplicas,
		group:       i.cfg.ApplicationID,
		bootstrap:   i.cfg.BootstrapServers,
		security:    i.cfg.Security,
		db:          i.db,
		logger:      i.cfg.Logger.With("component", "standby"),
		subs:        map[string]standbySub{},
		byChangelog: map[string]standbySub{},
		wake:        make(chan struct{}, 1),
		fetchErrs:   map[string]bool{},
		active:      map[taskID]bool{},
		chosen:      map[taskID]bool{},
		following:   map[taskID]*follow{},
	}
	for _, st := range i.cfg.Plan.SubTopologies {
		if !statefulSubTopology(st) {
			continue
		}
		sub := standbySub{id: st.ID, input: i.topics.Full(st.Input), changelog: i.topics.Full(i.topics.Changelogs[st.ID])}
		s.subs[sub.input] = sub
		s.byChangelog[sub.changelog] = sub
	}
	if len(s.subs) == 0 {
		return nil
	}
	s.describe = func(ctx context.Context) ([]groupMember, bool, error) {
		return describeGroup(ctx, i.admin, s.group, s.subs)
	}
	return s
}

// statefulSubTopology reports whether a sub-topology's tasks keep state
// that grows with their input: a GroupByKey's buffers and windows, user
// state and timers, input parked for side inputs or time sorting.
func statefulSubTopology(st *translate.SubTopology) bool {
	if st.Root.Kind == translate.RootGroupByKey {
		return true
	}
	for _, s := range st.Stages {
		if s.Stateful || len(s.SideInputs) > 0 || s.TimeSortedInput {
			return true
		}
	}
	return false
}

// chooseStandbys returns the tasks that the member self stands by for:
// members ordered by id form a ring, and a task's standbys are the
// replicas members after its owner (at most every other member). A task
// listed by two members (a description taken mid-handover) belongs to the
// first in ring order.
func chooseStandbys(members []groupMember, self string, replicas int) map[taskID]bool {
	ring := slices.SortedFunc(slices.Values(members), func(a, b groupMember) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.member, b.member))
	})
	me := slices.IndexFunc(ring, func(m groupMember) bool { return m.member == self })
	out := map[taskID]bool{}
	if me < 0 || len(ring) < 2 {
		return out
	}
	replicas = min(replicas, len(ring)-1)
	owned := map[taskID]bool{}
	for k, m := range ring {
		for _, id := range m.tasks {
			if owned[id] {
				continue
			}
			owned[id] = true
			// self is one of the replicas members after k.
			if d := (me - k + len(ring)) % len(ring); d >= 1 && d <= replicas {
				out[id] = true
			}
		}
	}
	return out
}

// describeGroup reads the group's members and their assigned tasks of the
// sub-topologies subs (by input topic): a classic group through
// DescribeGroups, a KIP-848 one through ConsumerGroupDescribe. stable is
// false while the group rebalances (its assignment is not final) or has
// no member yet.
func describeGroup(ctx context.Context, cl *kgo.Client, group string, subs map[string]standbySub) (members []groupMember, stable bool, err error) {
	adm := kadm.NewClient(cl)
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, false, fmt.Errorf("describing consumer group %s: %w", group, err)
	}
	g := described[group]
	if g.Err == nil && g.State != "Dead" && g.State != "Empty" && g.ProtocolType == "consumer" {
		if g.State != "Stable" {
			return nil, false, nil
		}
		for _, m := range g.Members {
			gm := groupMember{id: m.MemberID, member: m.MemberID, client: m.ClientID}
			if m.InstanceID != nil {
				gm.id = *m.InstanceID
			}
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					gm.tasks = appendTasks(gm.tasks, subs, t.Topic, t.Partitions)
				}
			}
			members = append(members, gm)
		}
		return members, true, nil
	}
	// Not a classic group: a KIP-848 consumer group (group_protocol
	// consumer). kadm's DescribeConsumerGroups keys assignments by topic
	// name, which a broker may leave out (kfake sends only topic ids).
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, false, fmt.Errorf("describing consumer group %s: %w", group, err)
	}
	if len(resp.Groups) != 1 {
		return nil, false, fmt.Errorf("describing consumer group %s: %d groups in the response", group, len(resp.Groups))
	}
	rg := resp.Groups[0]
	if err := kerr.ErrorForCode(rg.ErrorCode); err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil, false, nil // no member yet
		}
		return nil, false, fmt.Errorf("describing consumer group %s: %w", group, err)
	}
	if rg.State != "Stable" {
		return nil, false, nil
	}
	var names map[[16]byte]string // topic id → name, read when needed
	for _, m := range rg.Members {
		gm := groupMember{id: m.MemberID, member: m.MemberID, client: m.ClientID}
		if m.InstanceID != nil {
			gm.id = *m.InstanceID
		}
		for _, tp := range m.Assignment.TopicPartitions {
			topic := tp.Topic
			if topic == "" {
				if names == nil {
					if names, err = topicNames(ctx, adm, subs); err != nil {
						return nil, false, fmt.Errorf("describing consumer group %s: %w", group, err)
					}
				}
				topic = names[tp.TopicID]
			}
			gm.tasks = appendTasks(gm.tasks, subs, topic, tp.Partitions)
		}
		members = append(members, gm)
	}
	return members, true, nil
}

// appendTasks appends the tasks of topic's partitions ps, if topic is the
// input of one of subs.
func appendTasks(ids []taskID, subs map[string]standbySub, topic string, ps []int32) []taskID {
	if _, ok := subs[topic]; !ok {
		return ids
	}
	for _, p := range ps {
		ids = append(ids, taskID{topic, p})
	}
	return ids
}

// topicNames maps the topic ids of subs' input topics to their names.
func topicNames(ctx context.Context, adm *kadm.Client, subs map[string]standbySub) (map[[16]byte]string, error) {
	tds, err := adm.ListTopics(ctx, slices.Collect(maps.Keys(subs))...)
	if err != nil {
		return nil, fmt.Errorf("topic ids: %w", err)
	}
	names := map[[16]byte]string{}
	for name, td := range tds {
		names[td.ID] = name
	}
	return names, nil
}

// start runs the standby until ctx ends: a follower that applies the
// followed changelogs and a refresher that reads the group; group is the
// instance's group client (its member id). The returned function stops
// both and waits for them.
func (s *standby) start(ctx context.Context, group *kgo.Client) (stop func()) {
	if s == nil {
		return func() {}
	}
	if s.self == nil {
		s.self = func() string { m, _ := group.GroupMetadata(); return m }
	}
	cl, err := kgo.NewClient(changelogReaderOpts(s.bootstrap, s.security)...)
	if err != nil {
		s.logger.Error("standby replicas off: cannot create their changelog consumer", "error", err)
		return func() {}
	}
	s.mu.Lock()
	s.cl = cl
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.followLoop(ctx, cl)
	}()
	go func() {
		defer wg.Done()
		s.refreshLoop(ctx)
	}()
	return func() {
		cancel()
		wg.Wait()
		s.mu.Lock()
		s.cl = nil
		clear(s.following) // their positions are in the store
		s.mu.Unlock()
		cl.Close()
	}
}

// refresh asks the refresher to read the group now.
func (s *standby) refresh() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *standby) refreshLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-timer.C:
		}
		members, stable, err := s.describe(ctx)
		next := standbyRefresh
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if err.Error() != lastErr { // once per distinct error
				s.logger.Warn("standby replicas: reading the consumer group", "error", err)
				lastErr = err.Error()
			}
		case !stable:
			next = standbyRetry
		default:
			lastErr = ""
			self := s.self()
			if self == "" {
				next = standbyRetry
				break
			}
			s.choose(chooseStandbys(members, self, s.replicas))
		}
		timer.Reset(next) // Go 1.23 timers: no stale tick survives a Reset
	}
}

// choose makes chosen the tasks to stand by for, and follows them (again,
// for one whose following failed).
func (s *standby) choose(chosen map[taskID]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !maps.Equal(chosen, s.chosen) {
		s.logger.Info("standby replicas: tasks chosen", "tasks", len(chosen), "replicas", s.replicas)
	}
	s.chosen = chosen
	s.sync()
}

// sync makes the follower consume exactly the chosen tasks that are not
// active here, each from its stored position. The caller holds mu.
func (s *standby) sync() {
	if s.cl == nil {
		return
	}
	remove := map[string][]int32{}
	for id, f := range s.following {
		if !s.chosen[id] || s.active[id] {
			remove[f.changelog] = append(remove[f.changelog], f.partition)
			delete(s.following, id)
		}
	}
	if len(remove) > 0 {
		s.cl.RemoveConsumePartitions(remove)
	}
	add := map[string]map[int32]kgo.Offset{}
	for id := range s.chosen {
		if s.active[id] || s.following[id] != nil {
			continue
		}
		sub := s.subs[id.topic]
		prefix := state.TaskPrefix(sub.id, id.partition)
		pos, err := changelogPosition(s.db, prefix)
		if err == nil && pos == 0 {
			// No position: whatever is under the prefix was not restored
			// from the changelog (restoreTask clears it too).
			err = s.db.DeleteRange(prefix, state.PrefixEnd(prefix), pebble.NoSync)
		}
		if err != nil {
			s.logger.Error("standby replica: reading the local store", "task", fmt.Sprintf("%d/%d", sub.id, id.partition), "error", err)
			continue
		}
		s.following[id] = &follow{partition: id.partition, changelog: sub.changelog, prefix: prefix, next: pos}
		if add[sub.changelog] == nil {
			add[sub.changelog] = map[int32]kgo.Offset{}
		}
		add[sub.changelog][id.partition] = kgo.NewOffset().At(pos)
		s.logger.Debug("standby replica: following", "changelog", sub.changelog, "partition", id.partition, "from", pos)
	}
	if len(add) > 0 {
		s.cl.AddConsumePartitions(add)
	}
}

// activate stops following the tasks ids, which become active here: when
// it returns the follower writes nothing more under their prefixes, and
// their stored positions are where their restore starts.
func (s *standby) activate(ids []taskID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	for _, id := range ids {
		s.active[id] = true
	}
	s.sync()
	s.mu.Unlock()
	s.refresh() // an assignment: the group has changed
}

// deactivate returns revoked (or lost) tasks, by input topic, to the
// follower if this instance stands by for them. The caller has dropped the
// tasks: nothing else writes under their prefixes.
func (s *standby) deactivate(parts map[string][]int32) {
	if s == nil {
		return
	}
	s.mu.Lock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(s.active, taskID{topic, p})
		}
	}
	s.sync()
	s.mu.Unlock()
	s.refresh()
}

// followLoop applies what the follower fetches until ctx ends.
func (s *standby) followLoop(ctx context.Context, cl *kgo.Client) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		s.apply(fs)
	}
}

// apply applies fetched changelog records of followed tasks, with their
// new positions, in one batch.
func (s *standby) apply(fs kgo.Fetches) {
	fs.EachError(func(topic string, p int32, err error) {
		key := fmt.Sprintf("%s/%d: %v", topic, p, err)
		if !errors.Is(err, context.Canceled) && !s.fetchErrs[key] {
			s.fetchErrs[key] = true
			s.logger.Warn("standby replica: fetching", "changelog", topic, "partition", p, "error", err)
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	seen := map[taskID]*follow{} // followed tasks in the fetch
	next := map[taskID]int64{}   // their new positions
	var bad error
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		sub, ok := s.byChangelog[p.Topic]
		if !ok || bad != nil {
			return
		}
		id := taskID{sub.input, p.Partition}
		f := s.following[id]
		if f == nil {
			return // activated or no longer chosen since the fetch
		}
		seen[id] = f
		pos := f.next
		for _, r := range p.Records {
			if r.Offset < pos {
				continue // applied already
			}
			if !r.Attrs.IsControl() {
				if bad = applyChangelogRecord(b, r); bad != nil {
					return
				}
			}
			pos = r.Offset + 1
		}
		if pos == f.next {
			return
		}
		next[id] = pos
		bad = b.Set(state.Key(f.prefix, state.Changelog), binary.BigEndian.AppendUint64(nil, uint64(pos)), nil)
	})
	if bad == nil && !b.Empty() {
		bad = b.Commit(pebble.NoSync)
	}
	if bad != nil {
		// The consumer has moved past records the store did not take:
		// follow these tasks again from their stored positions at the
		// next refresh.
		s.logger.Error("standby replica: applying changelog records", "error", bad)
		remove := map[string][]int32{}
		for id, f := range seen {
			delete(s.following, id)
			remove[f.changelog] = append(remove[f.changelog], f.partition)
		}
		s.cl.RemoveConsumePartitions(remove)
		return
	}
	for id, pos := range next {
		s.following[id].next = pos
	}
	if s.applied != nil && len(next) > 0 {
		s.applied(next)
	}
}
