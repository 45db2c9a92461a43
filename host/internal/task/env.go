package task

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// DefaultMaxFiredGroups is Env.MaxFiredGroups's default, and the most the
// runtime sets (fewer when a cycle reads fewer elements).
const DefaultMaxFiredGroups = 100_000

// Env is what the tasks of one instance share: the plan and its codecs, the
// store, the executors and the way out to Kafka. The runtime builds it once;
// tasks only read it.
type Env struct {
	Plan   *translate.Plan
	Topics *topics.Set
	// Codecs parse the wire encoding of each PCollection, by id.
	Codecs map[string]*shuffle.ElementCodec
	// TimerCodecs parse the timers of each (transform, family).
	TimerCodecs map[[2]string]*shuffle.TimerCodec
	// Execs are the executors of the plan's stages, by stage id.
	Execs   map[string]executor.Executor
	DB      *pebble.DB
	Metrics *metrics.Job
	Logger  *slog.Logger
	// MaxBundleSize closes a bundle once it has this many input elements,
	// and MaxBundleTime once it has been open this long (zero: no time
	// bound), at the next batch of input the task hands the stage (see
	// flushStages). Every bundle closes before the commit whatever its
	// size or age, so bundles closed early only split a cycle's work.
	MaxBundleSize int
	MaxBundleTime time.Duration
	// CheckpointAfter is how long a bundle of a stage whose input goes to
	// a splittable DoFn may run before the task checkpoints it, and
	// MaxCheckpointAfter how far that grows for a DoFn that emits nothing
	// before it (checkpoint.go); zero: never checkpointed.
	CheckpointAfter    time.Duration
	MaxCheckpointAfter time.Duration
	// CycleStart is when the instance's running commit cycle began (in
	// Now's clock), from which those bundles' checkpoints are timed: a
	// cycle's splittable work then ends checkpointAfter after its start
	// however many elements it holds (checkpoint.go). Nil, or a zero time:
	// each bundle is timed from its own start.
	CycleStart func() time.Time
	// Steals lists the running bundles of splittable DoFns of the
	// instance's tasks, for those done with their cycle's work to take
	// part of (steal.go); nil: none is taken.
	Steals *StealBoard
	// RecordPackBytes bounds the values of one DATA_PACKED record on the
	// internal data topics (pack.go); zero: every value is a record.
	RecordPackBytes int
	// MaxFiredGroups bounds the groups a GroupByKey task fires in one
	// cycle; the rest fire in the next cycles (gbk.go fire). Zero:
	// DefaultMaxFiredGroups.
	MaxFiredGroups int
	// FireLimit, when set, bounds the stored groups a GroupByKey task fires
	// in one cycle further (and the windows a windowed one evaluates, unless
	// they merge: gbkwindowed.go fire says why), read
	// at each firing: the runtime lowers it when cycles run long, so that a
	// slow DoFn reading the groups cannot hold a cycle past the transaction
	// timeout. Groups whose values all came in the cycle are not bounded by
	// it (the cycle's input bounds them). Fired, when set, is told how many
	// groups each firing fired, of both kinds (once a cycle, by each
	// GroupByKey task).
	FireLimit func() int
	Fired     func(groups int)
	// ExactlyOnce says the task's input comes read_committed and its state
	// commits with its offsets in one transaction: what it takes is never
	// redelivered, so a record out of line is a fault, not a redelivery
	// (pieces.go).
	ExactlyOnce bool

	// Produce sends a record in the current commit cycle; a failure is
	// reported through Fail by the producer.
	Produce func(*kgo.Record)
	// ProduceWith sends a record in the current commit cycle and calls
	// promise with its outcome.
	ProduceWith func(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	// Fail records an error that fails the instance at the end of the
	// cycle (from callbacks that cannot return one).
	Fail func(error)
	// SideWatermark is the watermark of a side input topic, by topic name:
	// every element it covers is in the store.
	SideWatermark func(topic string) int64
	// SideCache holds pages of side input reads for every task of the
	// instance; nil: every read goes to the store.
	SideCache *state.SideCache

	// SourceIdleTimeout is how long a caught-up Kafka source partition
	// waits without records before its watermark follows the wall clock
	// (kafka.go); zero: DefaultSourceIdleTimeout.
	SourceIdleTimeout time.Duration
	// SourceMaxDelay is how far a Kafka source's watermark stays behind
	// the largest record timestamp it handled (and behind the time it was
	// last caught up as of): records up to this much out of order within
	// a partition are on time. Zero, the default, is Java KafkaIO's for
	// the policies a cross-language read names (withCreateTime(ZERO)).
	SourceMaxDelay time.Duration
	// ReadBounds are the ends of bounded Kafka reads, by the sub-topology
	// id of the read (kafkabound.go); a read without one is unbounded.
	ReadBounds map[int]*ReadBound
	// Now is the tasks' wall clock: the age of bundles (MaxBundleTime),
	// and Kafka sources' processing times, idleness and read deadlines;
	// nil: time.Now.
	Now func() time.Time
	// Draining, once set, drains the job (drain.go); nil: never.
	Draining *atomic.Bool

	// BadRecords is what Kafka reads do with records they cannot
	// deserialize and Kafka writes with elements they cannot produce
	// (deadletter.go); "": PolicyFail. PolicyDeadLetter produces them to
	// Topics.DeadLetter.
	BadRecords ErrorPolicy
	// MaxRecordBytes is the largest record the producer sends to a user's
	// topic (its batch limit there), which a Kafka write checks with the
	// topic's max.message.bytes before producing; zero: unchecked. The
	// internal topics have limits of their own (Topics.RecordLimit).
	MaxRecordBytes int32
}
