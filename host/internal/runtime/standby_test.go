package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

func tasks(topic string, ps ...int32) []taskID {
	var ids []taskID
	for _, p := range ps {
		ids = append(ids, taskID{topic, p})
	}
	return ids
}

// The standbys of a task are the replicas members after its owner on the
// ring of members ordered by id, never the owner, at most every other
// member; members that own nothing still stand by.
func TestChooseStandbys(t *testing.T) {
	abc := []groupMember{
		{id: "c", member: "m3", tasks: tasks("t", 4, 5)},
		{id: "a", member: "m1", tasks: tasks("t", 0, 1)},
		{id: "b", member: "m2", tasks: tasks("t", 2, 3)},
	}
	for _, tc := range []struct {
		name     string
		members  []groupMember
		self     string
		replicas int
		want     []taskID
	}{
		{"one replica: the next member's", abc, "m2", 1, tasks("t", 0, 1)},
		{"one replica: the ring wraps", abc, "m1", 1, tasks("t", 4, 5)},
		{"two replicas", abc, "m1", 2, tasks("t", 2, 3, 4, 5)},
		{"more replicas than other members", abc, "m3", 5, tasks("t", 0, 1, 2, 3)},
		{"alone: nothing to stand by for", abc[:1], "m3", 1, nil},
		{"not in the group yet", abc, "m9", 1, nil},
		{"an idle member stands by too", append(slices.Clone(abc), groupMember{id: "d", member: "m4"}), "m4", 1, tasks("t", 4, 5)},
		{"a member after an idle one", append(slices.Clone(abc), groupMember{id: "bb", member: "m4"}), "m3", 1, nil},
		{"instance ids order the ring, not member ids", []groupMember{
			{id: "z", member: "m1", tasks: tasks("t", 0)},
			{id: "y", member: "m2", tasks: tasks("t", 1)},
		}, "m1", 1, tasks("t", 1)},
		{"a task listed twice belongs to the first on the ring", []groupMember{
			{id: "a", member: "m1", tasks: tasks("t", 0)},
			{id: "b", member: "m2", tasks: tasks("t", 0, 1)},
			{id: "c", member: "m3"},
		}, "m2", 1, tasks("t", 0)},
	} {
		got := chooseStandbys(tc.members, tc.self, tc.replicas)
		want := map[taskID]bool{}
		for _, id := range tc.want {
			want[id] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: chose %v, want %v", tc.name, slices.Collect(maps.Keys(got)), tc.want)
		}
	}
}

// Only sub-topologies whose state grows with their input have standbys.
func TestStatefulSubTopology(t *testing.T) {
	for _, tc := range []struct {
		st   translate.SubTopology
		want bool
	}{
		{translate.SubTopology{Root: translate.Root{Kind: translate.RootGroupByKey}}, true},
		{translate.SubTopology{Root: translate.Root{Kind: translate.RootPassthrough}, Stages: []*translate.Stage{{Stateful: true}}}, true},
		{translate.SubTopology{Root: translate.Root{Kind: translate.RootPassthrough}, Stages: []*translate.Stage{{SideInputs: []translate.SideInput{{}}}}}, true},
		{translate.SubTopology{Root: translate.Root{Kind: translate.RootPassthrough}, Stages: []*translate.Stage{{}}}, false},
		{translate.SubTopology{Root: translate.Root{Kind: translate.RootImpulse}}, false},
		{translate.SubTopology{Root: translate.Root{Kind: translate.RootKafkaSource}}, false},
	} {
		if got := statefulSubTopology(&tc.st); got != tc.want {
			t.Errorf("root %v, stages %+v: stateful %v, want %v", tc.st.Root.Kind, tc.st.Stages, got, tc.want)
		}
	}
}

// positions follows the standby's applied positions, for tests to wait on.
type positions struct {
	mu      sync.Mutex
	pos     map[taskID]int64
	changed chan struct{} // buffered (1)
}

func watchPositions(s *standby) *positions {
	w := &positions{pos: map[taskID]int64{}, changed: make(chan struct{}, 1)}
	s.applied = func(next map[taskID]int64) {
		w.mu.Lock()
		maps.Copy(w.pos, next)
		w.mu.Unlock()
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	return w
}

// waitFor waits until the standby's position of id is at least pos.
func (w *positions) waitFor(t testing.TB, id taskID, pos int64) {
	t.Helper()
	waitUntil(t, w.changed, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.pos[id] >= pos, fmt.Sprintf("standby of task %s/%d at position %d, want %d", id.topic, id.partition, w.pos[id], pos)
	})
}

// waitUntil waits until cond holds, testing it again at each signal on
// changed; after 2 minutes it fails the test with cond's description.
func waitUntil(t testing.TB, changed <-chan struct{}, cond func() (ok bool, desc string)) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("after 2 minutes: %s", desc)
		}
	}
}

// restoredCounts counts Hooks.Restored's records and calls by partition.
type restoredCounts struct {
	mu      sync.Mutex
	n       map[int32]int
	calls   map[int32]int
	changed chan struct{} // buffered (1)
}

func (r *restoredCounts) init() {
	if r.n == nil {
		r.n, r.calls, r.changed = map[int32]int{}, map[int32]int{}, make(chan struct{}, 1)
	}
}

func (r *restoredCounts) hook(_ int, p int32, records int) {
	r.mu.Lock()
	r.init()
	r.n[p] += records
	r.calls[p]++
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *restoredCounts) get(p int32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[p]
}

func (r *restoredCounts) callsOf(p int32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[p]
}

// waitCalls waits until partition p's task was restored calls times.
func (r *restoredCounts) waitCalls(t testing.TB, p int32, calls int) {
	t.Helper()
	r.mu.Lock()
	r.init()
	changed := r.changed
	r.mu.Unlock()
	waitUntil(t, changed, func() (bool, string) {
		got := r.callsOf(p)
		return got >= calls, fmt.Sprintf("task of partition %d restored %d times, want %d", p, got, calls)
	})
}

// standbyOf makes i stand by for the tasks of partitions ps, owned by
// another member ("owner"), with a fixed description of the group.
func (a *changelogApp) standbyOf(t testing.TB, i *instance, ps ...int32) *standby {
	t.Helper()
	i.cfg.NumStandbyReplicas = 1
	s := newStandby(i)
	if s == nil {
		t.Fatal("no standby for a GroupByKey sub-topology")
	}
	owner := groupMember{id: "owner", member: "owner"}
	for _, p := range ps {
		owner.tasks = append(owner.tasks, a.task(p))
	}
	s.self = func() string { return "standby" }
	s.describe = func(context.Context) ([]groupMember, bool, error) {
		return []groupMember{owner, {id: "standby", member: "standby"}}, true, nil
	}
	i.standby = s
	return s
}

// TestStandbyRestoresOnlyTheTail: a standby follows two tasks' changelogs
// while their owner writes them (transactions of sets, overwrites and
// deletes, some aborted) and holds their committed state. Then task 0
// moves to the standby's instance: activate stops following it, its last
// transaction (the standby's lag at the handover) is written, and its
// restore replays only that transaction's records, leaving the state that
// a full restore into an empty store gives. Revoked again, the task is
// followed again from where its restore left it.
func TestStandbyRestoresOnlyTheTail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := newChangelogApp(t, kafkatest.Broker(t), 2)
	ws := []*changelogWriter{newChangelogWriter(t, a, 0), newChangelogWriter(t, a, 1)}
	var restored restoredCounts
	i := a.instance(t, t.TempDir(), restored.hook)
	s := a.standbyOf(t, i, 0, 1)
	pos := watchPositions(s)
	stop := s.start(ctx, nil)
	defer func() { stop() }()

	for n := range 20 {
		for _, w := range ws {
			if err := w.txn(ctx, 64<<10, 200, n%5 == 4); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p, w := range ws {
		pos.waitFor(t, a.task(int32(p)), w.end)
		if d := diffState(taskState(t, i.db, int32(p)), w.model); d != "" {
			t.Fatalf("standby copy of task %d: %s", p, d)
		}
	}

	// Task 0 moves here; the old owner's last transaction is the tail.
	s.activate([]taskID{a.task(0)})
	before := ws[0].records
	if err := ws[0].txn(ctx, 64<<10, 200, false); err != nil {
		t.Fatal(err)
	}
	tail := ws[0].records - before
	restoreTimed(t, i, 0)
	if got := restored.get(0); got != tail {
		t.Errorf("restore after the standby replayed %d records, want the tail's %d", got, tail)
	}
	if d := diffState(taskState(t, i.db, 0), ws[0].model); d != "" {
		t.Errorf("task 0 after the standby's restore: %s", d)
	}
	full := a.instance(t, t.TempDir(), nil)
	restoreTimed(t, full, 0)
	if d := diffState(taskState(t, i.db, 0), taskState(t, full.db, 0)); d != "" {
		t.Errorf("task 0 after the standby's restore, against a full restore: %s", d)
	}
	p1, err1 := changelogPosition(i.db, state.TaskPrefix(0, 0))
	p2, err2 := changelogPosition(full.db, state.TaskPrefix(0, 0))
	if err1 != nil || err2 != nil || p1 != p2 || p1 != ws[0].end {
		t.Errorf("changelog positions: after the standby %d (%v), after a full restore %d (%v), want the end %d", p1, err1, p2, err2, ws[0].end)
	}

	// Revoked, task 0 is followed again from its restored position.
	s.deactivate(map[string][]int32{a.task(0).topic: {0}})
	if err := ws[0].txn(ctx, 64<<10, 200, false); err != nil {
		t.Fatal(err)
	}
	pos.waitFor(t, a.task(0), ws[0].end)
	if d := diffState(taskState(t, i.db, 0), ws[0].model); d != "" {
		t.Errorf("standby copy of task 0 after its revocation: %s", d)
	}
}

// groupMemberOf is one instance of a changelogApp in its consumer group.
type groupMemberOf struct {
	i        *instance
	restored restoredCounts
	pos      *positions // nil without standbys
	// stop stops the instance and closes it, leaving the group; crash
	// closes it without leaving (a static member's session then expires
	// as a killed process's would). The first call of either counts.
	stop, crash func()
}

// join starts an instance of a in its consumer group, on a store of its
// own, with replicas standby replicas.
func (a *changelogApp) join(t *testing.T, ctx context.Context, replicas int) *groupMemberOf {
	return a.joinWith(t, ctx, replicas, false, nil)
}

// joinWith is join with a static membership if stable (the identity kept
// in the store directory) and the config changed by configure.
func (a *changelogApp) joinWith(t *testing.T, ctx context.Context, replicas int, stable bool, configure func(*Config)) *groupMemberOf {
	t.Helper()
	m := &groupMemberOf{}
	cfg := Config{
		Plan:               a.plan,
		BootstrapServers:   a.bootstrap,
		ApplicationID:      a.app,
		ExactlyOnce:        true,
		CommitInterval:     50 * time.Millisecond,
		NumStandbyReplicas: replicas,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks:              &Hooks{Restored: m.restored.hook},
	}
	if configure != nil {
		configure(&cfg)
	}
	i, err := newInstance(ctx, cfg, a.topics, t.TempDir(), stable, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.i = i
	if i.standby != nil {
		m.pos = watchPositions(i.standby)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- i.run(rctx) }()
	var once sync.Once
	end := func(leave bool) {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("instance: %v", err)
			}
			i.close(leave)
		})
	}
	m.stop = func() { end(true) }
	m.crash = func() { end(false) }
	t.Cleanup(m.stop)
	return m
}

// waitOwners waits until the group is stable with each member owning one
// of a's two tasks, and returns the owner of each partition.
func (a *changelogApp) waitOwners(t *testing.T, ctx context.Context, ms ...*groupMemberOf) map[int32]*groupMemberOf {
	t.Helper()
	subs := map[string]standbySub{a.task(0).topic: {id: 0, input: a.task(0).topic, changelog: a.changelog()}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		members, stable, err := describeGroup(ctx, a.admin, a.app, subs)
		if err != nil {
			t.Fatal(err)
		}
		owners := map[int32]*groupMemberOf{}
		for _, gm := range members {
			for _, m := range ms {
				if id, _ := m.i.cl.GroupMetadata(); id == gm.member && len(gm.tasks) == 1 {
					owners[gm.tasks[0].partition] = m
				}
			}
		}
		if stable && len(members) == len(ms) && len(owners) == 2 {
			return owners
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("group %s: no stable assignment of one task to each of %d members after 2 minutes (last: %d members, stable %v)", a.app, len(ms), len(members), stable)
		}
	}
}

// TestStandbyFailover runs two instances of an application in its
// consumer group, each owning one of two GroupByKey tasks, whose
// changelogs are written; then one instance leaves and the survivor takes
// its task. With num_standby_replicas=1 the survivor has followed that
// task's changelog and restores nothing; with 0 it replays all of it.
// Either way its state is what a full restore gives.
func TestStandbyFailover(t *testing.T) {
	for _, replicas := range []int{1, 0} {
		t.Run(fmt.Sprintf("num_standby_replicas=%d", replicas), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			a := newChangelogApp(t, kafkatest.Broker(t), 2)
			ms := []*groupMemberOf{a.join(t, ctx, replicas), a.join(t, ctx, replicas)}
			owners := a.waitOwners(t, ctx, ms...)
			gone, survivor := owners[0], owners[1]

			// Task 0's changelog, as its owner writes it.
			w := newChangelogWriter(t, a, 0)
			for n := range 10 {
				if err := w.txn(ctx, 256<<10, 1000, n%5 == 4); err != nil {
					t.Fatal(err)
				}
			}
			if replicas > 0 {
				survivor.pos.waitFor(t, a.task(0), w.end)
			}
			before := survivor.restored.callsOf(0)
			gone.stop()
			survivor.restored.waitCalls(t, 0, before+1)
			got, want := survivor.restored.get(0), w.records
			if replicas > 0 {
				want = 0
			}
			t.Logf("the survivor replayed %d changelog records of the moved task (of %d)", got, w.records)
			if got != want {
				t.Errorf("the survivor replayed %d changelog records of the moved task, want %d", got, want)
			}
			full := a.instance(t, t.TempDir(), nil)
			restoreTimed(t, full, 0)
			if d := diffState(taskState(t, survivor.i.db, 0), taskState(t, full.db, 0)); d != "" {
				t.Errorf("the moved task's state, against a full restore: %s", d)
			}
		})
	}
}

// describeGroup reads members, identities and assignments of a classic
// group and of a KIP-848 one (group_protocol consumer), only once the
// assignment is stable.
func TestDescribeGroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"classic", nil},
		{"consumer", []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.CooperativeStickyBalancer())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a := newChangelogApp(t, kafkatest.Broker(t), 2)
			var cls []*kgo.Client
			for n := range 2 {
				opts := append([]kgo.Opt{kgo.ConsumerGroup(a.app), kgo.ConsumeTopics(a.task(0).topic)}, tc.opts...)
				if n == 1 {
					opts = append(opts, kgo.InstanceID("static-1"))
				}
				cls = append(cls, kafkatest.Client(t, a.bootstrap, opts...))
			}
			subs := map[string]standbySub{a.task(0).topic: {id: 0, input: a.task(0).topic, changelog: a.changelog()}}
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				members, stable, err := describeGroup(ctx, a.admin, a.app, subs)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				assigned := map[taskID]bool{}
				for _, m := range members {
					for _, id := range m.tasks {
						assigned[id] = true
					}
					for n, cl := range cls {
						if id, _ := cl.GroupMetadata(); id == m.member && len(m.tasks) == 1 {
							got = append(got, fmt.Sprintf("%d:%v", n, m.id == m.member))
						}
					}
				}
				slices.Sort(got)
				if stable && len(assigned) == 2 && slices.Equal(got, []string{"0:true", "1:false"}) {
					for _, m := range members {
						if m.member != m.id && m.id != "static-1" {
							t.Errorf("member %s has ring id %q, want its group.instance.id static-1", m.member, m.id)
						}
					}
					return
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
					t.Fatalf("no stable assignment of one task to each client (last: members %+v, stable %v)", members, stable)
				}
			}
		})
	}
}
