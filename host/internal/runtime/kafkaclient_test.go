package runtime

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, cc.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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
		cc, err := kafkaClientConfig(clientPlan(nil, nil, p, nil), true)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, cc.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := cl.OptValue(kgo.MaxBufferedBytes); got != tc.want {
			t.Errorf("max.request.size %q: buffer %v, want %d", tc.request, got, tc.want)
		}
		cl.Close()
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
