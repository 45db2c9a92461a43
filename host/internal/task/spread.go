package task

import (
	"encoding/binary"
	"math"
	"sync"
)

// A splittable DoFn's sized restrictions cross its SpreadRestrictions topic
// (translate.Topic.SpreadBySize) to the tasks that process them. Each
// producing task sends each restriction to the partition its restrictions
// so far weigh least in, by the size the SDK gave it, so that the process
// tasks get equal work: a source split into 16 even ranges over 4
// partitions gives each task 4, where hashing the (element, restriction)
// keys gave 8, 1, 2 and 5, and the job took as long as the task with 8.
//
// Invariants:
//   - The weights are the task's own, in memory: a producing task balances
//     what it sends; tasks do not coordinate. Each starts its search at its
//     own partition, so that tasks sending one restriction each (ties
//     everywhere) do not all pick partition 0.
//   - A restriction's partition does not matter for correctness (the topic
//     is a Redistribute): a retried cycle may send it elsewhere, and its
//     aborted first copy is never read (read_committed).
type spreader struct {
	mu     sync.Mutex
	topics map[string][]spreadWeight // by topic, then partition
}

// spreadWeight is what a task has sent to one partition of a spread topic.
type spreadWeight struct {
	size  float64 // the restrictions' sizes, summed
	count int     // how many restrictions (breaks ties between sizes)
}

// pick returns the partition of topic (of n) for a restriction of the given
// size, and counts it there. start is where the search begins (the task's
// partition), for ties.
func (s *spreader) pick(topic string, n, start int32, size float64) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.topics[topic]
	if len(ws) != int(n) {
		if s.topics == nil {
			s.topics = map[string][]spreadWeight{}
		}
		ws = make([]spreadWeight, n)
		s.topics[topic] = ws
	}
	best := start % n
	for i := int32(1); i < n; i++ {
		p := (start + i) % n
		if w, b := ws[p], ws[best]; w.size < b.size || w.size == b.size && w.count < b.count {
			best = p
		}
	}
	ws[best].size += size
	ws[best].count++
	return best
}

// restrictionSize reads the size of a sized restriction from its KV value:
// a Beam double (8 bytes, big-endian IEEE 754), possibly length-prefixed.
// A size that is missing, not a number or negative weighs 1, and an
// infinite one as much as a very large one: a bad size must not stop the
// spreading (the SDK checks sizes itself).
func restrictionSize(value []byte) float64 {
	if len(value) == 9 && value[0] == 8 {
		value = value[1:]
	}
	if len(value) != 8 {
		return 1
	}
	size := math.Float64frombits(binary.BigEndian.Uint64(value))
	switch {
	case math.IsNaN(size) || size < 0:
		return 1
	case size > 1e18:
		return 1e18
	}
	return size
}
