package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// What `bench rescale` measures besides the windows, to tell where their
// skew comes from: how long the generator's records take to reach the
// broker, and how far the application's consumer group is behind on the
// input.

// msHistogram counts durations in 1 ms buckets up to a minute (longer ones
// in the last); safe for concurrent adds, so the producer's callbacks add
// without a lock.
type msHistogram struct {
	buckets [60_000]atomic.Int64
	n       atomic.Int64
}

func (h *msHistogram) add(d time.Duration) {
	ms := min(max(d.Milliseconds(), 0), int64(len(h.buckets)-1))
	h.buckets[ms].Add(1)
	h.n.Add(1)
}

// quantile is the smallest bucket (as a duration) holding the q-th of the
// durations added, q in [0, 1]; zero when empty.
func (h *msHistogram) quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := max(int64(q*float64(n)+0.5), 1)
	var seen int64
	for ms := range h.buckets {
		if seen += h.buckets[ms].Load(); seen >= rank {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return time.Duration(len(h.buckets)-1) * time.Millisecond
}

// lagSample is the group's lag on the input at one time: records in the
// input past the offsets the group has committed.
type lagSample struct {
	at      time.Time
	records int64
}

// lagSampler samples, every second until ctx ends, the application's
// consumer-group lag on the input topic. With exactly-once the committed
// offsets move with each commit cycle, so the lag includes what a cycle
// holds.
type lagSampler struct {
	adm          *kadm.Client
	group, topic string

	mu      sync.Mutex
	samples []lagSample
}

func (s *lagSampler) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if lag, ok := s.sample(ctx); ok {
			s.mu.Lock()
			s.samples = append(s.samples, lagSample{at: time.Now(), records: lag})
			s.mu.Unlock()
		}
	}
}

// sample is the lag now; not ok if either listing failed (the sample is
// skipped: a sampler never fails the bench).
func (s *lagSampler) sample(ctx context.Context) (int64, bool) {
	ends, err := s.adm.ListEndOffsets(ctx, s.topic)
	if err != nil || ends.Error() != nil {
		return 0, false
	}
	committed, err := s.adm.FetchOffsets(ctx, s.group)
	if err != nil || committed.Error() != nil {
		return 0, false
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(s.topic, o.Partition)
		at := int64(0) // nothing committed: the group starts at the start
		if ok && c.At >= 0 {
			at = c.At
		}
		lag += max(o.Offset-at, 0)
	})
	return lag, true
}

// between returns the samples taken in [from, to).
func (s *lagSampler) between(from, to time.Time) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	for _, x := range s.samples {
		if !x.at.Before(from) && x.at.Before(to) {
			out = append(out, x.records)
		}
	}
	return out
}

// waitConsuming waits until the group has committed an offset past the
// start of every partition of the topic: every source task has run a
// commit cycle over input.
func (s *lagSampler) waitConsuming(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ends, err := s.adm.ListEndOffsets(ctx, s.topic)
		if err == nil {
			err = ends.Error()
		}
		committed, err2 := s.adm.FetchOffsets(ctx, s.group)
		if err == nil && err2 == nil {
			all := len(ends) > 0
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := committed.Lookup(s.topic, o.Partition)
				all = all && ok && c.Err == nil && c.At > 0
			})
			if all {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
