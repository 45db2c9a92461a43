package eostest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host"
	_ "github.com/ksrunner/ksrunner/host/kafkaio" // KafkaIO expanded in-process
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.DoFn3x2[context.Context, []byte, []byte, []byte, []byte](&bundleCountFn{})
}

var (
	// bundleCountStarted counts the bundles of bundleCountFn, in the
	// LOOPBACK worker of this process.
	bundleCountStarted atomic.Int64
	copiedCounted      = beam.NewCounter("eostest", "copied")
)

// bundleCountFn passes its records on, counting its bundles and, in a user
// counter, its elements.
type bundleCountFn struct{}

func (*bundleCountFn) StartBundle() { bundleCountStarted.Add(1) }

func (*bundleCountFn) ProcessElement(ctx context.Context, k, v []byte) ([]byte, []byte) {
	copiedCounted.Inc(ctx, 1)
	return k, v
}

// cycleBundles is what BeforeCommit saw of one commit cycle.
type cycleBundles struct {
	bundles int64 // bundleCountFn bundles the cycle ran
	aborted bool
}

// steppingClock is the tasks' clock of TestBundlesCloseOnTimeExactlyOnce:
// each reading is step later than the one before, so a bundle is at least
// step old at any boundary after the one that opened it, however fast the
// machine.
func steppingClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	now := time.Now()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(step)
		return now
	}
}

// TestBundlesCloseOnTimeExactlyOnce copies a Kafka topic of n records of
// 1 KiB through a ParDo to another topic under exactly_once, while the
// tasks' clock (TestHooks.Now) says that max_bundle_time_ms has passed at
// every look: every batch of input a task hands the stage (about 1 MB)
// closes its bundle, so a commit cycle, a poll of about 4 MiB, runs
// several bundles. Cycles that ran bundles are aborted after their output
// reached the broker, up to maxBundleAborts times. The output, read
// read_committed, holds every record exactly once; the cycles did run
// several bundles each, committed and aborted; the user counter's
// committed value counts each record once, its attempted one the retries
// too.
func TestBundlesCloseOnTimeExactlyOnce(t *testing.T) {
	const (
		n               = 16_000
		valueSize       = 1 << 10
		maxBundleAborts = 3
		// perCycle records a poll, about 4 MiB, and as much a fetch
		// (max.partition.fetch.bytes; kfake returns more): several
		// batches of input for the stage in every cycle.
		perCycle = 4000
	)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "bt-in"), kafkatest.UniqueName(t, "bt-out")
	kafkatest.CreateTopic(t, bootstrap, in, 1) // one source task: its cycles' bundles are the counter's
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	want := map[string]string{}
	cl := kafkatest.Client(t, bootstrap)
	var recs []*kgo.Record
	for i := range n {
		k, v := fmt.Sprintf("%06d", i), fmt.Sprintf("%06d", i)+strings.Repeat("v", valueSize-6)
		want[k] = v
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte(k), Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("filling %s: %v", in, err)
	}

	var mu sync.Mutex
	var cycles []cycleBundles
	seen, aborts := int64(0), 0
	restore := hooks.Set(host.TestHooks{
		Now:            steppingClock(time.Second),
		MaxPollRecords: func() int { return perCycle },
		BeforeCommit: func(int) error {
			mu.Lock()
			defer mu.Unlock()
			now := bundleCountStarted.Load()
			c := cycleBundles{bundles: now - seen}
			seen = now
			// Every other cycle that ran bundles aborts, from the first.
			ran := 0
			for _, p := range cycles {
				if p.bundles > 0 {
					ran++
				}
			}
			c.aborted = c.bundles > 0 && ran%2 == 0 && aborts < maxBundleAborts
			if c.aborted {
				aborts++
			}
			cycles = append(cycles, c)
			if c.aborted {
				return host.ErrAbortCycle
			}
			return nil
		},
	})
	t.Cleanup(restore)
	bundleCountStarted.Store(0)

	p, s := beam.NewPipelineWithRoot()
	read := kafkaio.Read(s, "", bootstrap, []string{in}, kafkaio.MaxNumRecords(n),
		kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest", "max.partition.fetch.bytes": fmt.Sprint(4 << 20)}))
	kafkaio.Write(s, "", bootstrap, out, beam.ParDo(s, &bundleCountFn{}, read))
	id := runDone(t, env.Marshal(t, p), map[string]string{
		"bootstrap_servers":    bootstrap,
		"processing_guarantee": "exactly_once",
		"max_bundle_time_ms":   "1000",
	})

	got := map[string]string{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, nil, func(r *kgo.Record) {
		if _, dup := got[string(r.Key)]; dup {
			t.Errorf("%s: key %s written twice", out, r.Key)
		}
		got[string(r.Key)] = string(r.Value)
	})
	wrong := 0
	for k, v := range want {
		if got[k] != v {
			if wrong == 0 {
				t.Errorf("%s: key %s: value of %d bytes, want %d (present: %v)", out, k, len(got[k]), len(v), got[k] != "")
			}
			wrong++
		}
	}
	if wrong > 0 || len(got) != n {
		t.Errorf("%s: %d records, %d of the %d wanted missing or wrong", out, len(got), wrong, n)
	}

	mu.Lock()
	defer mu.Unlock()
	most, mostAborted := int64(0), int64(0)
	var ran []string
	for _, c := range cycles {
		if c.bundles == 0 {
			continue
		}
		ran = append(ran, fmt.Sprintf("%d%s", c.bundles, map[bool]string{true: "(aborted)"}[c.aborted]))
		if c.aborted {
			mostAborted = max(mostAborted, c.bundles)
		} else {
			most = max(most, c.bundles)
		}
	}
	t.Logf("bundles of the cycles that ran any: %v", ran)
	if most < 3 || mostAborted < 2 {
		t.Errorf("at most %d bundles in a committed cycle and %d in an aborted one, want at least 3 and 2: bundles did not close on time within cycles", most, mostAborted)
	}
	if aborts < 2 {
		t.Errorf("%d cycles aborted, want at least 2", aborts)
	}
	committed, attempted := jobCounters(t, id)
	if c, a := committed["eostest/copied"], attempted["eostest/copied"]; c != n || a <= n {
		t.Errorf("copied counter committed %d, attempted %d; want %d, and more (the aborted cycles' retries)", c, a, n)
	}
}
