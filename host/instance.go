package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

type instanceConfig struct {
	plan     *translate.Plan
	opts     Options
	topics   *topicSet
	execs    map[string]stageExecutor
	stateDir string
	logger   *slog.Logger
	metrics  *metricStore
}

// instance is one member of the application's consumer group. It owns the
// Kafka client (consumer and producer), the Pebble store and the tasks of the
// partitions assigned to it.
//
// Its loop alternates: poll records, hand each task its partition's records,
// and every commit interval commit: every task closes its bundles and fires
// what its watermark allows, then the producer is flushed, the tasks' state
// batches are applied and the consumed offsets are committed. Rebalances only
// happen between iterations (BlockRebalanceOnPoll), so a task never moves
// with a bundle open.
type instance struct {
	cfg    instanceConfig
	cl     *kgo.Client
	db     *pebble.DB
	codecs map[string]*shuffle.ElementCodec // by PCollection id

	subByTopic map[string]*translate.SubTopology // by full topic name
	execs      map[string]stageExecutor          // by stage id
	side       *sideInputReader
	// timerCodecs parse the timers of each (transform, family).
	timerCodecs map[[2]string]*shuffle.TimerCodec

	mu    sync.Mutex // guards tasks against the rebalance callbacks
	tasks map[taskID]*task

	produceErr atomic.Pointer[error]
	failed     atomic.Bool // run returned an error: revocation must not commit
}

type taskID struct {
	topic     string
	partition int32
}

func newInstance(cfg instanceConfig) (*instance, error) {
	i := &instance{
		cfg:        cfg,
		codecs:     map[string]*shuffle.ElementCodec{},
		subByTopic: map[string]*translate.SubTopology{},
		tasks:      map[taskID]*task{},
	}
	coders := cfg.plan.Pipeline.GetComponents().GetCoders()
	for pcoll, wv := range cfg.plan.WireCoders {
		c, err := shuffle.NewElementCodec(coders, wv)
		if err != nil {
			return nil, fmt.Errorf("pcollection %s: %w", pcoll, err)
		}
		i.codecs[pcoll] = c
	}
	var topics []string
	for _, st := range cfg.plan.SubTopologies {
		full := cfg.topics.full(st.Input)
		i.subByTopic[full] = st
		topics = append(topics, full)
	}
	db, err := pebble.Open(cfg.stateDir, &pebble.Options{Logger: pebbleLogger{cfg.logger}})
	if err != nil {
		return nil, fmt.Errorf("state store %s: %w", cfg.stateDir, err)
	}
	i.db = db
	if i.side, err = newSideInputReader(i); err != nil {
		db.Close()
		return nil, err
	}
	i.timerCodecs = map[[2]string]*shuffle.TimerCodec{}
	if err := i.buildTimerCodecs(); err != nil {
		db.Close()
		return nil, err
	}
	i.execs = map[string]stageExecutor{}
	for _, st := range cfg.plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			i.execs[s.ID] = cfg.execs[s.ID]
		}
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(cfg.opts.BootstrapServers, ",")...),
		kgo.ConsumerGroup(cfg.opts.ApplicationID),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(shuffle.Partitioner()),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<20),
		kgo.FetchMaxBytes(64<<20),
		kgo.OnPartitionsAssigned(i.onAssigned),
		kgo.OnPartitionsRevoked(i.onRevoked),
		kgo.OnPartitionsLost(i.onLost),
	)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	i.cl = cl
	return i, nil
}

func (i *instance) close() {
	i.cl.CloseAllowingRebalance()
	i.mu.Lock()
	for id, t := range i.tasks {
		t.abort()
		delete(i.tasks, id)
	}
	i.mu.Unlock()
	i.db.Close()
}

func (i *instance) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for topic, parts := range assigned {
		st := i.subByTopic[topic]
		if st == nil {
			continue
		}
		for _, p := range parts {
			t, err := newTask(i, st, p)
			if err != nil {
				i.setProduceErr(fmt.Errorf("opening task %s/%d: %w", topic, p, err))
				continue
			}
			i.tasks[taskID{topic, p}] = t
			i.cfg.logger.Debug("task assigned", "topic", topic, "partition", p)
		}
	}
}

// onRevoked commits the revoked tasks' work before giving them up, so the
// next owner starts where this one stopped.
func (i *instance) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if i.failed.Load() {
		// A task failed (its failed input is no longer pending): committing
		// now would commit the offsets of input that was never processed.
		i.dropTasks(revoked)
		return
	}
	if err := i.commit(ctx); err != nil {
		i.setProduceErr(fmt.Errorf("commit before revocation: %w", err))
	}
	i.dropTasks(revoked)
}

func (i *instance) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	i.dropTasks(lost)
}

func (i *instance) dropTasks(parts map[string][]int32) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			id := taskID{topic, p}
			if t := i.tasks[id]; t != nil {
				t.abort()
				delete(i.tasks, id)
			}
		}
	}
}

func (i *instance) setProduceErr(err error) { i.produceErr.CompareAndSwap(nil, &err) }

func (i *instance) failure() error {
	if p := i.produceErr.Load(); p != nil {
		return *p
	}
	return nil
}

// run processes records until ctx ends (nil) or a task fails.
func (i *instance) run(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			// The tasks' current work failed: closing must not commit it.
			i.failed.Store(true)
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sideDone := make(chan struct{})
	go func() {
		defer close(sideDone)
		if err := i.side.run(ctx, i.cfg.opts.BootstrapServers); err != nil {
			i.setProduceErr(err)
		}
	}()
	defer func() { cancel(); <-sideDone }()
	interval := i.cfg.opts.commitInterval()
	for {
		pollCtx, cancel := context.WithTimeout(ctx, interval)
		fetches := i.cl.PollRecords(pollCtx, 100000)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		var fetchErr error
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && fetchErr == nil {
				fetchErr = fmt.Errorf("fetching %s/%d: %w", topic, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		if err := i.failure(); err != nil {
			return err
		}
		if err := i.process(ctx, fetches); err != nil {
			return err
		}
		if err := i.commit(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		i.cl.AllowRebalance()
	}
}

// process hands every task its records; tasks run in parallel.
func (i *instance) process(ctx context.Context, fetches kgo.Fetches) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, len(i.tasks))
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		t := i.tasks[taskID{p.Topic, p.Partition}]
		if t == nil {
			return // revoked between poll and now; the records will be redelivered
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.handle(ctx, p.Records); err != nil {
				errs <- err
			}
		}()
	})
	wg.Wait()
	close(errs)
	return <-errs
}

// commit closes every task's bundles, fires due windows, reports watermarks,
// flushes the producer, applies the state batches and commits offsets, in
// that order: state and offsets never get ahead of the data they cover.
func (i *instance) commit(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, len(i.tasks))
	for _, t := range i.tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.prepareCommit(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := i.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flushing the producer: %w", err)
	}
	if err := i.failure(); err != nil {
		return err
	}
	for _, t := range i.tasks {
		if err := t.commitState(); err != nil {
			return err
		}
	}
	if err := i.cl.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("committing offsets: %w", err)
	}
	sent := false
	for _, t := range i.tasks {
		for _, f := range t.finalizers {
			if err := f(ctx); err != nil {
				i.cfg.logger.Warn("bundle finalization failed", "task", t.producer, "error", err)
			}
		}
		t.finalizers = nil
		sent = t.sendStatus() || sent
	}
	if sent {
		if err := i.cl.Flush(ctx); err != nil {
			return fmt.Errorf("flushing task status: %w", err)
		}
	}
	return i.failure()
}

func (i *instance) produce(r *kgo.Record) {
	i.cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		if err != nil {
			i.setProduceErr(fmt.Errorf("producing to %s: %w", r.Topic, err))
		}
	})
}

// pebbleLogger sends Pebble's chatter to debug level.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

func (i *instance) buildTimerCodecs() error {
	comps := i.cfg.plan.Pipeline.GetComponents()
	for _, st := range i.cfg.plan.SubTopologies {
		for _, s := range st.Stages {
			for _, f := range s.TimerFamilies {
				c, err := shuffle.NewTimerCodec(comps.GetCoders(), f.CoderID)
				if err != nil {
					return fmt.Errorf("transform %s timer family %s: %w", f.TransformID, f.FamilyID, err)
				}
				i.timerCodecs[[2]string{f.TransformID, f.FamilyID}] = c
			}
		}
	}
	return nil
}
