package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Config is how Run runs a plan.
type Config struct {
	Plan             *translate.Plan
	BootstrapServers string // a comma-separated broker list
	// Security is how every client of the job connects to
	// BootstrapServers (nil: PLAINTEXT): the runner's own settings, or
	// those of the plan's Kafka reads and writes (kafkaio.JobSecurity).
	Security      *kafkaconn.Security
	ApplicationID string
	// ReplicationFactor and Parallelism lay out the internal topics.
	ReplicationFactor, Parallelism int
	// KeepInternalTopics keeps a bounded job's topics when it is done.
	KeepInternalTopics bool
	// OneOff: ApplicationID was made for this job's submission, so nothing
	// resumes the application once the job fails or is cancelled: a
	// bounded job then deletes its internal topics as when it is done
	// (unless KeepInternalTopics). A process that stops (a cause of Run's
	// context that does not wrap ErrEnded) keeps them for its restart.
	OneOff bool
	// StateDir holds the store, under ApplicationID; "" makes a temporary
	// directory removed afterwards.
	StateDir       string
	ExactlyOnce    bool
	CommitInterval time.Duration
	// TransactionTimeout is the producer's transaction timeout under
	// exactly_once: the longest one commit cycle may take, and how long a
	// process killed inside a cycle holds read_committed readers when no
	// successor with its identity fences it (identity.go); zero:
	// DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// GroupProtocol is GroupProtocolClassic ("" too) or
	// GroupProtocolConsumer (group.go).
	GroupProtocol string
	// SessionTimeout is the consumer-group session timeout (group.go);
	// zero: DefaultSessionTimeout.
	SessionTimeout time.Duration
	// MaxBundleSize and MaxBundleTime close bundles by input elements and
	// by age (task.Env.MaxBundleSize, MaxBundleTime); zero MaxBundleTime:
	// no time bound.
	MaxBundleSize int
	MaxBundleTime time.Duration
	// RecordPackBytes: see task.Env.RecordPackBytes.
	RecordPackBytes int
	// InternalMaxMessageBytes is the max.message.bytes of the internal
	// topics Run creates (topics.Set.SetInternalMaxMessageBytes); 0: the
	// broker's default.
	InternalMaxMessageBytes int32
	// Execs run the plan's stages, by stage id (executor.Start).
	Execs map[string]executor.Executor
	// Skip are the sub-topologies (by id) this instance takes no tasks of:
	// their stages cannot run here (executor.StartAvailable). It does not
	// subscribe to their input topics, so the group gives their partitions
	// to the instances that do.
	Skip    map[int]bool
	Logger  *slog.Logger
	Metrics *metrics.Job
	Hooks   *Hooks // nil: none
	// Observer, if set, is given the instance's live figures (per-task
	// records, watermarks, lag, state size, restores; commits and aborts)
	// for the status page and /metrics (observe.go).
	Observer *metrics.Instance
	// OnRunning is called once the instance is open and starts consuming.
	OnRunning func()
	// Warning, if set, is told what the job's client should know but is
	// not a failure (the brokers out of reach, brokers.go); it is logged
	// too.
	Warning func(msg string)
	// BrokerUnavailableTimeout is how long the instance goes on without
	// reaching any broker (retrying, brokers.go) before the job fails;
	// zero: DefaultBrokerUnavailableTimeout.
	BrokerUnavailableTimeout time.Duration
	// Progress, if set, is told each step of the instance's start and
	// recovery (its identity, fencing its predecessor, joining the group,
	// restoring state), which are logged too: the job server shows them to
	// the client as job messages, who would otherwise see only STARTING.
	Progress func(msg string)
	// SourceIdleTimeout: see task.Env.SourceIdleTimeout.
	SourceIdleTimeout time.Duration
	// SourceMaxDelay: see task.Env.SourceMaxDelay.
	SourceMaxDelay time.Duration
	// BadRecords: see task.Env.BadRecords. DeadLetterTopic is the Kafka
	// name of the dead-letter topic of task.PolicyDeadLetter, created when
	// CreateDeadLetterTopic is set (the application's own), otherwise
	// required to exist.
	BadRecords            task.ErrorPolicy
	DeadLetterTopic       string
	CreateDeadLetterTopic bool
	// MaxPollRecords is the most elements one commit cycle takes (a
	// packed record counts its elements; pollSize, intake); zero:
	// DefaultMaxPollRecords. MaxPollTime is how long a poll waits
	// for records before the cycle commits; zero: CommitInterval.
	MaxPollRecords int
	MaxPollTime    time.Duration
	// NumStandbyReplicas is how many other instances keep a warm copy of
	// each stateful task's store (standby.go); zero: none.
	NumStandbyReplicas int
	// Draining, once set, drains the job in this process (task/drain.go):
	// its Kafka reads end where they are and splittable DoFns stop, so
	// the watermarks go to +inf, firing every window, and Run returns nil
	// once every task reported +inf. nil: the job never drains.
	Draining *atomic.Bool
	// Stats, if set, is kept up to date with the job's progress in this
	// process (stats.go).
	Stats *Stats

	// readBounds are the ends of the bounded Kafka reads, fixed by Run
	// (readBounds in kafkaio.go).
	readBounds map[int]*task.ReadBound
	// readPartitions is, per topic a Kafka read reads, how many of its
	// partitions the application had read before this Run (knownReadPartitions):
	// those above start at their beginning (Config.addedReadPartition).
	readPartitions map[string]int32
	// resetAt is when this Run began reading: a Kafka read's auto.offset.reset
	// by_duration:D starts a partition without a committed offset at its
	// first record since resetAt less D (resetStart).
	resetAt time.Time
	// reach watches the brokers for Run's clients (brokers.go).
	reach *reach
	// outcomes records how this process's transactions with group
	// offsets ended, for its instances (hangingtxn.go).
	outcomes *txnOutcomes
	// incarnation is the id of the topics' incarnation a stable store
	// follows (incarnation.go); "": not checked.
	incarnation string
	// written is what this process's producers wrote to, and what they
	// must write again (hangingdata.go).
	written *written
}

// DefaultMaxPollRecords is Config.MaxPollRecords when unset.
const DefaultMaxPollRecords = 250000

// Hooks inject faults into the commit loop and observe restoration (the
// host re-exports them as host.TestHooks).
type Hooks struct {
	// BeforeCommit runs in every commit cycle that consumed records, with
	// the elements they held (a packed record counts its elements), after
	// the cycle's records (outputs, watermarks, changelog) were produced and
	// flushed to the broker, before the transaction (at_least_once: the
	// state and offsets) commits. ErrAbortCycle aborts the cycle as a failed
	// transaction would; any other error fails the instance.
	BeforeCommit func(elements int) error
	// Assigning runs when the group gives the instance a task, before
	// anything of its takeover (a standby copy's handover, the restore):
	// with Restored it times the restore part of a failover.
	Assigning func(subTopology int, partition int32)
	// EveryCycle, if it returns true, runs BeforeCommit in the cycles that
	// consumed nothing too (records 0: cycles that only resumed residuals,
	// fired timers or reported watermarks).
	EveryCycle func() bool
	// Restored runs after a task's state was restored from its changelog,
	// before the task is created, with the number of changelog records
	// replayed (0 when the local store was up to date).
	Restored func(subTopology int, partition int32, records int)
	// Assigned runs when the group gives the instance a task, after its
	// restore: at start, or when the task moves in.
	Assigned func(subTopology int, partition int32)
	// MaxPollRecords, if it returns a positive number, replaces the most
	// elements one commit cycle consumes (250,000), to spread small inputs
	// over many cycles.
	MaxPollRecords func() int
	// Now, if set, replaces time.Now as the tasks' wall clock
	// (task.Env.Now): the age of bundles, and Kafka sources' processing
	// times, idleness and read deadlines.
	Now func() time.Time
}

// ErrAbortCycle makes Hooks.BeforeCommit abort the commit cycle.
var ErrAbortCycle = errors.New("commit cycle aborted by a test hook")

const (
	minWatermark = int64(mtime.MinTimestamp)
	maxWatermark = int64(mtime.MaxTimestamp)
)

// oneOffDeleteTimeout bounds the deletion of a one-off application's topics
// after its job failed (Config.OneOff), so that the failure is reported
// soon whatever the brokers do.
const oneOffDeleteTimeout = 10 * time.Second

// Run runs the plan until it is done (every task reported the maximum
// watermark: nil), ctx ends (context.Cause(ctx)) or the instance fails.
// The instance leaves the consumer group when the job is done or the cause
// of ctx wraps ErrEnded; otherwise a static member keeps its membership for
// its restart (group.go).
func Run(ctx context.Context, cfg Config) (err error) {
	parent := ctx
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)

	if err := checkKafkaIO(cfg); err != nil {
		return err
	}
	// Brokers out of reach for broker_unavailable_timeout_ms end every
	// wait of the job with an error naming them (brokers.go).
	r := newReach(cfg)
	cfg.reach = r
	cfg.outcomes = &txnOutcomes{}
	cfg.written = &written{}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		r.watch(ctx)
	}()
	defer func() { stop(nil); <-watchDone }()
	defer context.AfterFunc(r.ctx, func() { stop(context.Cause(r.ctx)) })()
	// brokersLost is the error naming the brokers when they were given
	// up: it is why anything failed then.
	brokersLost := func(err error) error {
		if lost := r.failure(); lost != nil && parent.Err() == nil {
			return lost
		}
		return err
	}

	// An authentication error, from whichever client, names the brokers.
	defer func() { err = kafkaconn.Explain(err, cfg.BootstrapServers, cfg.Security) }()
	ts := topics.New(cfg.Plan, cfg.ApplicationID, cfg.ReplicationFactor, cfg.Parallelism)
	ts.SetInternalMaxMessageBytes(cfg.InternalMaxMessageBytes)
	if cfg.BadRecords == task.PolicyDeadLetter {
		ts.SetDeadLetter(cfg.DeadLetterTopic, cfg.CreateDeadLetterTopic)
	}
	admin, err := topics.NewAdmin(cfg.BootstrapServers, cfg.Security, r.opts()...)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := setUpTopics(ctx, &cfg, ts, admin); err != nil {
		return brokersLost(err)
	}
	if below := ts.BelowInternalLimit(); len(below) > 0 {
		var list []string
		for _, name := range slices.Sorted(maps.Keys(below)) {
			list = append(list, fmt.Sprintf("%s (%d)", name, below[name]))
		}
		msg := fmt.Sprintf("internal topics made by an earlier run take smaller records than internal_max_message_bytes (%d) asks: %s; an element or stored value larger than its topic's limit fails the job (raise the topics' max.message.bytes with kafka-configs, or use a new application_id)",
			cfg.InternalMaxMessageBytes, strings.Join(list, ", "))
		cfg.Logger.Warn(msg)
		if cfg.Warning != nil {
			cfg.Warning(msg)
		}
	}
	if cfg.Plan.Bounded && !cfg.KeepInternalTopics {
		defer func() {
			dctx := context.WithoutCancel(ctx)
			if err != nil {
				// A one-off application that failed or was cancelled; not
				// when the process stops (it may resume the job), nor
				// when the brokers were lost (they would not answer).
				stopped := parent.Err() != nil && !errors.Is(context.Cause(parent), ErrEnded)
				if !cfg.OneOff || stopped || r.failure() != nil {
					return
				}
				var cancel context.CancelFunc
				dctx, cancel = context.WithTimeout(dctx, oneOffDeleteTimeout)
				defer cancel()
			}
			if derr := ts.Delete(dctx, admin); derr != nil {
				cfg.Logger.Warn("deleting internal topics", "error", derr)
				return
			}
			if err != nil {
				cfg.Logger.Info("deleted the internal topics of the job's application, made for its submission: nothing resumes it", "application_id", cfg.ApplicationID)
			}
			// The store (closed by now: its defer runs first) holds what
			// the deleted changelogs did; in an explicit state_dir it would
			// stay, and a later run of the application would empty it.
			if cfg.StateDir != "" {
				if rerr := os.RemoveAll(filepath.Join(cfg.StateDir, cfg.ApplicationID)); rerr != nil {
					cfg.Logger.Warn("deleting the application's store", "error", rerr)
				}
			}
		}()
	}

	// Only an explicit state_dir outlives the process: it alone can keep
	// the instance's identity for its restart (identity.go).
	stable := cfg.StateDir != ""
	if stable {
		// Without the id the store is taken as is, as before incarnations:
		// a failed look should not keep the job from starting.
		if cfg.incarnation, err = topicsIncarnation(ctx, admin, ts); err != nil {
			cfg.Logger.Warn("the application's topics' incarnation is unknown: the local store is not checked against it", "error", err)
			cfg.incarnation, err = "", nil
		}
	}
	stateDir := cfg.StateDir
	if stateDir == "" {
		dir, err := os.MkdirTemp("", "ksrunner-state-")
		if err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		defer os.RemoveAll(dir)
		stateDir = dir
	}
	stateDir = filepath.Join(stateDir, cfg.ApplicationID)

	// The instance the goroutine below runs last, closed after it ended
	// (deferred before wg.Wait, so it runs after).
	var inst *instance
	defer func() {
		if inst != nil {
			inst.close(err == nil || errors.Is(context.Cause(parent), ErrEnded))
		}
	}()
	var wg sync.WaitGroup
	instErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		instErr <- runInstances(ctx, cfg, ts, stateDir, stable, &inst)
	}()
	defer wg.Wait()

	// A job is done when every task has reported the final watermark: for
	// a bounded pipeline always eventually, for an unbounded one when its
	// sources end (a splittable DoFn that stops, a TestStream).
	doneErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		doneErr <- waitDone(ctx, cfg, ts)
	}()
	select {
	case err := <-instErr:
		stop(err)
		<-doneErr
		if parent.Err() != nil {
			return context.Cause(parent)
		}
		if err == nil {
			err = errors.New("instance stopped before the job was done")
		}
		return brokersLost(err)
	case err := <-doneErr:
		if err != nil {
			stop(err)
			<-instErr
			if parent.Err() != nil {
				return context.Cause(parent)
			}
			return brokersLost(err)
		}
		stop(nil)
		<-instErr
		return nil
	}
}

// setUpTopics finds the user's topics, fixes the bounded reads' ends,
// creates the internal topics and writes the impulses. Each step is
// idempotent, so the whole is tried again, with backoff, while the
// brokers cannot be reached (until ctx ends: broker_unavailable_timeout_ms).
func setUpTopics(ctx context.Context, cfg *Config, ts *topics.Set, admin *topics.Admin) error {
	for failed := 0; ; failed++ {
		mark := cfg.reach.mark()
		err := func() (err error) {
			if err := ts.Discover(ctx, admin.Client); err != nil {
				return err
			}
			commits := &runCommits{adm: admin.Client, group: cfg.ApplicationID}
			if cfg.readPartitions, err = knownReadPartitions(ctx, *cfg, ts, commits); err != nil {
				return err
			}
			if err := checkResetNone(ctx, *cfg, ts, commits); err != nil {
				return err
			}
			if cfg.resetAt.IsZero() {
				cfg.resetAt = time.Now()
			}
			if cfg.readBounds, err = readBounds(ctx, *cfg, ts, admin.Client, commits, time.Now()); err != nil {
				return err
			}
			if err := ts.Create(ctx, admin); err != nil {
				return err
			}
			return ts.WriteImpulses(ctx, cfg.BootstrapServers, cfg.Security, cfg.reach.opts()...)
		}()
		if err == nil || ctx.Err() != nil || !cfg.reach.troubleSince(mark) {
			return err
		}
		cfg.Logger.Debug("setting up the topics while the brokers cannot be reached; trying again", "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff(failed)):
		}
	}
}

// runInstances runs the instance until the job is done, ctx ends or it
// fails. An instance whose start, restore or commit cycle failed while the
// brokers could not be reached (outageError), whose transaction the
// coordinator rejected (rejectedTxnError) or may or may not have committed
// (unknownCommitError), or whose committed offsets did not come
// (stalledOffsetsError), is closed, keeping its group
// membership, and started again with the same identity, after a backoff
// (brokers.go says why a new instance rather than reset tasks). *cur is
// the instance running, left open for the caller to close.
func runInstances(ctx context.Context, cfg Config, ts *topics.Set, stateDir string, stable bool, cur **instance) error {
	var prev *identity
	failed := 0
	rejections := 0 // rejectedTxnError restarts since a cycle last committed
	for {
		mark := cfg.reach.mark()
		inst, err := newInstance(ctx, cfg, ts, stateDir, stable, prev)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !cfg.reach.troubleSince(mark) {
				return err
			}
			cfg.Logger.Debug("starting the instance while the brokers cannot be reached; trying again", "error", err)
		} else {
			*cur = inst
			if prev == nil && cfg.OnRunning != nil {
				cfg.OnRunning()
			}
			prev = &inst.ident
			started := time.Now()
			err = inst.run(ctx)
			var outage *outageError
			var rejected *rejectedTxnError
			var stalled *stalledOffsetsError
			var unknown *unknownCommitError
			if inst.committedCycles > 0 {
				rejections = 0
			}
			switch {
			case ctx.Err() != nil:
				return err
			case errors.As(err, &outage):
			case errors.As(err, &stalled):
				// Each wait is offsetWaitLimit long: no tight loop.
			case errors.As(err, &rejected), errors.As(err, &unknown):
				if rejections++; rejections > maxTxnRejections {
					return fmt.Errorf("%w (%d times in a row, no cycle committed in between)", err, rejections)
				}
			default:
				return err
			}
			if time.Since(started) > brokerReminder {
				failed = 0
			}
			inst.progress(fmt.Sprintf("the instance stops and starts again, in this process, from the last committed cycle; a commit cycle failed: %v", err))
			inst.closeForRestart()
			*cur = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff(failed)):
		}
		failed++
	}
}

// waitDone follows the status topic until every task of the plan reports the
// maximum watermark.
func waitDone(ctx context.Context, cfg Config, ts *topics.Set) error {
	cl, err := kafkaconn.NewClient(cfg.BootstrapServers, cfg.Security,
		kgo.ConsumeTopics(ts.Full(shuffle.StatusTopic)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return fmt.Errorf("status consumer: %w", err)
	}
	defer cl.Close()
	done := newDoneTracker(ts)
	for !done.done() {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return context.Cause(ctx) // not done: stopped (cancelled, or the instance failed)
		}
		if err := fetches.Err0(); err != nil {
			return fmt.Errorf("status topic %s: %w", ts.Full(shuffle.StatusTopic), err)
		}
		var bad error
		fetches.EachRecord(func(r *kgo.Record) {
			st, err := task.DecodeStatus(r.Value)
			if err != nil {
				bad = fmt.Errorf("status topic %s offset %d (task %s): %w", r.Topic, r.Offset, r.Key, err)
				return
			}
			cfg.Logger.Debug("task status", "task", string(r.Key), "watermark", task.FormatWatermark(st.Watermark))
			done.report(string(r.Key), st.Watermark)
			cfg.Stats.reported(string(r.Key), st.Watermark, done.taskCount())
		})
		if bad != nil {
			return bad
		}
	}
	return nil
}

// doneTracker tells when a job is done from its tasks' status reports:
// when every task of the plan as Run found it, and every other task of
// its sub-topologies that reported (one of a partition added to a topic
// a Kafka read reads since), has reported the maximum watermark. Counting
// reports would not do: an added partition's task of a bounded read ends
// at once, and counted in place of a task still reading, it would end the
// job early.
type doneTracker struct {
	subs       map[int]bool    // the plan's sub-topologies
	tasks      map[string]bool // the plan's, and those of its sub-topologies that reported
	unfinished map[string]bool // by task (shuffle.ProducerID)
}

func newDoneTracker(ts *topics.Set) *doneTracker {
	d := &doneTracker{subs: map[int]bool{}, tasks: map[string]bool{}, unfinished: map[string]bool{}}
	for input, st := range ts.Consumer {
		d.subs[st.ID] = true
		for p := range ts.Partitions[input] {
			d.tasks[shuffle.ProducerID(st.ID, p)] = true
			d.unfinished[shuffle.ProducerID(st.ID, p)] = true
		}
	}
	return d
}

// taskCount is how many tasks the job has: those of the plan as Run found
// it, and those of partitions added since that reported.
func (d *doneTracker) taskCount() int { return len(d.tasks) }

// report takes a task's status: its watermark wm. A task of no
// sub-topology of the plan (a report of another pipeline that ran under
// the application id) is ignored.
func (d *doneTracker) report(taskID string, wm int64) {
	sub, _, ok := strings.Cut(taskID, "/")
	id, err := strconv.Atoi(sub)
	if !ok || err != nil || !d.subs[id] {
		return
	}
	d.tasks[taskID] = true
	if wm >= maxWatermark {
		delete(d.unfinished, taskID)
	} else {
		d.unfinished[taskID] = true
	}
}

func (d *doneTracker) done() bool { return len(d.unfinished) == 0 }

func randomSuffix() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkKafkaIO refuses Kafka reads and writes the runtime cannot honour:
// another cluster than the job's (the commit cycle's transaction spans one
// cluster), and client settings that conflict or do not parse
// (kafkaclient.go); it logs the settings the client does not apply.
func checkKafkaIO(cfg Config) error {
	job := brokerSet(cfg.BootstrapServers)
	check := func(transform, servers string) error {
		if servers == "" {
			return nil
		}
		if got := brokerSet(servers); !maps.Equal(got, job) {
			return fmt.Errorf("transform %s: bootstrap servers %q are not the job's brokers (%s): Kafka IO with another cluster is not supported yet (its offsets and output could not be in the job's transactions)", transform, servers, cfg.BootstrapServers)
		}
		return nil
	}
	for _, st := range cfg.Plan.SubTopologies {
		if r := st.Root.KafkaRead; r != nil {
			if err := check(st.Root.TransformID, r.BootstrapServers); err != nil {
				return err
			}
		}
		for _, sk := range st.Sinks {
			if w := sk.KafkaWrite; w != nil {
				if err := check(sk.TransformID, w.BootstrapServers); err != nil {
					return err
				}
			}
		}
	}
	cc, err := kafkaClientConfig(cfg.Plan, cfg.ExactlyOnce)
	if err != nil {
		return err
	}
	for _, transform := range slices.Sorted(maps.Keys(cc.notApplied)) {
		cfg.Logger.Warn("Kafka client settings not applied (ksrunner's own client settings apply)", "transform", transform, "settings", cc.notApplied[transform])
	}
	return nil
}

func brokerSet(list string) map[string]bool {
	set := map[string]bool{}
	for _, b := range strings.Split(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			set[b] = true
		}
	}
	return set
}
