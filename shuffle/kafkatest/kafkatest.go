package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnvBootstrap names the environment variable holding a real broker's bootstrap address.
const EnvBootstrap = "KSRUNNER_TEST_BOOTSTRAP"

// IsReal reports whether tests run against a real broker (KSRUNNER_TEST_BOOTSTRAP is set)
// rather than an in-process kfake cluster.
func IsReal() bool { return os.Getenv(EnvBootstrap) != "" }

var (
	reachOnce sync.Once
	reachErr  error
)

// Broker returns the bootstrap address of the broker the test should use: the real
// broker of KSRUNNER_TEST_BOOTSTRAP if set (failing the test if it cannot be reached),
// otherwise a new single-broker kfake cluster on a random loopback port, closed by
// t.Cleanup.
func Broker(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv(EnvBootstrap); addr != "" {
		reachOnce.Do(func() {
			for _, a := range strings.Split(addr, ",") {
				c, err := net.DialTimeout("tcp", strings.TrimSpace(a), 5*time.Second)
				if err != nil {
					reachErr = err
					return
				}
				c.Close()
			}
		})
		if reachErr != nil {
			t.Fatalf("kafkatest: %s=%s is not reachable: %v (start it with .ci/kafka-broker.sh up)", EnvBootstrap, addr, reachErr)
		}
		return addr
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(1),
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.heartbeat.interval.ms": "1000",
		}),
	)
	if err != nil {
		t.Fatalf("kafkatest: starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// maxTestPart bounds the part of a name taken from the test name.
const maxTestPart = 80

// UniqueName returns a name for a topic, consumer group, transactional id or
// application id that no other test (or earlier run against the same broker) uses:
// prefix, the sanitized test name and a random suffix, joined by '-'. It holds only
// [a-zA-Z0-9_-], so it is a legal topic name and can be embedded in others.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("kafkatest: random: %v", err)
	}
	name := sanitize(t.Name())
	if len(name) > maxTestPart {
		name = name[:maxTestPart]
	}
	parts := make([]string, 0, 3)
	if p := sanitize(prefix); p != "" {
		parts = append(parts, p)
	}
	return strings.Join(append(parts, name, hex.EncodeToString(b[:])), "-")
}

func sanitize(s string) string {
	var sb strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			sb.WriteRune(r)
		default:
			sb.WriteByte('_')
		}
	}
	return sb.String()
}

// Client returns a franz-go client for bootstrap with the given options, closed by t.Cleanup.
func Client(t testing.TB, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates topic with the given number of partitions (replication factor 1)
// and waits until its metadata is visible. It fails the test on error, including when
// the topic already exists.
func CreateTopic(t testing.TB, bootstrap, topic string, partitions int32) {
	t.Helper()
	CreateTopicWithConfigs(t, bootstrap, topic, partitions, nil)
}

// CreateTopicWithConfigs is CreateTopic with topic configs (name →
// value), which the topic has from its creation on: a config altered
// afterwards reaches the partition's leader a moment later.
func CreateTopicWithConfigs(t testing.TB, bootstrap, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	cl := Client(t, bootstrap)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cfg map[string]*string
	for k, v := range configs {
		if cfg == nil {
			cfg = map[string]*string{}
		}
		cfg[k] = &v
	}
	resp, err := adm.CreateTopic(ctx, partitions, 1, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", topic, err)
	}
	if err := WaitForLeaders(ctx, cl, partitions, topic); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
}

// WaitForLeaders waits until every one of topics has partitions
// partitions, each with a leader, or ctx ends. It asks with a Metadata
// request of its own each time: kadm's Metadata answers from franz-go's
// cache, which keeps a topic seen without leaders for 5 s
// (MetadataMinAge). (ksrunner's own wait, host/internal/topics, is not
// importable from tools; this one serves the tests and the bench.)
func WaitForLeaders(ctx context.Context, cl *kgo.Client, partitions int32, topics ...string) error {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, topic := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
	}
	for {
		resp, err := req.RequestWith(ctx, cl)
		ready := err == nil && len(resp.Topics) == len(topics)
		for i := 0; ready && i < len(resp.Topics); i++ {
			td := resp.Topics[i]
			ready = td.ErrorCode == 0 && len(td.Partitions) == int(partitions)
			for _, p := range td.Partitions {
				ready = ready && p.ErrorCode == 0 && p.Leader >= 0
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not ready: %w (last metadata error: %v)", topics, ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ReadTopic reads topic from the start, read_committed, handing each record
// to each, until until() holds or (until nil, when nothing writes the topic
// any more) up to its end: an end marker is written to every partition and
// the topic is read up to the markers (a transactional topic's end offset
// counts commit markers, which no fetch returns). until is asked again at
// least every second, records or not, so it may also fail the test (a
// writing process that ended). It fails the test at the deadline of ctx.
func ReadTopic(ctx context.Context, t testing.TB, bootstrap, topic string, until func() bool, each func(*kgo.Record)) {
	t.Helper()
	const endKey = "\x00end"
	cl := Client(t, bootstrap, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var parts int
	if until == nil {
		td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		parts = len(td[topic].Partitions)
		for p := range parts {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(endKey)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ended := map[int32]bool{}
	for (until != nil && !until()) || (until == nil && len(ended) < parts) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			t.Fatalf("topic %s: not read to its end (or the records awaited) by the deadline", topic)
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == endKey {
				ended[r.Partition] = true
				return
			}
			each(r)
		})
	}
}

// CountOutPartitions is the partition count of FillCountTopics' output topic.
const CountOutPartitions = 3

// FillCountTopics creates topic in with 4 partitions and out with
// CountOutPartitions, and
// writes to in N records over 10 keys, 7 s apart from an hour ago (so the
// idle watermark, wall time less 1 s, closes every window), each a count of
// 1 or 2 (key String, value Long); produced in timestamp order, so in order
// in every partition. It returns the sum per "key@window start" of
// one-minute windows.
func FillCountTopics(ctx context.Context, t testing.TB, bootstrap, in, out string) map[string]int64 {
	t.Helper()
	CreateTopic(t, bootstrap, in, 4)
	CreateTopic(t, bootstrap, out, CountOutPartitions)
	const n = 400
	base := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()
	want := map[string]int64{}
	cl := Client(t, bootstrap)
	for i := range n {
		key := fmt.Sprintf("k%d", i%10)
		ts := base + int64(i)*7000
		v := int64(1 + i%2)
		want[fmt.Sprintf("%s@%d", key, ts-ts%60000)] += v
		cl.Produce(ctx, &kgo.Record{Topic: in, Key: []byte(key), Value: binary.BigEndian.AppendUint64(nil, uint64(v)), Timestamp: time.UnixMilli(ts)}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("producing: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return want
}

// AddCount adds r, a record of a count topic (FillCountTopics' output: a
// key and its count, a Long), to got, failing the test on a value that is
// not a Long or a key written twice.
func AddCount(t testing.TB, got map[string]int64, r *kgo.Record) {
	t.Helper()
	if len(r.Value) != 8 {
		t.Errorf("topic %s offset %d: value %x is not a Long", r.Topic, r.Offset, r.Value)
		return
	}
	if _, dup := got[string(r.Key)]; dup {
		t.Errorf("topic %s: key %q written twice", r.Topic, r.Key)
	}
	got[string(r.Key)] = int64(binary.BigEndian.Uint64(r.Value))
}

// ReadCounts reads a count topic (ReadTopic) until it holds want keys, or
// (want < 0, when nothing writes it any more) to its end: key -> count,
// by AddCount.
func ReadCounts(ctx context.Context, t testing.TB, bootstrap, topic string, want int) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	var until func() bool
	if want >= 0 {
		until = func() bool { return len(got) >= want }
	}
	ReadTopic(ctx, t, bootstrap, topic, until, func(r *kgo.Record) { AddCount(t, got, r) })
	return got
}

// CheckCounts fails the test unless got is want, listing the differences;
// when says at what point of the test.
func CheckCounts(t testing.TB, when string, got, want map[string]int64) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			diff = append(diff, fmt.Sprintf("%s: got %d want %d", k, got[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: got %d, not expected", k, got[k]))
		}
	}
	t.Errorf("%s: output counts differ (%d records, want %d):\n%s", when, len(got), len(want), strings.Join(diff, "\n"))
}
