package main

// The checker of `bench rescale`: the output's results against what the
// generator produced, window by window.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// windowChecker matches the output's results against what the generator
// produced, window by window.
type windowChecker struct {
	keys int
	now  func() time.Time // the clock results are read by

	mu      sync.Mutex
	cond    *sync.Cond
	windows map[int64]*windowState // by start (ms)
	done    bool                   // read has returned
}

// windowState is one window's results. Invariants (mu held): matched
// counts keys whose result equals expected; a key's first result is in
// got, later ones only count in dups; completeAt is set once, when
// expected is known, every expected key matched and nothing was wrong or
// twice.
type windowState struct {
	expected     []int32 // by key; nil until published
	expectedKeys int     // keys with a non-zero count
	elements     int64
	got          []int64 // by key: its first result, 0 if none (results are at least 1)
	matched      int
	wrong        int // results of a key with another count, or not produced in the window
	dups         int // results of a key that already had one
	// later sums a key's results after its first (nil until a dup): a
	// key whose results add up to its count was fired in several panes
	// (late input fired again), one whose results repeat the count was
	// written twice (exactly-once broken).
	later      map[int]int64
	lastAt     time.Time
	completeAt time.Time
	// have counts the produced keys with a result; coveredAt is when the
	// last of them got one, right or not.
	have      int
	coveredAt time.Time
}

func newWindowChecker(keys int) *windowChecker {
	c := &windowChecker{keys: keys, now: time.Now, windows: map[int64]*windowState{}}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *windowChecker) window(start int64) *windowState {
	w := c.windows[start]
	if w == nil {
		w = &windowState{got: make([]int64, c.keys)}
		c.windows[start] = w
	}
	return w
}

// publish gives the window starting at start (ms) its expected counts by
// key; the generator no longer writes them.
func (c *windowChecker) publish(start int64, counts []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.window(start)
	w.expected = counts
	w.matched, w.wrong, w.have = 0, 0, 0
	for k, n := range counts {
		if n > 0 {
			w.expectedKeys++
			w.elements += int64(n)
			if w.got[k] != 0 {
				w.have++
			}
		}
		if g := w.got[k]; g != 0 {
			if g == int64(n) {
				w.matched++
			} else {
				w.wrong++
			}
		}
	}
	// Results before their window was published cannot be the pipeline's
	// (it fires a window only after input past its end): complete at the
	// last of them, so a bug shows as skew, not as a lost window.
	c.settle(w, w.lastAt)
	c.cond.Broadcast()
}

// result records key k's count n in the window starting at start (ms),
// read at at.
func (c *windowChecker) result(k int, start, n int64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.window(start)
	w.lastAt = at
	switch {
	case w.got[k] != 0:
		w.dups++
		if w.later == nil {
			w.later = map[int]int64{}
		}
		w.later[k] += n
	default:
		w.got[k] = n
		if w.expected != nil {
			if w.expected[k] > 0 {
				w.have++
			}
			if int64(w.expected[k]) == n {
				w.matched++
			} else {
				w.wrong++
			}
		}
	}
	c.settle(w, at)
	c.cond.Broadcast()
}

// settle marks w complete at at if it now is (c.mu held).
func (c *windowChecker) settle(w *windowState, at time.Time) {
	if w.coveredAt.IsZero() && w.expected != nil && w.have == w.expectedKeys {
		w.coveredAt = at
	}
	if w.completeAt.IsZero() && w.expected != nil && w.matched == w.expectedKeys && w.wrong == 0 && w.dups == 0 {
		w.completeAt = at
	}
}

// resolved reports whether w's outcome is final: complete, or already
// wrong or duplicated (c.mu held).
func (w *windowState) resolved() bool {
	return !w.completeAt.IsZero() || w.wrong > 0 || w.dups > 0
}

// waitAll waits until every published window is resolved and nothing
// unpublished has results.
func (c *windowChecker) waitAll(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		open := 0
		for _, w := range c.windows {
			if !w.resolved() {
				open++
			}
		}
		switch {
		case open == 0:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%d windows unresolved: %w", open, ctx.Err())
		case c.done:
			return fmt.Errorf("%d windows unresolved when the checker stopped", open)
		}
		c.cond.Wait()
	}
}

// read consumes topic read_committed from its start until ctx ends,
// recording each result; a record that is not a result fails it.
func (c *windowChecker) read(ctx context.Context, bootstrap, topic string) error {
	defer func() {
		c.mu.Lock()
		c.done = true
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		at := c.now()
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("reading %s: %w", topic, err)
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			k := parseRescaleKey(r.Key)
			ws, ns, ok := strings.Cut(string(r.Value), ",")
			start, err1 := strconv.ParseInt(ws, 10, 64)
			n, err2 := strconv.ParseInt(ns, 10, 64)
			if k < 0 || k >= c.keys || !ok || err1 != nil || err2 != nil || n < 1 {
				if bad == nil {
					bad = fmt.Errorf("%s partition %d offset %d: %q=%q is no key's count in a window", topic, r.Partition, r.Offset, r.Key, r.Value)
				}
				return
			}
			c.result(k, start, n, at)
		})
		if bad != nil {
			return bad
		}
	}
}

// windowResult is one window's outcome.
type windowResult struct {
	Start                time.Time
	Keys                 int
	Elements             int64
	Published            bool // the generator produced in it
	Complete, Duplicated bool
	Missing, Wrong       int // expected keys without a result; results with another count
	// Of the keys with several results: those that add up to the count
	// (Split: fired in several panes) and those that repeat it (Repeated).
	Split, Repeated int
	Skew            time.Duration
	CompleteAt      time.Time
	CoveredAt       time.Time // every produced key had a result, right or not
}

// results lists every window, in time order.
func (c *windowChecker) results() []windowResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []windowResult
	for start, w := range c.windows {
		r := windowResult{Start: time.UnixMilli(start), Keys: w.expectedKeys, Elements: w.elements, Published: w.expected != nil,
			Duplicated: w.dups > 0, Wrong: w.wrong, CompleteAt: w.completeAt, CoveredAt: w.coveredAt}
		if w.expected != nil {
			for k, n := range w.expected {
				if n > 0 && w.got[k] == 0 {
					r.Missing++
				}
			}
			for k, sum := range w.later {
				switch int64(w.expected[k]) {
				case w.got[k] + sum:
					r.Split++
				case w.got[k]:
					r.Repeated++
				}
			}
		}
		if !w.completeAt.IsZero() {
			r.Complete = true
			r.Skew = w.completeAt.Sub(r.Start.Add(rescaleWindow))
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b windowResult) int { return a.Start.Compare(b.Start) })
	return out
}
