package status

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/runtime"
	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/shuffle"
)

// ClusterConfig is the application a Cluster looks at.
type ClusterConfig struct {
	BootstrapServers string // a broker list
	// Security is how to connect to them (nil: PLAINTEXT).
	Security      *kafkaconn.Security
	ApplicationID string
	// Inputs are the sub-topologies' input topics (Kafka names) by id;
	// Source marks the user's topics (InputTopics).
	Inputs map[int]string
	Source map[int]bool
}

// clusterRefresh is how long a look at the cluster is reused: every page
// poll and scrape would otherwise describe the group again.
const clusterRefresh = time.Second

// Cluster is an application's tasks as Kafka sees them, whichever process
// runs them: the consumer group's owner of each input partition, the
// group's committed offsets against the end offsets (lag, and the input
// rate between two looks), and the last watermark each task reported on
// the status topic. It looks when asked (Tasks), at most once per
// clusterRefresh; it starts no goroutine of its own (the status topic's
// consumer is a franz-go client, which Close stops).
type Cluster struct {
	cfg    ClusterConfig
	admin  *kgo.Client
	status *kgo.Client

	mu     sync.Mutex
	wms    map[string]int64 // by producer id (shuffle.ProducerID)
	at     time.Time        // the last look
	tasks  []Task
	err    error
	prev   map[string]int64 // committed offsets at the last look, by producer id
	prevAt time.Time
}

// NewCluster returns a Cluster of the application; Close it.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	admin, err := kafkaconn.NewClient(cfg.BootstrapServers, cfg.Security)
	if err != nil {
		return nil, fmt.Errorf("status: kafka client: %w", err)
	}
	st, err := kafkaconn.NewClient(cfg.BootstrapServers, cfg.Security,
		kgo.ConsumeTopics(shuffle.TopicName(cfg.ApplicationID, shuffle.StatusTopic)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("status: status topic consumer: %w", err)
	}
	return &Cluster{cfg: cfg, admin: admin, status: st, wms: map[string]int64{}}, nil
}

// Close stops the clients.
func (c *Cluster) Close() {
	c.status.Close()
	c.admin.Close()
}

// Tasks are the application's tasks, sorted by sub-topology and partition;
// err says what could not be read (the tasks then carry what could).
func (c *Cluster) Tasks(ctx context.Context) ([]Task, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < clusterRefresh {
		return c.tasks, c.err
	}
	c.tasks, c.err = c.look(ctx)
	c.at = time.Now()
	return c.tasks, c.err
}

func (c *Cluster) look(ctx context.Context) ([]Task, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.readStatus(ctx)
	adm := kadm.NewClient(c.admin)
	byTopic := map[string]int{}
	topics := make([]string, 0, len(c.cfg.Inputs))
	for id, t := range c.cfg.Inputs {
		byTopic[t] = id
		topics = append(topics, t)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("end offsets of the input topics: %w", err)
	}
	var errs []string
	committed, err := adm.FetchOffsets(ctx, c.cfg.ApplicationID)
	if err != nil {
		errs = append(errs, fmt.Sprintf("committed offsets of group %s: %v", c.cfg.ApplicationID, err))
	}
	owners := map[string]string{}
	if os, stable, err := runtime.DescribeTasks(ctx, c.admin, c.cfg.ApplicationID, byTopic); err != nil {
		errs = append(errs, err.Error())
	} else if !stable {
		errs = append(errs, fmt.Sprintf("consumer group %s is rebalancing or has no member: owners unknown", c.cfg.ApplicationID))
	} else {
		for _, o := range os {
			owners[shuffle.ProducerID(o.SubTopology, o.Partition)] = o.Instance
		}
	}
	now := time.Now()
	cur := map[string]int64{}
	var tasks []Task
	ends.Each(func(lo kadm.ListedOffset) {
		id, ok := byTopic[lo.Topic]
		if !ok {
			return
		}
		pid := shuffle.ProducerID(id, lo.Partition)
		t := Task{SubTopology: id, Partition: lo.Partition, Topic: lo.Topic, Source: c.cfg.Source[id], Owner: owners[pid],
			Committed: -1, End: -1, Lag: -1, RatePerSec: -1}
		if lo.Err == nil {
			t.End = lo.Offset
		}
		if o, ok := committed.Lookup(lo.Topic, lo.Partition); ok && o.Err == nil {
			t.Committed = o.At
			cur[pid] = o.At
			if t.End >= 0 {
				t.Lag = max(t.End-t.Committed, 0)
			}
			if p, ok := c.prev[pid]; ok && now.After(c.prevAt) {
				t.RatePerSec = float64(o.At-p) / now.Sub(c.prevAt).Seconds()
			}
		} else if t.End >= 0 && committed != nil {
			// Nothing committed yet: the whole partition is ahead.
			t.Lag = t.End
		}
		if wm, ok := c.wms[pid]; ok {
			t.Watermark, t.HasWatermark = wm, true
		}
		tasks = append(tasks, t)
	})
	c.prev, c.prevAt = cur, now
	sort.Slice(tasks, func(i, j int) bool {
		a, b := tasks[i], tasks[j]
		if a.SubTopology != b.SubTopology {
			return a.SubTopology < b.SubTopology
		}
		return a.Partition < b.Partition
	})
	if len(errs) > 0 {
		return tasks, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return tasks, nil
}

// readStatus takes the status records the consumer has buffered (it reads
// the topic in the background), waiting briefly for a first fetch.
func (c *Cluster) readStatus(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	fs := c.status.PollFetches(ctx)
	fs.EachRecord(func(r *kgo.Record) {
		if s, err := task.DecodeStatus(r.Value); err == nil {
			c.wms[string(r.Key)] = s.Watermark
		}
	})
}
