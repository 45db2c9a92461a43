package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/host/internal/topics"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// instance is one member of the application's consumer group. It owns the
// Kafka client (consumer and producer), the Pebble store and the tasks of the
// partitions assigned to it.
//
// Its loop alternates: poll records, (exactly_once) begin a transaction,
// hand each task its partition's records, and commit: every task closes its
// bundles, fires what its watermark allows and produces its state changes to
// its changelog; then exactly_once ends the transaction (which commits the
// consumed offsets) and applies the tasks' state batches only if it
// committed; at_least_once flushes, commits the offsets and applies the
// batches. Rebalances only happen between iterations (BlockRebalanceOnPoll),
// so a task never moves with a bundle or a transaction open; group.go says
// how a rebalance, a lost membership and leaving the group are handled.
type instance struct {
	cfg    Config
	topics *topics.Set
	env    *task.Env // what the tasks share
	cl     *kgo.Client
	sess   *kgo.GroupTransactSession // exactly_once: the session cl belongs to; nil at_least_once
	admin  *kgo.Client               // for changelog offsets
	db     *pebble.DB
	codecs map[string]*shuffle.ElementCodec // by PCollection id

	subByTopic map[string]*translate.SubTopology // by full topic name
	side       *sideInputReader
	purge      *purger
	sourceEnds *sourceEnds // when the Kafka reads' partitions are caught up
	standby    *standby    // nil: num_standby_replicas 0
	stored     *storedTasks
	// storedAt is when the commit loop last refreshed stored.
	storedAt time.Time
	// timerCodecs parse the timers of each (transform, family).
	timerCodecs map[[2]string]*shuffle.TimerCodec

	mu    sync.Mutex // guards tasks against the rebalance callbacks
	tasks map[taskID]*task.Task
	inTxn bool // a transaction is open (only the loop touches it)

	produceErr atomic.Pointer[error]
	failed     atomic.Bool // run returned an error: revocation must not commit
	// cycleStart is when the running commit cycle began, in the tasks'
	// clock (Unix ns): their splittable work is checkpointed in time
	// after it (task.Env.CycleStart).
	cycleStart atomic.Int64
	rebalance  rebalanceState // exactly_once: what the loop learns from the callbacks (group.go)

	ident    identity
	joinedAt time.Time   // when the client was created, joining the group
	assigned atomic.Bool // the group has assigned partitions once
	// restarted: this process ran the job in an earlier instance, which
	// an outage or a rejected transaction ended (runInstances).
	restarted bool
	// committedCycles counts the cycles this instance committed (only the
	// loop touches it; runInstances reads it after run returns).
	committedCycles int
	// cycleMark is the brokers' failure count when the running cycle
	// began (reach.troubleSince; only the loop touches it); prevMark when
	// the cycle before it began.
	cycleMark, prevMark int64
	observed            observed     // what observe measured last (observe.go)
	pollSize            pollSize     // records a poll takes for the cycle's elements (only the loop touches it)
	intake              intake       // polled records not yet handed to tasks; each cycle's cut (intake.go)
	cycleBound          cycleBound   // elements the next cycle's cut takes at most (only the loop touches it)
	fireBound           cycleBound   // groups a task's GroupByKey fires in the next cycle at most (only the loop touches it)
	fireLimit           atomic.Int64 // fireBound's limit, for the tasks (task.Env.FireLimit)
	mostFired           atomic.Int64 // the most groups one task fired in the running cycle (task.Env.Fired)
	watch               *cycleWatch  // names the loop's step; run's goroutine warns when one lasts
	offsets             offsetWait   // assigned partitions whose committed offsets have not come yet
	starts              startCommits // Kafka read partitions started without a commit, to commit (kafkaio.go)
	hangCheck           time.Time    // when checkOffsetWait last looked for a hanging transaction
	hangFound           string       // what it found then
	// writtenLookDue and writtenLookMark say when reconcileWritten must
	// look before End: at the instance's first, after an End that did not
	// commit, after a broker failure since the mark (hangingdata.go).
	writtenLookDue  bool
	writtenLookMark int64
	// carriedInTxn is how many carried records the running transaction
	// produced first (hangingdata.go).
	carriedInTxn int
	// unconfirmedCommit is set by the client's logger when End's commit
	// got UNKNOWN_SERVER_ERROR and it aborted anew (kgoLogger).
	unconfirmedCommit atomic.Bool
	// txnMark is where the running transaction's first acknowledged
	// record landed: its marker follows it there (hangingtxn.go).
	txnMark atomic.Pointer[producedMark]
	// wroteConsumed: the running cycle produced a record to a topic this
	// instance consumes, which its commit makes readable (postCommitWait).
	wroteConsumed atomic.Bool
}

type taskID struct {
	topic     string
	partition int32
}

// newInstance opens the store in stateDir and the Kafka client. stable says
// that stateDir outlives the process (an explicit state_dir), so it keeps
// the instance's identity; under exactly_once the new producer fences the
// transactions of any predecessor with that identity before it returns.
// prev is the identity of the instance this one replaces in this process
// (runInstances), nil for the first: it keeps that identity and fences it.
func newInstance(ctx context.Context, cfg Config, ts *topics.Set, stateDir string, stable bool, prev *identity) (*instance, error) {
	i := &instance{
		cfg:        cfg,
		topics:     ts,
		codecs:     map[string]*shuffle.ElementCodec{},
		subByTopic: map[string]*translate.SubTopology{},
		pollSize:   newPollSize(cfg.RecordPackBytes),
		// The first cycle's outage window starts here (outage).
		cycleMark: cfg.reach.mark(),
		tasks:     map[taskID]*task.Task{},
		restarted: prev != nil,

		writtenLookDue: true,
		watch:          newCycleWatch(cfg),
	}
	i.fireLimit.Store(task.DefaultMaxFiredGroups) // until the first cycle sets it
	i.rebalance.init()
	coders := cfg.Plan.Pipeline.GetComponents().GetCoders()
	for pcoll, wv := range cfg.Plan.WireCoders {
		c, err := shuffle.NewElementCodec(coders, wv)
		if err != nil {
			return nil, fmt.Errorf("pcollection %s: %w", pcoll, err)
		}
		i.codecs[pcoll] = c
	}
	var topics []string
	for _, st := range cfg.Plan.SubTopologies {
		if cfg.Skip[st.ID] {
			continue
		}
		full := ts.Full(st.Input)
		i.subByTopic[full] = st
		topics = append(topics, full)
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("this instance can run none of the job's %d sub-topologies (see the stages it cannot run above)", len(cfg.Plan.SubTopologies))
	}
	db, err := pebble.Open(stateDir, &pebble.Options{Logger: pebbleLogger{cfg.Logger}})
	if err != nil {
		return nil, fmt.Errorf("state store %s: %w", stateDir, err)
	}
	i.db = db
	// After Open: Pebble's lock on stateDir keeps a second process from
	// taking the same identity.
	switch {
	case prev != nil:
		i.ident = *prev
	case stable:
		i.ident, err = loadIdentity(stateDir)
		if err != nil {
			db.Close()
			return nil, err
		}
		i.reportIdentity()
		emptied, err := checkIncarnation(db, stateDir, cfg.incarnation)
		if err != nil {
			db.Close()
			return nil, err
		}
		if emptied {
			msg := fmt.Sprintf("the application's topics were made again since the local store %s was written (a reset, or a bounded job done): it starts empty and restores from the new changelogs", stateDir)
			cfg.Logger.Warn(msg)
			if cfg.Progress != nil {
				cfg.Progress(msg)
			}
		}
	default:
		i.ident = randomIdentity()
		i.reportIdentity()
	}
	cfg.Observer.SetID(i.ident.id)
	if i.side, err = newSideInputReader(i); err != nil {
		db.Close()
		return nil, err
	}
	i.timerCodecs = map[[2]string]*shuffle.TimerCodec{}
	if err := i.buildTimerCodecs(); err != nil {
		db.Close()
		return nil, err
	}
	// The tasks' environment exists before the client: the client may
	// assign partitions (onAssigned opens tasks) as soon as it exists.
	i.env = &task.Env{
		Plan:          cfg.Plan,
		Topics:        ts,
		Codecs:        i.codecs,
		TimerCodecs:   i.timerCodecs,
		Execs:         cfg.Execs,
		DB:            i.db,
		Metrics:       cfg.Metrics,
		Logger:        cfg.Logger,
		MaxBundleSize: cfg.MaxBundleSize,
		MaxBundleTime: cfg.MaxBundleTime,
		// A cycle must commit within the transaction timeout; a bundle
		// of a splittable DoFn is checkpointed after max_bundle_time_ms
		// (Beam's bound on a bundle's age), and never later than half
		// the timeout.
		CheckpointAfter:    min(cfg.MaxBundleTime, cfg.transactionTimeout()/2),
		MaxCheckpointAfter: cfg.transactionTimeout() / 2,
		CycleStart:         i.cycleStarted,
		Steals:             task.NewStealBoard(),
		// A cycle fires at most as many stored groups as it reads
		// elements, and no more than the default: a stored group costs
		// more to fire than an element to read (a read from the store,
		// its deletes and their changelog records), and windowed-10m's
		// last cycles peaked 40 MiB higher at 250,000 groups a cycle.
		MaxFiredGroups: min(cmp.Or(cfg.MaxPollRecords, DefaultMaxPollRecords), task.DefaultMaxFiredGroups),
		FireLimit:      func() int { return int(i.fireLimit.Load()) },
		Fired:          i.noteFired,
		ExactlyOnce:    cfg.ExactlyOnce,
		Produce:        i.produce,
		ProduceWith: func(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
			i.noteWritten(r.Topic)
			i.cl.Produce(ctx, r, promise)
		},
		Fail:              i.setProduceErr,
		SideWatermark:     i.side.watermark,
		SideCache:         i.side.cache,
		SourceIdleTimeout: cfg.SourceIdleTimeout,
		SourceMaxDelay:    cfg.SourceMaxDelay,
		ReadBounds:        cfg.readBounds,
		Draining:          cfg.Draining,
		BadRecords:        cfg.BadRecords,
	}
	if cfg.Hooks != nil {
		i.env.Now = cfg.Hooks.Now
	}
	if i.admin, err = kafkaconn.NewClient(cfg.BootstrapServers, cfg.Security, cfg.reach.opts()...); err != nil {
		db.Close()
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	purged := map[string]bool{}
	if !cfg.KeepInternalTopics {
		for _, tp := range cfg.Plan.Topics {
			// Shuffle topics: read by one sub-topology of this group only.
			if tp.Kind == translate.TopicRepartition || tp.Kind == translate.TopicRedistribute {
				purged[ts.Full(tp.Name)] = true
			}
		}
	}
	i.purge = newPurger(i.admin, purged, cfg.Logger)
	var sources []string
	for topic, st := range i.subByTopic {
		if isSource(st) {
			sources = append(sources, topic)
		}
	}
	i.sourceEnds = newSourceEnds(kadm.NewClient(i.admin), sources)
	i.standby = newStandby(i) // before the client: its callbacks use it
	opts := kafkaconn.Opts(cfg.BootstrapServers, cfg.Security,
		kgo.ConsumerGroup(cfg.ApplicationID),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(partitioner{data: shuffle.Partitioner()}),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<20),
		kgo.FetchMaxBytes(64<<20),
		kgo.OnPartitionsAssigned(i.onAssigned),
		kgo.OnPartitionsRevoked(i.onRevoked),
		kgo.OnPartitionsLost(i.onLost),
		kgo.OnPartitionsCallbackBlocked(i.onBlocked),
		kgo.AdjustFetchOffsetsFn(i.startOffsets),
		kgo.WithLogger(kgoLogger{cfg.Logger, cfg.reach, &i.unconfirmedCommit}),
	)
	inputs := map[uint32]string{}
	for _, st := range cfg.Plan.SubTopologies {
		if statefulSubTopology(st) {
			inputs[uint32(st.ID)] = ts.Full(st.Input)
		}
	}
	i.stored = newStoredTasks(inputs)
	if err := i.stored.refresh(db); err != nil {
		i.admin.Close()
		db.Close()
		return nil, fmt.Errorf("state store %s: listing the stored tasks: %w", stateDir, err)
	}
	i.storedAt = time.Now()
	opts = append(opts, cfg.groupOpts(i.stored.get)...)
	opts = append(opts, cfg.reach.opts()...)
	opts = append(opts, i.clientID()) // before the Kafka IO settings: a read's client.id wins
	if err := setGroupSessionTimeout(ctx, i.admin, cfg); err != nil {
		i.admin.Close()
		db.Close()
		return nil, err
	}
	// The settings of the plan's Kafka reads and writes, after the
	// defaults above, which they override (checkKafkaIO has checked them).
	cc, err := kafkaClientConfig(cfg.Plan, cfg.ExactlyOnce)
	if err != nil {
		i.admin.Close()
		db.Close()
		return nil, err
	}
	opts = append(opts, cc.opts...)
	limits, err := cc.producerLimits(ts)
	if err != nil {
		i.admin.Close()
		db.Close()
		return nil, err
	}
	opts = append(opts, limits...)
	i.env.MaxRecordBytes = cc.batchMaxBytes // before any task exists
	i.env.RecordPackBytes = cfg.RecordPackBytes
	if gid := i.ident.groupInstanceID(cfg.ApplicationID); gid != nil {
		// Static membership: a restart rejoins as the same member and gets
		// its assignment back at once; a dynamic member killed holds its
		// partitions until its session expires.
		opts = append(opts, kgo.InstanceID(*gid))
	}
	i.joinedAt = time.Now()
	if cfg.ExactlyOnce {
		// One transactional producer per instance. Zombies are fenced by
		// the group's generation (KIP-447) and, across a restart on the
		// same state_dir, by the stable transactional id.
		opts = append(opts,
			kgo.TransactionalID(i.ident.transactionalID(cfg.ApplicationID)),
			kgo.TransactionTimeout(cfg.transactionTimeout()),
		)
		i.sess, err = kgo.NewGroupTransactSession(opts...)
		if err == nil {
			i.cl = i.sess.Client()
		}
	} else {
		i.cl, err = kgo.NewClient(opts...)
	}
	if err != nil {
		i.admin.Close()
		db.Close()
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	// Only a stable identity, or an instance replacing one of this
	// process, has a predecessor to fence; a random one initializes its
	// producer lazily, at its first transaction, as before (an early init
	// racing the group join is suspected of a rare INVALID_TXN_STATE on
	// kfake).
	if cfg.ExactlyOnce {
		// The looks for hanging transactions cover what the plan writes
		// from the start, not only what this process wrote yet: a hang a
		// predecessor left (hangingdata.go).
		for _, t := range ts.Written() {
			cfg.written.wrote(t)
		}
	}
	if cfg.ExactlyOnce && (i.ident.stable || i.restarted) {
		if err := i.reconcileBeforeFence(ctx); err != nil {
			i.closeForRestart()
			return nil, err
		}
		if err := i.fence(ctx); err != nil {
			i.closeForRestart()
			return nil, err
		}
	}
	i.progress(fmt.Sprintf("joining consumer group %s; waiting for its partitions", cfg.ApplicationID))
	return i, nil
}

// fence initializes the transactional producer now rather than at the first
// cycle's first record. With a stable identity this is what fences the
// predecessor: the broker aborts the transaction it left open (and fails
// its producer, were it still alive) before it answers, so the tasks'
// changelog restores and every read_committed reader of the outputs go on
// at once. It also checks the transaction timeout against the broker's
// transaction.max.timeout.ms before any work is done.
//
// It runs concurrently with the group join (the client joins from its
// creation): a restore that starts first waits for the abort like any
// read_committed reader.
func (i *instance) fence(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, i.restoreTimeout())
	defer cancel()
	txnID := i.ident.transactionalID(i.cfg.ApplicationID)
	if _, _, err := i.cl.ProducerID(ctx); err != nil {
		if errors.Is(err, kerr.InvalidTransactionTimeout) {
			return fmt.Errorf("option transaction_timeout_ms: %d: the broker refuses it (above its transaction.max.timeout.ms): %w", i.cfg.transactionTimeout().Milliseconds(), err)
		}
		return fmt.Errorf("initializing the transactional producer %s: %w", txnID, err)
	}
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case i.restarted:
		i.progress(fmt.Sprintf("transactional id %s: fenced this process's previous instance (its open transaction, if any, is aborted) in %v", txnID, took))
	case i.ident.stable && !i.ident.created:
		i.progress(fmt.Sprintf("transactional id %s: fenced the previous process of this state_dir (its open transaction, if any, is aborted) in %v", txnID, took))
	default:
		i.progress(fmt.Sprintf("transactional id %s initialized in %v", txnID, took))
	}
	return nil
}

// reportIdentity says who the instance is, and what that means for a
// restart.
func (i *instance) reportIdentity() {
	app := i.cfg.ApplicationID
	switch {
	case !i.ident.stable:
		i.progress(fmt.Sprintf("instance identity %s (random: no state_dir, so the store is temporary): a restarted job server gets a new identity, so it cannot fence this process's open transaction (readers wait up to transaction_timeout_ms) and joins the group as a new member", i.ident.id))
	case i.ident.created:
		i.progress(fmt.Sprintf("instance identity %s created in %s: transactional id and group.instance.id %s-%s", i.ident.id, i.ident.file, app, i.ident.id))
	default:
		i.progress(fmt.Sprintf("instance identity %s read from %s (a restart): transactional id and group.instance.id %s-%s", i.ident.id, i.ident.file, app, i.ident.id))
	}
}

// progress logs a step of the instance's start or recovery and tells the
// job's client (Config.Progress).
func (i *instance) progress(msg string) {
	i.cfg.Logger.Info(msg)
	if i.cfg.Progress != nil {
		i.cfg.Progress(msg)
	}
}

// closeForRestart closes the instance for another to replace it in this
// process (runInstances): a dynamic member leaves the group, for at most
// restartLeaveTimeout (the coordinator may be out of reach: its session
// then expires), a static one keeps its membership for its successor.
func (i *instance) closeForRestart() {
	i.cl.AllowRebalance()
	ctx, cancel := context.WithTimeout(context.Background(), restartLeaveTimeout)
	i.cl.LeaveGroupContext(ctx)
	cancel()
	i.close(false)
}

// restartLeaveTimeout bounds closeForRestart's leaving the group.
const restartLeaveTimeout = 5 * time.Second

// close closes the client, the tasks and the store. leave says that the job
// ends on purpose, so a static member leaves the group too (group.go); else
// it keeps its membership for its restart.
func (i *instance) close(leave bool) {
	memberID, _ := i.cl.GroupMetadata() // the KIP-848 member id, for leaveGroup
	if i.sess != nil {
		i.sess.CloseAllowingRebalance()
	} else {
		i.cl.CloseAllowingRebalance()
	}
	if leave {
		i.leaveGroup(memberID)
	}
	i.admin.Close()
	i.mu.Lock()
	for id, t := range i.tasks {
		t.Abort()
		delete(i.tasks, id)
	}
	i.mu.Unlock()
	i.db.Close()
}

func (i *instance) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	i.rebalance.assignedNow()
	i.mu.Lock()
	defer i.mu.Unlock()
	var ids []taskID
	for topic, parts := range assigned {
		if i.subByTopic[topic] == nil {
			continue
		}
		for _, p := range parts {
			ids = append(ids, taskID{topic, p})
		}
	}
	if h := i.cfg.Hooks; h != nil && h.Assigning != nil {
		for _, id := range ids {
			h.Assigning(i.subByTopic[id.topic].ID, id.partition)
		}
	}
	i.standby.activate(ids) // before their restore: stop following them
	if !i.assigned.Swap(true) {
		i.progress(fmt.Sprintf("consumer group %s: %d partitions assigned after %v", i.cfg.ApplicationID, len(ids), time.Since(i.joinedAt).Round(time.Millisecond)))
	}
	start := time.Now()
	if len(ids) > 0 {
		i.progress(fmt.Sprintf("restoring the state of %d tasks from their changelogs", len(ids)))
		i.watch.enterQuiet(stepRestore)
		defer i.watch.enter(stepPoll)
	}
	if err := i.growChangelogs(ctx, ids); err != nil {
		i.setProduceErr(err)
		return
	}
	if err := i.restoreTasks(ctx, ids); err != nil {
		i.setProduceErr(err)
		return
	}
	if len(ids) > 0 {
		i.progress(fmt.Sprintf("state of %d tasks restored in %v", len(ids), time.Since(start).Round(time.Millisecond)))
	}
	// The client fetches their committed offsets once this returns.
	i.offsets.assigned(ids, time.Now())
	for _, id := range ids {
		t, err := task.New(i.taskEnv(id), i.subByTopic[id.topic], id.partition)
		if err != nil {
			i.setProduceErr(fmt.Errorf("opening task %s/%d: %w", id.topic, id.partition, err))
			continue
		}
		i.tasks[id] = t
		i.cfg.Logger.Debug("task assigned", "topic", id.topic, "partition", id.partition)
		if h := i.cfg.Hooks; h != nil && h.Assigned != nil {
			h.Assigned(i.subByTopic[id.topic].ID, id.partition)
		}
	}
}

// onRevoked gives up the revoked tasks, and only them: under the
// cooperative protocols (group.go) a rebalance revokes just the partitions
// that move, and the other tasks keep their in-memory state and go on.
// Callbacks run only between cycles (BlockRebalanceOnPoll: while the loop
// polls, after AllowRebalance), when no bundle or transaction is open.
// at_least_once commits the tasks' work first, so the next owner starts
// where this one stopped; exactly_once has nothing to commit, every task's
// work having committed with the last transaction. The revoked tasks' state
// stays in the local store with its changelog position: if a task comes
// back, its restore replays only the changelog's tail (restoreTask).
func (i *instance) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	if i.sess != nil {
		i.rebalance.revokedNow(cl, len(revoked), !i.cfg.consumerProtocol())
	}
	if i.failed.Load() || i.sess != nil {
		// A task failed (its failed input is no longer pending): committing
		// now would commit the offsets of input that was never processed.
		i.dropTasks(revoked)
		return
	}
	if err := i.commit(ctx, 0); err != nil {
		i.setProduceErr(fmt.Errorf("commit before revocation: %w", err))
	}
	i.dropTasks(revoked)
}

// onLost drops the tasks of a lost assignment (the session expired or the
// member was fenced): another member may own their partitions already, so
// nothing of theirs may commit. The cycle that was running when the loss
// happened has aborted (exactly_once: its offsets did not commit, so the
// session aborted the transaction; at_least_once: commitAtLeastOnce).
func (i *instance) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if i.sess != nil {
		i.rebalance.lostNow()
	}
	i.dropTasks(lost)
}

func (i *instance) dropTasks(parts map[string][]int32) {
	i.offsets.dropped(parts)
	i.intake.dropPartitions(parts)
	i.mu.Lock()
	defer i.mu.Unlock()
	defer i.standby.deactivate(parts) // after they stopped writing
	for topic, ps := range parts {
		for _, p := range ps {
			id := taskID{topic, p}
			if t := i.tasks[id]; t != nil {
				t.Abort()
				delete(i.tasks, id)
			}
			i.cfg.Stats.dropped(topic, p)
		}
	}
}

// resetTasks drops every task's uncommitted work (state batches, open
// bundles, in-memory state) and opens the tasks again from the store, which
// holds exactly the committed cycles' state. The caller holds mu and makes
// consumption restart at the committed offsets (so the intake's carried
// records go too: they are fetched again).
func (i *instance) resetTasks() {
	i.resumeSources()
	i.intake.drop()
	ids := make([]taskID, 0, len(i.tasks))
	for id, t := range i.tasks {
		t.Abort()
		ids = append(ids, id)
	}
	for _, id := range ids {
		delete(i.tasks, id)
		nt, err := task.New(i.taskEnv(id), i.subByTopic[id.topic], id.partition)
		if err != nil {
			i.setProduceErr(fmt.Errorf("reopening task %s/%d: %w", id.topic, id.partition, err))
			continue
		}
		i.tasks[id] = nt
	}
}

// now is the tasks' clock (Hooks.Now in tests).
func (i *instance) now() time.Time {
	if i.env.Now != nil {
		return i.env.Now()
	}
	return time.Now()
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
			// A cycle the brokers' outage failed, or whose transaction
			// the coordinator rejected, is redone by a new instance,
			// whose producer fences this one's transaction.
			err = i.outage(err)
			if i.sess != nil {
				err = rejectedTxn(err)
			}
		}
		var outage *outageError
		var rejected *rejectedTxnError
		if i.inTxn && !errors.As(err, &outage) && !errors.As(err, &rejected) {
			// Abort now rather than leave the transaction to time out,
			// holding back read_committed readers of its partitions.
			actx, cancel := i.endContext(ctx)
			if _, aerr := i.sess.End(actx, kgo.TryAbort); aerr != nil {
				i.cfg.Logger.Warn("aborting the open transaction", "error", aerr)
			}
			cancel()
			i.inTxn = false
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sideDone := make(chan struct{})
	go func() {
		defer close(sideDone)
		if err := i.side.run(ctx, i.cfg.BootstrapServers, i.cfg.Security); err != nil {
			i.setProduceErr(err)
		}
	}()
	purgeDone := make(chan struct{})
	go func() {
		defer close(purgeDone)
		i.purge.run(ctx)
	}()
	endsDone := make(chan struct{})
	go func() {
		defer close(endsDone)
		i.runSourceEnds(ctx, max(i.cfg.CommitInterval, 10*time.Millisecond))
	}()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		i.watch.watch(ctx, time.Second)
	}()
	defer func() { cancel(); <-sideDone; <-purgeDone; <-endsDone; <-watchDone }()
	defer i.standby.start(ctx, i.cl)()
	// A poll takes about MaxPollRecords elements (pollSize: a packed
	// record counts its elements), waiting at most MaxPollTime for them;
	// then the cycle commits what it has.
	pollTime := i.cfg.MaxPollTime
	if pollTime <= 0 {
		pollTime = i.cfg.CommitInterval
	}
	for {
		i.markCycle()
		pollCtx, cancel := context.WithTimeout(ctx, i.pollWait(pollTime))
		maxElements := i.cfg.MaxPollRecords
		if maxElements <= 0 {
			maxElements = DefaultMaxPollRecords
		}
		if h := i.cfg.Hooks; h != nil && h.MaxPollRecords != nil && h.MaxPollRecords() > 0 {
			maxElements = h.MaxPollRecords()
		}
		// Up to twice the bound, less what is carried: enough to see
		// the partitions behind a long run of one (intake).
		want := max(1, 2*maxElements-i.intake.size())
		i.watch.enter(stepPoll)
		fetches := i.cl.PollRecords(pollCtx, i.pollSize.records(want))
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		fetches = i.pollAfterCommit(ctx, fetches, want, postCommitWait(pollTime, i.wroteConsumed.Swap(false)))
		var fetchErr error
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || fetchErr != nil {
				return
			}
			if gs := (*kgo.ErrGroupSession)(nil); errors.As(err, &gs) {
				fetchErr = i.groupSessionError(gs)
				return
			}
			if errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition) {
				fetchErr = fmt.Errorf("fetching %s/%d: %w (the topic was deleted, or deleted and created again, while the job read it)", topic, p, err)
				return
			}
			fetchErr = fmt.Errorf("fetching %s/%d: %w", topic, p, err)
		})
		if fetchErr != nil {
			return fetchErr
		}
		if err := i.failure(); err != nil {
			return err
		}
		i.rebalance.blocked.Store(false) // the callbacks it waited for ran in the poll
		if i.sess != nil && i.rebalance.pending.Swap(false) {
			i.watch.enter(stepRebalance)
			if err := i.afterRebalance(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			continue
		}
		i.beginCycle()
		if i.sess != nil {
			if err := i.sess.Begin(); err != nil {
				return fmt.Errorf("beginning a transaction: %w", err)
			}
			i.inTxn = true
			i.txnMark.Store(nil)
			i.carriedInTxn = i.produceCarried()
		}
		if i.cycleBound.max != maxElements {
			i.cycleBound = newCycleBound(maxElements, i.cfg.transactionTimeout())
			i.fireBound = newCycleBound(min(maxElements, task.DefaultMaxFiredGroups), i.cfg.transactionTimeout())
		}
		cut := time.Now()
		i.fireLimit.Store(int64(i.fireBound.limit()))
		i.mostFired.Store(0)
		fetches, elements := i.intake.cycle(fetches, i.cycleBound.limit(), maxElements, i.internalTopic)
		i.commitStarts()
		i.watch.enter(stepHandle)
		bad, err := i.process(ctx, fetches)
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			// Bad records under deserialization_error_policy=fail: the
			// cycle commits what came before them, the partitions'
			// offsets at the bad records, so a rerun resumes at them.
			i.rewindTo(bad)
		}
		if err := i.commit(ctx, elements); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		took := time.Since(cut)
		i.cycleBound.observe(elements, took)
		i.fireBound.observe(int(i.mostFired.Load()), took)
		i.cfg.Observer.Bounds(took, i.cycleBound.limit(), i.fireBound.limit())
		if time.Since(i.storedAt) >= storedRefresh {
			// Between commits: the stores are as the changelogs say.
			if err := i.stored.refresh(i.db); err != nil {
				return fmt.Errorf("listing the stored tasks: %w", err)
			}
			i.storedAt = time.Now()
		}
		if len(bad) > 0 {
			errs := make([]error, len(bad))
			for n, b := range bad {
				errs[n] = b
			}
			return errors.Join(errs...)
		}
		i.observe()
		if err := i.checkOffsetWait(ctx); err != nil {
			return err
		}
		i.cl.AllowRebalance()
	}
}

// pollWait is how long the next poll waits for records: pollTime, or less
// if a task's splittable DoFn residual is due before (Task.ResumeAt), so
// that it resumes on time (a residual due at once: the poll does not wait).
// A task's final status (Task.FinalStatusPending) goes out in the next
// cycle's transaction, and a bounded job ends on it: that cycle does not
// wait either, which would add a poll time to every bounded job's end;
// nor does one that fires the due groups a cycle's limit left
// (Task.FirePending), nor one that has carried records to hand out (intake).
// A poll that does not wait takes nothing, not even what the client has
// buffered (franz-go checks the context first): while records are carried
// the client fetches no more, which keeps what the instance holds to the
// intake and one fetch. (Taking the buffered records without waiting, a
// nil context, kept the client fetching: `windowed-1m` peaked 90 MiB
// higher, no faster.)
func (i *instance) pollWait(pollTime time.Duration) time.Duration {
	if i.intake.size() > 0 {
		return 0
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	wait := pollTime
	for _, t := range i.tasks {
		if t.FinalStatusPending() || t.FirePending() {
			return 0
		}
		if at, ok := t.ResumeAt(); ok {
			wait = min(wait, max(at.Sub(i.now()), 0))
		}
	}
	return wait
}

// pollAfterCommit adds to a poll that returned at once (from the client's
// buffer) the fetch the client sent when that poll drained it, if it
// answers within postCommitPollWait.
//
// Why: franz-go keeps one fetch per broker in flight and sends the next only
// once a poll has drained the last. The fetch a cycle's first poll takes
// was sent during the previous cycle, before its transaction committed, so
// under read_committed it holds none of what that commit made readable:
// watermark reports, shuffled data. Without this, what a task commits
// reaches the task that reads it two cycles later, not one, at every hop
// (a window's result passes two: source → GroupByKey, and its own commit);
// the input's records likewise. Under load, when fetches answer at once
// (data is waiting), the second poll costs a round trip; idle, at most
// postCommitPollWait.
//
// maxElements bounds the elements of both polls together; the density of
// what they brought sizes the next cycle's poll (pollSize). wait is
// postCommitWait's. It returns the records of both polls, which go to the
// intake.
func (i *instance) pollAfterCommit(ctx context.Context, fetches kgo.Fetches, maxElements int, wait time.Duration) kgo.Fetches {
	records := fetches.NumRecords()
	if records == 0 {
		return fetches // the poll waited for this fetch
	}
	elements := elementsIn(fetches, i.internalTopic)
	i.pollSize.observe(elements, records)
	if elements >= maxElements || wait <= 0 {
		return fetches // the poll is full, or nothing to wait for
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	more := i.cl.PollRecords(pctx, i.pollSize.records(maxElements-elements))
	if n := more.NumRecords(); n > 0 {
		elements += elementsIn(more, i.internalTopic)
		i.pollSize.observe(elements, records+n)
	}
	return append(fetches, more...)
}

// noteFired takes a task's count of the groups its GroupByKey fired in the
// running cycle (task.Env.Fired; once a cycle). The tasks fire side by
// side, so the cycle lasts about as long as the one that fired the most:
// fireBound learns from that one.
func (i *instance) noteFired(groups int) {
	for {
		most := i.mostFired.Load()
		if int64(groups) <= most || i.mostFired.CompareAndSwap(most, int64(groups)) {
			return
		}
	}
}

// beginCycle records the start of a commit cycle (cycleStarted).
func (i *instance) beginCycle() {
	now := time.Now
	if i.env.Now != nil {
		now = i.env.Now
	}
	i.cycleStart.Store(now().UnixNano())
}

// cycleStarted is when the running commit cycle began: task.Env.CycleStart.
func (i *instance) cycleStarted() time.Time {
	if ns := i.cycleStart.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// internalTopic says whether topic is one of the job's internal topics
// (not a Kafka source's).
func (i *instance) internalTopic(topic string) bool {
	return !isSource(i.subByTopic[topic])
}

// postCommitPollWait bounds how long pollAfterCommit waits.
const postCommitPollWait = 20 * time.Millisecond

// postCommitWait is how long pollAfterCommit waits for the fetch after a
// cycle's first poll: postCommitPollWait (at most the poll time) when the
// cycle before produced records to a topic this instance consumes
// (wroteConsumed), else nothing. A commit that made nothing readable to
// this instance (the first cycle; a cycle that wrote only changelogs, the
// status topic or the user's topics) leaves nothing for that fetch to
// bring: waiting for it cost a small bounded job 20 ms at each such cycle,
// about a third of its run on the embedded broker.
func postCommitWait(pollTime time.Duration, wroteConsumed bool) time.Duration {
	if !wroteConsumed {
		return 0
	}
	return min(pollTime, postCommitPollWait)
}

// noteWritten records that the running cycle produced to topic. It is on
// every record's path: once the cycle has noted a write, it looks no more.
func (i *instance) noteWritten(topic string) {
	if !i.wroteConsumed.Load() && i.subByTopic[topic] != nil {
		i.wroteConsumed.Store(true)
	}
}

// markCycle marks the brokers' failure count as a cycle begins (outage).
func (i *instance) markCycle() {
	i.prevMark, i.cycleMark = i.cycleMark, i.cfg.reach.mark()
}

// outage makes err, a failure of the running cycle, an outageError if the
// brokers could not be reached during the cycle or the one before
// (brokers.go). The one before counts because what the client failed to do
// during an outage may surface only in the next poll: a fetch error it
// injected for a partition whose offsets it could not list, read after the
// cycle the outage caught aborted and the brokers were back.
func (i *instance) outage(err error) error {
	var outage *outageError
	if err == nil || errors.As(err, &outage) || !i.cfg.reach.troubleSince(min(i.prevMark, i.cycleMark)) {
		return err
	}
	return &outageError{err}
}

// rewindTo moves the consumed (and to be committed) offsets of the bad
// records' partitions back to the bad records.
func (i *instance) rewindTo(bad []*task.BadRecordError) {
	to := map[string]map[int32]kgo.EpochOffset{}
	for _, b := range bad {
		if to[b.Topic] == nil {
			to[b.Topic] = map[int32]kgo.EpochOffset{}
		}
		to[b.Topic][b.Partition] = kgo.EpochOffset{Epoch: b.LeaderEpoch, Offset: b.Offset}
	}
	i.intake.dropOffsets(to)
	i.cl.SetOffsets(to)
}

// process hands every task its records; tasks run in parallel. bad are the
// records that failed their tasks under deserialization_error_policy=fail
// (their tasks handled the records before them); err is any other failure.
func (i *instance) process(ctx context.Context, fetches kgo.Fetches) (bad []*task.BadRecordError, err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, len(i.tasks))
	// A partition may come in several of the fetches (pollAfterCommit
	// polls twice): its task handles them in order, in one goroutine.
	var order []*task.Task
	recs := map[*task.Task][][]*kgo.Record{}
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		t := i.tasks[taskID{p.Topic, p.Partition}]
		if t == nil {
			return // revoked between poll and now; the records will be redelivered
		}
		// How far the partition goes (read_committed: its last stable
		// offset): a Kafka source's position when the fetch brought none
		// of its records; its idleness comes from sourceEnds.
		hw := p.LastStableOffset
		if hw <= 0 {
			hw = p.HighWatermark
		}
		t.Fetched(hw, len(p.Records))
		i.observeFetch(i.subByTopic[p.Topic].ID, p, hw)
		i.cfg.Stats.fetched(p, isSource(i.subByTopic[p.Topic]), hw)
		if len(p.Records) == 0 {
			return
		}
		if recs[t] == nil {
			order = append(order, t)
		}
		recs[t] = append(recs[t], p.Records)
	})
	for _, t := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, rs := range recs[t] {
				if err := t.Handle(ctx, rs); err != nil {
					errs <- err // a bad record: the rest stays unhandled
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	i.endSources(fetches) // bounded reads: not past the last record emitted
	for e := range errs {
		var b *task.BadRecordError
		if errors.As(e, &b) {
			bad = append(bad, b)
		} else if err == nil {
			err = e
		}
	}
	return bad, err
}

// commit ends a commit cycle that consumed elements elements
// (exactly_once: the open transaction). The caller holds no lock.
func (i *instance) commit(ctx context.Context, elements int) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.sess != nil {
		return i.commitTransaction(ctx, elements)
	}
	return i.commitAtLeastOnce(ctx, elements)
}

// prepareTasks closes every task's bundles, fires due windows and timers,
// reports watermarks and produces the cycle's changelog records; tasks run
// in parallel.
func (i *instance) prepareTasks(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(i.tasks))
	for _, t := range i.tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.PrepareCommit(ctx); err != nil {
				errs <- err
				return
			}
			if err := t.ProduceChangelog(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// beforeCommit runs the test hook, if any, on a cycle that consumed
// elements (on every cycle with Hooks.EveryCycle); it reports whether the
// cycle must abort.
func (i *instance) beforeCommit(ctx context.Context, elements int) (abort bool, err error) {
	h := i.cfg.Hooks
	if h == nil || h.BeforeCommit == nil || elements == 0 && (h.EveryCycle == nil || !h.EveryCycle()) {
		return false, nil
	}
	err = h.BeforeCommit(elements)
	if errors.Is(err, ErrAbortCycle) {
		return true, nil
	}
	return false, err
}

// commitTransaction ends the cycle's transaction. Invariants:
//   - Everything the cycle produced is in the transaction: outputs,
//     watermark reports, the changelog records of every state mutation, the
//     statuses of the previous cycle's tasks, and (End) the consumed
//     offsets.
//   - The Pebble batches are applied and bundles finalized only after the
//     transaction committed. If it aborts (or the group rebalanced, which
//     makes End abort), the session rewinds consumption to the committed
//     offsets and every task is reopened from the store, which holds
//     exactly the state of the committed cycles.
//   - A task's status goes out in the transaction after the one whose
//     commit and bundle finalizations it reports: the job server ends a
//     bounded job on it.
func (i *instance) commitTransaction(ctx context.Context, elements int) error {
	for _, t := range i.tasks {
		t.SendStatus()
	}
	// Flushed before End (which flushes too) so that a failed produce is
	// seen here and fails the instance: End would commit without the record.
	abort, err := i.produceCycle(ctx, elements)
	if err != nil {
		return err
	}
	var ifAborted []carriedRecord
	if i.lookDue() {
		i.watch.enter(stepHanging)
		var mustAbort bool
		if mustAbort, ifAborted, err = i.reconcileWritten(ctx, !abort); err != nil {
			return err
		}
		abort = abort || mustAbort
	}
	try := kgo.TryCommit
	if abort {
		try = kgo.TryAbort
	}
	i.watch.enter(stepEnd)
	committed, err := i.endTransaction(ctx, try)
	switch {
	case committed:
		i.cfg.written.committed(i.carriedInTxn)
	case err == nil || membershipLost(err):
		// Aborted: what a hanging committed transaction left in it
		// goes again (hangingdata.go).
		i.cfg.written.addCarry(ifAborted)
		i.writtenLookDue = true
	default:
		i.writtenLookDue = true
	}
	if err != nil && !membershipLost(err) {
		// inTxn stays set: the loop's exit aborts what may be left.
		return fmt.Errorf("ending the transaction: %w", err)
	}
	i.inTxn = false
	if !committed {
		// A lost membership (the session expired mid-cycle, the member
		// was fenced) fails the offsets' commit, and End aborts: the
		// instance carries on, and the group reports the loss at the
		// next AllowRebalance (onLost).
		i.cfg.Logger.Info("transaction aborted: tasks restart from the last committed cycle", "injected", abort, "error", err)
		i.cfg.Observer.Cycle(false)
		i.resetTasks()
		return i.failure()
	}
	i.cfg.Observer.Cycle(true)
	i.committedCycles++
	for _, t := range i.tasks {
		if err := t.CommitState(); err != nil {
			return err
		}
	}
	i.purge.committed(i.cl.CommittedOffsets())
	i.finalize(ctx)
	return i.failure()
}

// produceCycle closes the tasks' bundles and fires what is due
// (prepareTasks), flushes everything the cycle produced and checks that
// every record reached the broker, then runs the test hook; abort reports
// that the hook asked to abort the cycle.
func (i *instance) produceCycle(ctx context.Context, elements int) (abort bool, err error) {
	i.watch.enter(stepPrepare)
	if err := i.prepareTasks(ctx); err != nil {
		return false, err
	}
	i.watch.enter(stepFlush)
	// Not bounded by time alone: a slow broker that answers decides
	// (under exactly_once it aborts a transaction past
	// transaction_timeout_ms, failing its records; a fresh three-broker
	// cluster took more than 10 s for a first cycle's records, well
	// within the transaction's own clock). ctx ends when the brokers are
	// given up (brokers.go), and the flush of a cycle the brokers' outage
	// caught ends at transaction_timeout_ms (flushContext).
	fctx, fcancel := i.flushContext(ctx)
	err = i.cl.Flush(fctx)
	fcancel()
	if err != nil {
		return false, fmt.Errorf("flushing the producer: %w", context.Cause(fctx))
	}
	if err := i.failure(); err != nil {
		return false, err
	}
	return i.beforeCommit(ctx, elements)
}

// flushContext is the context of a cycle's flush: ctx, and under
// exactly_once also ended once the flush has lasted transaction_timeout_ms
// while a broker could not be reached during the cycle
// (reach.troubleSince). That transaction's coordinator aborts it (or has,
// if it was back in time to see the timeout), so the cycle cannot commit.
// Carrying on into End after the outage raced that abort with the
// transaction's offset commit, and a stall reproduced under load followed
// exactly that path (the instance then rejoined and never fetched its
// source partitions' uncommitted records again; docs/design-notes.md).
// Failing the flush makes the cycle an outage: Run starts the instance
// again, whose producer fences the transaction.
func (i *instance) flushContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if i.sess == nil {
		return context.WithCancel(ctx)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	limit, mark := i.cfg.transactionTimeout(), i.cycleMark
	// A timer, not a goroutine: most flushes end long before limit.
	var mu sync.Mutex
	var timer *time.Timer
	var check func()
	check = func() {
		mu.Lock()
		defer mu.Unlock()
		if fctx.Err() != nil {
			return
		}
		if i.cfg.reach.troubleSince(mark) {
			cancel(fmt.Errorf("the cycle's records were not all acknowledged within transaction_timeout_ms %v, and the brokers could not be reached during the cycle: its transaction cannot commit", limit))
			return
		}
		timer = time.AfterFunc(min(time.Second, limit), check)
	}
	mu.Lock()
	timer = time.AfterFunc(limit, check)
	mu.Unlock()
	return fctx, func() {
		mu.Lock()
		timer.Stop()
		mu.Unlock()
		cancel(nil)
	}
}

// commitAtLeastOnce produces and flushes the cycle's records (outputs,
// watermark reports, changelog), commits the offsets and applies the state
// batches, in that order. Invariants:
//   - Offsets never get ahead of the data they cover: a failure in between
//     repeats output, never loses it.
//   - The local store never gets ahead of the offsets: a cycle whose offsets
//     did not commit because the member lost its partitions
//     (membershipLost: its session expired, it was fenced) leaves nothing
//     in the store; its tasks are reset, consumption rewinds, and the
//     instance carries on (the group reports the loss at the next
//     AllowRebalance). A crash after the offsets committed leaves the store
//     behind its changelog, which was flushed first: the task's restore at
//     its next assignment replays the difference (restoreTask).
func (i *instance) commitAtLeastOnce(ctx context.Context, elements int) error {
	abort, err := i.produceCycle(ctx, elements)
	if err != nil {
		return err
	}
	if abort {
		// As a crash after the flush would: the output stays, the state
		// and offsets do not.
		i.cfg.Observer.Cycle(false)
		i.resetTasks()
		i.rewind()
		return i.failure()
	}
	i.watch.enter(stepEnd)
	// Not past the records the intake carries.
	if err := i.cl.CommitUncommittedOffsets(kgo.PreCommitFnContext(ctx, rewriteCommit(i.intake.commitOffsets()))); err != nil {
		if !membershipLost(err) {
			return fmt.Errorf("committing offsets: %w", err)
		}
		i.cfg.Logger.Info("offsets not committed: the group moved on; the cycle's state is dropped and its input redone by the partitions' owner", "error", err)
		i.cfg.Observer.Cycle(false)
		i.resetTasks()
		i.rewind()
		return i.failure()
	}
	i.cfg.Observer.Cycle(true)
	for _, t := range i.tasks {
		if err := t.CommitState(); err != nil {
			return err
		}
	}
	i.purge.committed(i.cl.CommittedOffsets())
	i.finalize(ctx)
	sent := false
	for _, t := range i.tasks {
		sent = t.SendStatus() || sent
	}
	if sent {
		if err := i.cl.Flush(ctx); err != nil {
			return fmt.Errorf("flushing task status: %w", err)
		}
	}
	return i.failure()
}

// rewind moves consumption back to the committed offsets (where
// partitions never committed started: a Kafka read's as startOffsets chose,
// an internal topic's start), at_least_once after an injected abort.
func (i *instance) rewind() {
	committed := i.cl.CommittedOffsets()
	to := map[string]map[int32]kgo.EpochOffset{}
	for topic, ps := range i.cl.UncommittedOffsets() {
		to[topic] = map[int32]kgo.EpochOffset{}
		for p := range ps {
			o, ok := committed[topic][p]
			if !ok {
				o = kgo.EpochOffset{Epoch: -1, Offset: 0}
				if i.sourceEnds != nil {
					if start := i.sourceEnds.startOf(topic, p); start >= 0 {
						o.Offset = start
					}
				}
			}
			to[topic][p] = o
		}
	}
	i.cl.SetOffsets(to)
}

// finalize runs the finalizers of the committed cycle's bundles and counts
// their metrics as committed.
func (i *instance) finalize(ctx context.Context) {
	for _, t := range i.tasks {
		t.Finalize(ctx)
	}
}

func (i *instance) produce(r *kgo.Record) {
	if i.sess != nil {
		i.cfg.written.wrote(r.Topic)
	}
	i.noteWritten(r.Topic)
	i.cl.Produce(context.Background(), r, i.producePromise)
}

// producePromise fails the instance on a record that could not be
// produced, naming its topic and partition and, for a user's topic, the
// Kafka write and the record's key.
func (i *instance) producePromise(r *kgo.Record, err error) {
	if err == nil {
		if i.txnMark.Load() == nil && i.cfg.ExactlyOnce {
			i.txnMark.CompareAndSwap(nil, &producedMark{r.Topic, r.Partition, r.Offset, r.ProducerID, r.ProducerEpoch})
		}
		return
	}
	if w := i.topics.Writer(r.Topic); w != "" {
		key := r.Key
		if len(key) > 64 {
			key = key[:64]
		}
		i.setProduceErr(fmt.Errorf("transform %s: producing to topic %s partition %d (record key %q, %d value bytes): %w", w, r.Topic, r.Partition, key, len(r.Value), err))
		return
	}
	i.setProduceErr(fmt.Errorf("producing to topic %s partition %d: %w", r.Topic, r.Partition, err))
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
	comps := i.cfg.Plan.Pipeline.GetComponents()
	for _, st := range i.cfg.Plan.SubTopologies {
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
