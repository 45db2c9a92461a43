package task

import (
	"context"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

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
	Execs         map[string]executor.Executor
	DB            *pebble.DB
	Metrics       *metrics.Job
	Logger        *slog.Logger
	MaxBundleSize int

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

	// SourceIdleTimeout is how long a caught-up Kafka source partition
	// waits without records before its watermark follows the wall clock
	// (kafka.go); zero: DefaultSourceIdleTimeout.
	SourceIdleTimeout time.Duration
	// ReadBounds are the ends of bounded Kafka reads, by the sub-topology
	// id of the read (kafkabound.go); a read without one is unbounded.
	ReadBounds map[int]*ReadBound
	// Now is the wall clock of Kafka sources; nil: time.Now.
	Now func() time.Time
}
