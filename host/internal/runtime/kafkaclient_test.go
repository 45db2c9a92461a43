package runtime

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/translate"
)

// clientPlan is a plan of two reads and two writes with the given configs.
func clientPlan(consumer1, consumer2, producer1, producer2 map[string]string) *translate.Plan {
	read := func(conf map[string]string) *translate.KafkaRead {
		return &translate.KafkaRead{Topics: []string{"in"}, ConsumerConfig: conf, KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray, TimestampPolicy: translate.TimestampCreateTime}
	}
	write := func(conf map[string]string) *translate.KafkaWrite {
		return &translate.KafkaWrite{Topic: "out", ProducerConfig: conf, KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray}
	}
	return &translate.Plan{SubTopologies: []*translate.SubTopology{
		{ID: 0, Input: "in", Root: translate.Root{Kind: translate.RootKafkaSource, TransformID: "read1", KafkaRead: read(consumer1)},
			Sinks: []translate.Sink{{PCollection: "pc", Topic: "out", KafkaWrite: write(producer1), TransformID: "write1"}}},
		{ID: 1, Input: "in2", Root: translate.Root{Kind: translate.RootKafkaSource, TransformID: "read2", KafkaRead: read(consumer2)},
			Sinks: []translate.Sink{{PCollection: "pc2", Topic: "out", KafkaWrite: write(producer2), TransformID: "write2"}}},
	}}
}

// The settings a client honours become its options: a client built with
// them has the values (read back with OptValue, so the test checks what
// franz-go was given, not how it was spelt).
func TestKafkaClientSettingsHonoured(t *testing.T) {
	plan := clientPlan(
		map[string]string{"fetch.max.bytes": "1048576", "max.partition.fetch.bytes": "65536", "fetch.min.bytes": "10", "fetch.max.wait.ms": "250", "client.id": "my-app", "auto.offset.reset": "earliest"},
		map[string]string{"fetch.max.bytes": "1048576"},
		map[string]string{"compression.type": "zstd", "linger.ms": "5", "acks": "all", "max.request.size": "2000000", "batch.size": "16384", "buffer.memory": "8000000"},
		nil,
	)
	cc, err := kafkaClientConfig(plan, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.notApplied) != 0 {
		t.Errorf("not applied: %v, want none", cc.notApplied)
	}
	cl := producerClient(t, cc, topics.New(plan, "app", 1, 2))
	for _, tc := range []struct {
		opt  any
		want any
	}{
		{kgo.FetchMaxBytes, int32(1048576)},
		{kgo.FetchMaxPartitionBytes, int32(65536)},
		{kgo.FetchMinBytes, int32(10)},
		{kgo.FetchMaxWait, 250 * time.Millisecond},
		{kgo.ClientID, "my-app"},
		{kgo.ProducerLinger, 5 * time.Millisecond},
		{kgo.ProducerBatchMaxBytes, int32(2000000)}, // the larger of batch.size and max.request.size
		{kgo.MaxBufferedBytes, int64(8000000)},
	} {
		if got := cl.OptValue(tc.opt); got != tc.want {
			t.Errorf("%T: %v (%T), want %v", tc.opt, got, got, tc.want)
		}
	}
	if got := cl.OptValues(kgo.ProducerBatchCompression); len(got) != 1 || !reflect.DeepEqual(got[0], []kgo.CompressionCodec{kgo.ZstdCompression()}) {
		t.Errorf("compression: %#v, want zstd", got)
	}
}

// Without buffer.memory the producer buffers Kafka's default, 32 MiB, or
// twice the largest record if that is more.
func TestProducerBufferDefault(t *testing.T) {
	for _, tc := range []struct {
		request string
		want    int64
	}{{"", 32 << 20}, {"20000000", 40000000}} {
		p := map[string]string{}
		if tc.request != "" {
			p["max.request.size"] = tc.request
		}
		plan := clientPlan(nil, nil, p, nil)
		cc, err := kafkaClientConfig(plan, true)
		if err != nil {
			t.Fatal(err)
		}
		cl := producerClient(t, cc, topics.New(plan, "app", 1, 2))
		if got := cl.OptValue(kgo.MaxBufferedBytes); got != tc.want {
			t.Errorf("max.request.size %q: buffer %v, want %d", tc.request, got, tc.want)
		}
	}
}

// producerClient is a client with the options of cc and the producer
// limits it gives the topics of ts.
func producerClient(t *testing.T, cc *clientConfig, ts *topics.Set) *kgo.Client {
	t.Helper()
	limits, err := cc.producerLimits(ts)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, cc.opts...), limits...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// The producer's batches for each topic keep to what the topic takes: an
// internal topic its own max.message.bytes (internal_max_message_bytes
// when the job created it, Kafka's default when unknown), a user's topic
// the Kafka write's limit or its own max.message.bytes if lower, since a
// broker refuses a whole batch over it. The buffer holds the largest
// record, or a buffer.memory that cannot is refused, naming the transform.
func TestProducerLimits(t *testing.T) {
	plan := clientPlan(nil, nil, map[string]string{"max.request.size": "2000000"}, nil)
	plan.Topics = []*translate.Topic{{Name: "gbk-repartition", Kind: translate.TopicRepartition}, {Name: "side", Kind: translate.TopicSideInput}}
	plan.SubTopologies = append(plan.SubTopologies, &translate.SubTopology{ID: 2, Input: "gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey}})
	ts := topics.New(plan, "app", 1, 2)
	repartition, side, changelog := ts.Full("gbk-repartition"), ts.Full("side"), ts.Full(topics.ChangelogTopic(2))
	ts.MaxMessageBytes[repartition] = 16 << 20
	ts.MaxMessageBytes[changelog] = 8 << 20
	ts.MaxMessageBytes["out"] = 500000 // the user's topic takes less than the write's limit
	ts.MaxMessageBytes["other"] = 4000000
	cc, err := kafkaClientConfig(plan, true)
	if err != nil {
		t.Fatal(err)
	}
	cl := producerClient(t, cc, ts)
	limit := cl.OptValues(kgo.ProducerBatchMaxBytesFn)[0].(func(string) int32)
	for topic, want := range map[string]int32{
		repartition:   16 << 20,
		changelog:     8 << 20,
		side:          topics.DefaultRecordLimit, // unknown
		"out":         500000,
		"other":       2000000,
		"unknown-out": 2000000,
	} {
		if got := limit(topic); got != want {
			t.Errorf("topic %s: batch limit %d, want %d", topic, got, want)
		}
	}
	if got, want := cl.OptValue(kgo.MaxBufferedBytes), int64(32<<20); got != want {
		t.Errorf("buffer %v, want %d (twice the largest record)", got, want)
	}

	plan = clientPlan(nil, nil, map[string]string{"buffer.memory": "10000000"}, nil)
	cc, err = kafkaClientConfig(plan, true)
	if err != nil {
		t.Fatal(err)
	}
	ts = topics.New(plan, "app", 1, 2)
	ts.MaxMessageBytes[ts.Full(topics.ChangelogTopic(0))] = 16 << 20
	_, err = cc.producerLimits(ts)
	if want := "transform write1: producer config buffer.memory=10000000 is less than the largest record the producer may send (16777216 bytes"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("buffer.memory below an internal topic's limit: %v, want an error containing %q", err, want)
	}
}

// batch.size alone never lowers the batch limit below franz-go's default
// (Java sends a record larger than batch.size in a batch of its own);
// larger, it raises it.
func TestBatchLimit(t *testing.T) {
	for _, tc := range []struct {
		batch, request string
		want           int32
		ok             bool
	}{
		{"", "", 0, false},
		{"16384", "", defaultBatchMaxBytes, true},
		{"4000000", "", 4000000, true},
		{"", "500000", 500000, true},
		{"16384", "500000", 500000, true},
		{"600000", "500000", 600000, true},
	} {
		got, ok := batchLimit(tc.batch, tc.request)
		if got != tc.want || ok != tc.ok {
			t.Errorf("batch.size %q max.request.size %q: %d %v, want %d %v", tc.batch, tc.request, got, ok, tc.want, tc.ok)
		}
	}
}

// What the client cannot honour fails at Run naming the transform, the
// setting and the value; what it does not apply is reported per transform.
func TestKafkaClientSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		name           string
		c1, c2, p1, p2 map[string]string
		exactlyOnce    bool
		want           string
		wantNotApplied map[string]string // transform -> its settings, comma-joined
	}{
		{name: "bad number", c1: map[string]string{"fetch.max.bytes": "lots"}, want: `transform read1: consumer config fetch.max.bytes="lots": want a positive integer`},
		{name: "bad compression", p1: map[string]string{"compression.type": "brotli"}, want: `transform write1: producer config compression.type="brotli": want none, gzip, snappy, lz4 or zstd`},
		{name: "acks=1 in transactions", p1: map[string]string{"acks": "1"}, exactlyOnce: true, want: `transform write1: producer config acks="1": exactly_once writes in transactions, which need acks=all`},
		{name: "acks=1 at least once", p1: map[string]string{"acks": "1"}},
		{name: "conflict", p1: map[string]string{"linger.ms": "5"}, p2: map[string]string{"linger.ms": "10"}, want: `transforms write1 and write2: producer config linger.ms is "5" and "10"`},
		{name: "client.id conflict across consumer and producer", c1: map[string]string{"client.id": "a"}, p2: map[string]string{"client.id": "b"}, want: `transforms read1 and write2: producer config client.id is "a" and "b"`},
		{name: "buffer below the largest record", p1: map[string]string{"max.request.size": "2000000", "buffer.memory": "1000000"},
			want: `transform write1: producer config buffer.memory=1000000 is less than the largest record the producer sends (2000000 bytes`},
		{name: "agreement", c1: map[string]string{"fetch.min.bytes": "5"}, c2: map[string]string{"fetch.min.bytes": "5"}},
		{name: "not applied", c1: map[string]string{"session.timeout.ms": "10000", "max.poll.records": "5"}, p2: map[string]string{"enable.idempotence": "true"},
			wantNotApplied: map[string]string{"read1": "max.poll.records,session.timeout.ms", "write2": "enable.idempotence"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := kafkaClientConfig(clientPlan(tc.c1, tc.c2, tc.p1, tc.p2), tc.exactlyOnce)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				got := map[string]string{}
				for k, v := range cc.notApplied {
					got[k] = strings.Join(v, ",")
				}
				if len(got) != len(tc.wantNotApplied) {
					t.Errorf("not applied %v, want %v", got, tc.wantNotApplied)
				}
				for k, v := range tc.wantNotApplied {
					if got[k] != v {
						t.Errorf("not applied %v, want %v", got, tc.wantNotApplied)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// metadata.max.age.ms: the shortest the reads give is the client's (it
// serves them all), with franz-go's min age lowered to it when below 5 s;
// none keeps franz-go's 5 minutes; a bad value names the transform.
func TestMetadataMaxAge(t *testing.T) {
	for _, tc := range []struct {
		name         string
		c1, c2       map[string]string
		max, minimum time.Duration
		want         string
	}{
		{name: "none", max: 5 * time.Minute, minimum: 5 * time.Second},
		{name: "one", c2: map[string]string{"metadata.max.age.ms": "30000"}, max: 30 * time.Second, minimum: 5 * time.Second},
		{name: "shortest of two", c1: map[string]string{"metadata.max.age.ms": "60000"}, c2: map[string]string{"metadata.max.age.ms": "1000"}, max: time.Second, minimum: time.Second},
		{name: "not a number", c1: map[string]string{"metadata.max.age.ms": "soon"}, want: `transform read1: consumer config metadata.max.age.ms="soon": want milliseconds`},
		{name: "above an hour", c2: map[string]string{"metadata.max.age.ms": "3600001"}, want: `transform read2: consumer config metadata.max.age.ms="3600001": want 10 to 3600000 milliseconds`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := kafkaClientConfig(clientPlan(tc.c1, tc.c2, nil, nil), true)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cc.notApplied) != 0 {
				t.Errorf("not applied: %v, want none", cc.notApplied)
			}
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, cc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if got := cl.OptValue(kgo.MetadataMaxAge); got != tc.max {
				t.Errorf("max age %v, want %v", got, tc.max)
			}
			if got := cl.OptValue(kgo.MetadataMinAge); got != tc.minimum {
				t.Errorf("min age %v, want %v", got, tc.minimum)
			}
		})
	}
}
