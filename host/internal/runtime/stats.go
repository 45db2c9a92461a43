package runtime

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Stats is what a running job's progress line reports (Config.Stats): the
// elements this process read from the job's topics, the least watermark the
// tasks reported, and how far this process's Kafka reads are behind their
// partitions' ends. The runtime updates it; anyone may take a Snapshot.
type Stats struct {
	elements atomic.Int64

	mu sync.Mutex
	// lag is each Kafka source partition's records between the last one
	// handed to its task and the partition's end (read_committed: its last
	// stable offset), as of its last fetch.
	lag map[taskID]int64
	// watermarks are the tasks' last committed watermark reports, by task.
	watermarks map[string]int64
	tasks      int // how many tasks the plan has (0: not known yet)
}

// StatsSnapshot is Stats at one moment.
type StatsSnapshot struct {
	// Elements is how many elements this process read from the job's
	// topics: records of its Kafka reads and data records of its internal
	// topics (not watermark or control records).
	Elements int64
	// SourceLag is the sum, over the Kafka read partitions this process
	// owns, of the records not yet read; SourcePartitions how many there
	// are (0: no Kafka read here, or none fetched yet).
	SourceLag        int64
	SourcePartitions int
	// Watermark is the least watermark the tasks reported (milliseconds
	// since the epoch), of Reported of Tasks tasks; the job's watermark
	// once Reported == Tasks.
	Watermark       int64
	Reported, Tasks int
}

// Snapshot returns the current figures; a nil Stats has none.
func (s *Stats) Snapshot() StatsSnapshot {
	if s == nil {
		return StatsSnapshot{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := StatsSnapshot{Elements: s.elements.Load(), SourcePartitions: len(s.lag), Reported: len(s.watermarks), Tasks: s.tasks}
	for _, l := range s.lag {
		out.SourceLag += l
	}
	first := true
	for _, wm := range s.watermarks {
		if first || wm < out.Watermark {
			out.Watermark, first = wm, false
		}
	}
	return out
}

// fetched counts a fetched partition's elements and, for a Kafka source
// partition, its lag: hw (the partition's end) less the offset after the
// last record fetched; a fetch that brought nothing found it caught up.
func (s *Stats) fetched(p kgo.FetchTopicPartition, source bool, hw int64) {
	if s == nil {
		return
	}
	if source {
		s.elements.Add(int64(len(p.Records)))
		lag := int64(0)
		if n := len(p.Records); n > 0 {
			lag = max(hw-p.Records[n-1].Offset-1, 0)
		}
		s.mu.Lock()
		if s.lag == nil {
			s.lag = map[taskID]int64{}
		}
		s.lag[taskID{p.Topic, p.Partition}] = lag
		s.mu.Unlock()
		return
	}
	var n int64
	for _, r := range p.Records {
		if len(r.Value) > 0 && r.Value[0] == shuffle.KindData {
			n++
		}
	}
	s.elements.Add(n)
}

// dropped forgets the lag of partitions this process no longer owns.
func (s *Stats) dropped(topic string, partition int32) {
	if s == nil {
		return
	}
	s.mu.Lock()
	delete(s.lag, taskID{topic, partition})
	s.mu.Unlock()
}

// reported records a task's committed watermark report.
func (s *Stats) reported(task string, wm int64, tasks int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watermarks == nil {
		s.watermarks = map[string]int64{}
	}
	s.watermarks[task] = wm
	s.tasks = tasks
}

// isSource reports whether st reads a Kafka topic of the user's.
func isSource(st *translate.SubTopology) bool {
	return st != nil && st.Root.Kind == translate.RootKafkaSource
}
