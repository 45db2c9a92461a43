package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// When a Kafka read's partition is caught up (task/kafka.go): sourceEnds
// lists, every commit interval, the end offsets (last stable offsets, as a
// read_committed consumer sees them) of the partitions of the job's Kafka
// reads, and tells each source task of this instance the end of its
// partition as of the time the request was sent. A task whose position is
// at or past that end is caught up as of that time, which is the only
// evidence the idle rule trusts: a poll's time is not (a fetch may wait in
// the client's buffer across a stalled cycle; a partition a poll did not
// bring may have records the client has not fetched), nor is a fetch's high
// watermark, whose request time franz-go does not tell.
//
// A task that has handled nothing has no position of its own: a fetch
// without records is only buffered with other partitions' records. Its
// position is then where its consumption started: the group's committed
// offset, or the offset startOffsets resolved the reset policy to (start).
//
// One goroutine, run's, owns the listing; it stops with run's context. A
// failed listing is logged at debug level and retried at the next tick:
// the watermarks of idle partitions wait meanwhile, which is safe (the
// brokers' outage handling is brokers.go's).
type sourceEnds struct {
	adm    *kadm.Client
	topics []string // the Kafka reads' topics (full names)

	mu sync.Mutex
	// start is where consumption of a partition without a committed offset
	// started, as startOffsets resolved it, by topic and partition.
	start map[string]map[int32]int64
}

func newSourceEnds(adm *kadm.Client, topics []string) *sourceEnds {
	return &sourceEnds{adm: adm, topics: topics, start: map[string]map[int32]int64{}}
}

// started records where startOffsets started partitions without a commit.
func (s *sourceEnds) started(topic string, offsets map[int32]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.start[topic] == nil {
		s.start[topic] = map[int32]int64{}
	}
	for p, o := range offsets {
		s.start[topic][p] = o
	}
}

func (s *sourceEnds) startOf(topic string, p int32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.start[topic][p]; ok {
		return o
	}
	return -1
}

// runSourceEnds lists every interval until ctx ends (run starts it).
func (i *instance) runSourceEnds(ctx context.Context, interval time.Duration) {
	s := i.sourceEnds
	if s == nil || len(s.topics) == 0 {
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		i.listSourceEnds(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// listSourceEnds lists once and tells the source tasks.
func (i *instance) listSourceEnds(ctx context.Context) {
	s := i.sourceEnds
	at := i.now() // before the request: the ends are as of at or later
	ends, err := s.adm.ListCommittedOffsets(ctx, s.topics...)
	if err != nil {
		if ctx.Err() == nil {
			i.cfg.Logger.Debug("listing the Kafka reads' end offsets", "error", err)
		}
		return
	}
	committed := i.cl.CommittedOffsets()
	i.mu.Lock()
	defer i.mu.Unlock()
	for id, t := range i.tasks {
		if !isSource(i.subByTopic[id.topic]) {
			continue
		}
		end, ok := ends.Lookup(id.topic, id.partition)
		if !ok || end.Err != nil {
			continue
		}
		from := s.startOf(id.topic, id.partition)
		if c, ok := committed[id.topic][id.partition]; ok && c.Offset >= 0 {
			from = c.Offset
		}
		t.Listed(at, end.Offset, from)
	}
}
