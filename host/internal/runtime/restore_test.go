package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

// changelogApp is an application of one stateful sub-topology (a
// GroupByKey, id 0) reading a repartition topic of partitions partitions,
// with its internal topics created on a broker: what restore and standby
// tests need of an instance, without a consumer group.
type changelogApp struct {
	bootstrap string
	app       string // the application id
	plan      *translate.Plan
	topics    *topics.Set
	admin     *kgo.Client
}

func newChangelogApp(t testing.TB, bootstrap string, partitions int) *changelogApp {
	t.Helper()
	plan := &translate.Plan{
		Topics: []*translate.Topic{{Name: "gbk-repartition", Kind: translate.TopicRepartition}},
		SubTopologies: []*translate.SubTopology{
			{ID: 0, Input: "gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey, TransformID: "gbk"}},
		},
	}
	app := kafkatest.UniqueName(t, "app")
	ts := topics.New(plan, app, 1, partitions)
	admin := kafkatest.Client(t, bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ts.Create(ctx, topics.AdminOf(admin)); err != nil {
		t.Fatal(err)
	}
	if kafkatest.IsReal() {
		// The changelogs of restore tests hold up to 100 MB each: not to be
		// left on a broker that every test run shares.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := ts.Delete(ctx, topics.AdminOf(admin)); err != nil {
				t.Logf("deleting the topics of application %s: %v", app, err)
			}
		})
	}
	return &changelogApp{bootstrap: bootstrap, app: app, plan: plan, topics: ts, admin: admin}
}

// changelog is the Kafka name of the sub-topology's changelog.
func (a *changelogApp) changelog() string { return a.topics.Full(a.topics.Changelogs[0]) }

// task is the id of the task of partition p.
func (a *changelogApp) task(p int32) taskID { return taskID{a.topics.Full("gbk-repartition"), p} }

// instance is an instance of the application on the store in dir, enough
// to restore tasks (and stand by for them); restored receives
// Hooks.Restored.
func (a *changelogApp) instance(t testing.TB, dir string, restored func(sub int, p int32, records int)) *instance {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{logger}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &instance{
		cfg: Config{
			Plan:             a.plan,
			BootstrapServers: a.bootstrap,
			ApplicationID:    a.app,
			Logger:           logger,
			Hooks:            &Hooks{Restored: restored},
		},
		topics:     a.topics,
		admin:      a.admin,
		db:         db,
		subByTopic: map[string]*translate.SubTopology{a.topics.Full("gbk-repartition"): a.plan.SubTopologies[0]},
	}
}

// changelogWriter writes a task's changelog as its owner does: store keys
// under the task's prefix, 0x01|value for a set and a tombstone for a
// delete, in transactions; model is the task's committed state.
type changelogWriter struct {
	cl        *kgo.Client
	topic     string
	partition int32
	prefix    []byte
	rng       *rand.Rand
	model     map[string][]byte
	noise     []byte // random bytes that values are cut from
	records   int    // committed records
	bytes     int64  // committed key and value bytes
	end       int64  // the partition's end offset after the last transaction
}

func newChangelogWriter(t testing.TB, a *changelogApp, p int32, opts ...kgo.Opt) *changelogWriter {
	t.Helper()
	cl := kafkatest.Client(t, a.bootstrap, append([]kgo.Opt{
		kgo.TransactionalID(kafkatest.UniqueName(t, "owner")),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	}, opts...)...)
	w := &changelogWriter{
		cl: cl, topic: a.changelog(), partition: p,
		prefix: state.TaskPrefix(0, p),
		rng:    rand.New(rand.NewPCG(uint64(p), 42)),
		model:  map[string][]byte{},
		noise:  make([]byte, 1<<20),
	}
	for i := 0; i < len(w.noise); i += 8 {
		binary.LittleEndian.PutUint64(w.noise[i:], w.rng.Uint64())
	}
	return w
}

// settledEnd is the partition's end offset once the transaction's marker
// is in it: a real broker answers EndTransaction when its coordinator has
// logged the outcome and writes the partition's marker after that, so the
// end read straight away may lack the marker's offset. The marker is in
// when the last stable offset (read_committed) has caught up with the high
// watermark.
func (w *changelogWriter) settledEnd(ctx context.Context) (int64, error) {
	adm := kadm.NewClient(w.cl)
	for {
		hwm, err := adm.ListEndOffsets(ctx, w.topic)
		if err == nil {
			err = hwm.Error()
		}
		if err != nil {
			return 0, err
		}
		lso, err := adm.ListCommittedOffsets(ctx, w.topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return 0, err
		}
		h, _ := hwm.Lookup(w.topic, w.partition)
		l, _ := lso.Lookup(w.topic, w.partition)
		if h.Offset == l.Offset {
			return h.Offset, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("partition %d of %s: last stable offset %d never reached the end %d: %w", w.partition, w.topic, l.Offset, h.Offset, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// txn writes one transaction of about size bytes: values of 1-4 KiB under
// keys of a keyspace of keys keys (so some keys are overwritten), one
// record in twenty a delete; abort aborts it.
func (w *changelogWriter) txn(ctx context.Context, size, keys int, abort bool) error {
	changes, n, b, err := w.open(ctx, size, keys)
	if err != nil {
		return err
	}
	commit := kgo.TryCommit
	if abort {
		commit = kgo.TryAbort
	}
	if err := w.cl.EndTransaction(ctx, commit); err != nil {
		return err
	}
	end, err := w.settledEnd(ctx)
	if err != nil {
		return err
	}
	w.end = end
	if abort {
		return nil
	}
	w.records += n
	w.bytes += b
	for k, v := range changes {
		if v == nil {
			delete(w.model, k)
		} else {
			w.model[k] = v[1:]
		}
	}
	return nil
}

// open begins a transaction and writes about size bytes in it as txn
// does, flushed to the broker and left open; changes are its records'
// values by key, n and b their count and bytes.
func (w *changelogWriter) open(ctx context.Context, size, keys int) (changes map[string][]byte, n int, b int64, err error) {
	if err := w.cl.BeginTransaction(); err != nil {
		return nil, 0, 0, err
	}
	changes = map[string][]byte{}
	for b < int64(size) {
		k := state.Key(w.prefix, state.Buffer, binary.BigEndian.AppendUint64(nil, uint64(w.rng.IntN(keys))))
		var v []byte
		if w.rng.IntN(20) != 0 {
			n := 1024 + w.rng.IntN(3*1024)
			off := w.rng.IntN(len(w.noise) - n)
			v = append([]byte{1}, w.noise[off:off+n]...)
		}
		changes[string(k)] = v
		n++
		b += int64(len(k) + len(v))
		w.cl.Produce(ctx, &kgo.Record{Topic: w.topic, Partition: w.partition, Key: k, Value: v}, nil)
	}
	if err := w.cl.Flush(ctx); err != nil {
		return nil, 0, 0, err
	}
	return changes, n, b, nil
}

// taskState reads every key of task p's prefix in db but its changelog
// position.
func taskState(t testing.TB, db *pebble.DB, p int32) map[string][]byte {
	t.Helper()
	prefix := state.TaskPrefix(0, p)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: state.PrefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	pos := state.Key(prefix, state.Changelog)
	got := map[string][]byte{}
	for it.First(); it.Valid(); it.Next() {
		if bytes.Equal(it.Key(), pos) {
			continue
		}
		got[string(it.Key())] = append([]byte(nil), it.Value()...)
	}
	return got
}

// diffState describes how got differs from want ("" if equal).
func diffState(got, want map[string][]byte) string {
	var missing, wrong, extra int
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
		case !bytes.Equal(g, v):
			wrong++
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	if missing+wrong+extra == 0 {
		return ""
	}
	return fmt.Sprintf("%d keys missing, %d with a wrong value, %d extra (of %d)", missing, wrong, extra, len(want))
}

// restoreFigure is one timed restore.
type restoreFigure struct {
	records int
	bytes   int64
	took    time.Duration
}

func (f restoreFigure) String() string {
	s := f.took.Seconds()
	return fmt.Sprintf("%d records, %.1f MB in %v: %.1f MB/s, %.0f records/s",
		f.records, float64(f.bytes)/1e6, f.took.Round(time.Millisecond), float64(f.bytes)/1e6/s, float64(f.records)/s)
}

// restoreTimed restores task p into i's store and times it.
func restoreTimed(t testing.TB, i *instance, p int32) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := i.restoreTasks(ctx, []taskID{{i.topics.Full("gbk-repartition"), p}}); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// TestRestoreThroughput restores a task's 100 MB changelog (values of 1-4
// KiB, in transactions of 4 MB, one aborted in ten) into an empty store
// and prints the throughput; the restored state is the committed one.
// Meanwhile another instance stands by for the task, following the
// changelog as it is written; when the task moves to it, with a last
// transaction of 1 MB it had not seen, its restore replays only that
// transaction, in under a second (issue 12: "with a standby replica the
// restore part of [a failover] is under 1 s for a 100 MB store"). Under
// -race, which slows restores about tenfold, the changelog is 20 MB and
// the times are only printed.
func TestRestoreThroughput(t *testing.T) {
	total := int64(100 << 20)
	if raceDetector {
		total = 20 << 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := newChangelogApp(t, kafkatest.Broker(t), 1)
	w := newChangelogWriter(t, a, 0)
	var standbyRestored restoredCounts
	warm := a.instance(t, t.TempDir(), standbyRestored.hook)
	s := a.standbyOf(t, warm, 0)
	pos := watchPositions(s)
	stop := s.start(ctx, nil)
	defer func() { stop() }()

	start := time.Now()
	for n := 0; w.bytes < total; n++ {
		if err := w.txn(ctx, 4<<20, 1<<20, n%10 == 9); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Now()
	t.Logf("changelog written: %d records, %.1f MB committed, in %v", w.records, float64(w.bytes)/1e6, written.Sub(start).Round(time.Millisecond))
	pos.waitFor(t, a.task(0), w.end)
	t.Logf("standby caught up %v after the last commit", time.Since(written).Round(time.Millisecond))

	// The task moves to the standby's instance; its owner's last
	// transaction is the standby's lag.
	s.activate([]taskID{a.task(0)})
	records, size := w.records, w.bytes
	if err := w.txn(ctx, 1<<20, 1<<20, false); err != nil {
		t.Fatal(err)
	}
	tail := restoreFigure{records: w.records - records, bytes: w.bytes - size}

	var restored restoredCounts
	cold := a.instance(t, t.TempDir(), restored.hook)
	full := restoreFigure{records: w.records, bytes: w.bytes, took: restoreTimed(t, cold, 0)}
	t.Logf("restore into an empty store (%s): %v", brokerKind(), full)
	if got := restored.get(0); got != w.records {
		t.Errorf("restored %d records, want the %d committed", got, w.records)
	}
	if d := diffState(taskState(t, cold.db, 0), w.model); d != "" {
		t.Errorf("restored state: %s", d)
	}

	tail.took = restoreTimed(t, warm, 0)
	t.Logf("restore with a warm standby (%s): %v (the tail of a %.1f MB changelog)", brokerKind(), tail, float64(w.bytes)/1e6)
	if got := standbyRestored.get(0); got != tail.records {
		t.Errorf("restore with a standby replayed %d records, want the tail's %d", got, tail.records)
	}
	if d := diffState(taskState(t, warm.db, 0), w.model); d != "" {
		t.Errorf("state restored with a standby: %s", d)
	}
	if tail.took >= time.Second && !raceDetector {
		t.Errorf("restore with a warm standby took %v, want under 1 s", tail.took)
	}
}

func brokerKind() string {
	kind := "kfake"
	if kafkatest.IsReal() {
		kind = "real broker"
	}
	if raceDetector {
		kind += ", -race: not representative"
	}
	return kind
}
