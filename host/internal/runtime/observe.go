package runtime

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/shuffle"
)

// What the status page and /metrics read of an instance (Config.Observer).
// Every hook here only reads the loop's state and writes the observer's
// figures: none changes what a cycle does.

// stateSizeEvery is how often the tasks' state sizes are measured: Pebble
// estimates them from its file metadata, cheap but not free.
const stateSizeEvery = 10 * time.Second

func ref(sub int, p int32) metrics.TaskRef { return metrics.TaskRef{SubTopology: sub, Partition: p} }

// observed is what observe measured last.
type observed struct {
	sizedAt time.Time                // when it measured every task's state
	sized   map[metrics.TaskRef]bool // tasks measured since they were assigned
}

// taskEnv is the environment of a task: the instance's, with its Produce
// counting the task's data records when the instance is observed.
func (i *instance) taskEnv(id taskID) *task.Env {
	obs := i.cfg.Observer
	if obs == nil {
		return i.env
	}
	sub := i.subByTopic[id.topic].ID
	obs.Assigned(ref(sub, id.partition), id.topic)
	out := obs.Produced(ref(sub, id.partition))
	status := i.topics.Full(shuffle.StatusTopic)
	env := *i.env
	produce := i.env.Produce
	env.Produce = func(r *kgo.Record) {
		if i.countsAsOutput(r, status) {
			out.Add(1)
		}
		produce(r)
	}
	return &env
}

// countsAsOutput: a data record of an internal topic, or any record of a
// user's topic (dead-letter records included); not the status, changelog
// or watermark records.
func (i *instance) countsAsOutput(r *kgo.Record, status string) bool {
	if r.Topic == status || strings.HasSuffix(r.Topic, "-changelog") && strings.HasPrefix(r.Topic, "__beam_") {
		return false
	}
	if strings.HasPrefix(r.Topic, "__beam_") {
		return len(r.Value) > 0 && r.Value[0] != shuffle.KindWatermark
	}
	return true
}

// observeFetch counts a task's polled records and its input lag.
func (i *instance) observeFetch(sub int, p kgo.FetchTopicPartition, end int64) {
	lag := int64(-1)
	if n := len(p.Records); n > 0 {
		lag = max(end-(p.Records[n-1].Offset+1), 0)
	}
	i.cfg.Observer.Consumed(ref(sub, p.Partition), len(p.Records), lag)
}

// observe records, after a cycle, which tasks the instance runs and their
// watermarks, and every stateSizeEvery the size of their state. The loop
// calls it between cycles.
func (i *instance) observe() {
	obs := i.cfg.Observer
	if obs == nil {
		return
	}
	i.mu.Lock()
	owned := make(map[metrics.TaskRef]bool, len(i.tasks))
	wms := make(map[metrics.TaskRef]int64, len(i.tasks))
	for id, t := range i.tasks {
		r := ref(i.subByTopic[id.topic].ID, id.partition)
		owned[r] = true
		if wm, ok := t.ReportedWatermark(); ok {
			wms[r] = wm
		}
	}
	i.mu.Unlock()
	obs.Owned(wms, owned)
	// Every stateSizeEvery, and for a task once as soon as it is assigned.
	all := time.Since(i.observed.sizedAt) >= stateSizeEvery
	if all {
		i.observed.sizedAt = time.Now()
		i.observed.sized = map[metrics.TaskRef]bool{}
	}
	for r := range owned {
		if i.observed.sized[r] {
			continue
		}
		i.observed.sized[r] = true
		prefix := state.TaskPrefix(r.SubTopology, r.Partition)
		if n, err := i.db.EstimateDiskUsage(prefix, state.PrefixEnd(prefix)); err == nil {
			obs.StateBytes(r, int64(n))
		}
	}
}

// TaskOwner is the group member that owns a task's input partition.
type TaskOwner struct {
	SubTopology int
	Partition   int32
	// Instance is the owner's instance id (identity.go), from its
	// group.instance.id or client id; "" if the member is not a ksrunner
	// instance of the application.
	Instance string
	// Member is the member id the group gave it.
	Member string
}

// DescribeTasks reads the application's consumer group: who owns each task
// of the sub-topologies whose input topics (Kafka names) are given.
// stable is false while the group rebalances or has no member; then
// owners is empty.
func DescribeTasks(ctx context.Context, cl *kgo.Client, appID string, inputs map[string]int) (owners []TaskOwner, stable bool, err error) {
	subs := make(map[string]standbySub, len(inputs))
	for topic, id := range inputs {
		subs[topic] = standbySub{id: id, input: topic}
	}
	members, stable, err := describeGroup(ctx, cl, appID, subs)
	if err != nil || !stable {
		return nil, stable, err
	}
	for _, m := range members {
		// A static member's group.instance.id, else its client id, is
		// <application id>-<instance id> (instance.go, clientID).
		named := m.client
		if m.id != m.member {
			named = m.id
		}
		inst, ok := strings.CutPrefix(named, appID+"-")
		if !ok {
			inst = ""
		}
		for _, t := range m.tasks {
			owners = append(owners, TaskOwner{SubTopology: inputs[t.topic], Partition: t.partition, Instance: inst, Member: m.member})
		}
	}
	return owners, true, nil
}

// clientID is the instance's Kafka client id, which the group shows for
// each member: a dynamic member has no group.instance.id to tell which
// instance it is.
func (i *instance) clientID() kgo.Opt {
	return kgo.ClientID(fmt.Sprintf("%s-%s", i.cfg.ApplicationID, i.ident.id))
}
