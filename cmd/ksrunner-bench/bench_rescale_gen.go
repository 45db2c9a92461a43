package main

// The generator of `bench rescale`.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// generator produces the input: keys round-robin over the key set, each
// record stamped with the wall clock of its 10 ms step (the event time). It
// counts what it makes per window and key and hands each window's counts to
// the checker once it has moved past the window (the pipeline cannot fire a
// window before input past its end exists, so the counts are there first).
type generator struct {
	// produceCtx is the records' context, the bench's: a record must
	// outlive the run that made it (priming ends with records in flight).
	produceCtx context.Context
	cl         *kgo.Client
	topic      string
	check      *windowChecker
	latency    *msHistogram // record made to acked
	keys       [][]byte
	value      []byte

	// Owned by the goroutine calling run and finish.
	cur    int64   // start (ms) of the window counts is of; -1: none
	counts []int32 // by key
	n      int     // records made; n % len(keys) is the next key

	mu       sync.Mutex
	firstErr error // of a produce
}

func newGenerator(ctx context.Context, cl *kgo.Client, topic string, keys, valueBytes int, check *windowChecker, latency *msHistogram) *generator {
	g := &generator{produceCtx: ctx, cl: cl, topic: topic, check: check, latency: latency, cur: -1}
	for i := range keys {
		g.keys = append(g.keys, rescaleKey(i))
	}
	g.value = make([]byte, valueBytes)
	for i := range g.value {
		g.value[i] = 'v'
	}
	return g
}

// run produces rate records/s until until, or until stop closes or ctx
// ends, in 10 ms steps; it returns how many it made. A failed produce fails
// it (at the next step).
func (g *generator) run(ctx context.Context, rate int, until time.Time, stop <-chan struct{}) (int, error) {
	start := time.Now()
	step := max(rate/100, 1)
	var now time.Time
	made := 0
	for ; ; made++ {
		if made%step == 0 {
			if err := waitDue(ctx, start, made, rate); err != nil {
				return made, err
			}
			now = time.Now()
			if !now.Before(until) {
				return made, nil
			}
			select {
			case <-stop:
				return made, nil
			default:
			}
			if err := g.err(); err != nil {
				return made, err
			}
		}
		ms := now.UnixMilli()
		if w := ms - ms%rescaleWindow.Milliseconds(); w != g.cur {
			if g.cur >= 0 {
				g.check.publish(g.cur, g.counts)
			}
			g.cur, g.counts = w, make([]int32, len(g.keys))
		}
		k := g.n % len(g.keys)
		g.n++
		g.counts[k]++
		g.cl.Produce(g.produceCtx, &kgo.Record{Topic: g.topic, Key: g.keys[k], Value: g.value, Timestamp: now}, g.done)
	}
}

func (g *generator) done(r *kgo.Record, err error) {
	g.latency.add(time.Since(r.Timestamp))
	if err != nil {
		g.mu.Lock()
		if g.firstErr == nil {
			g.firstErr = fmt.Errorf("producing to %s partition %d: %w", r.Topic, r.Partition, err)
		}
		g.mu.Unlock()
	}
}

func (g *generator) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.firstErr
}

// finish hands the last window to the checker and waits until every
// record is acked.
func (g *generator) finish(ctx context.Context) error {
	if g.cur >= 0 {
		g.check.publish(g.cur, g.counts)
		g.cur = -1
	}
	if err := g.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flushing the producer: %w", err)
	}
	return g.err()
}
