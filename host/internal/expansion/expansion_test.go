package expansion

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/xlangx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"

	"github.com/ksrunner/ksrunner/host/internal/expansion/expansiontest"
	"github.com/ksrunner/ksrunner/translate"
)

// serve starts the service on a free port and returns its address.
func serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	NewService(nil).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func ptr(v int64) *int64 { return &v }

func init() { beam.RegisterFunction(identity) }

func identity(k, v []byte) ([]byte, []byte) { return k, v }

// The Go SDK's kafkaio, expanded over gRPC: each option lands in the spec.
func TestGoSDKRead(t *testing.T) {
	addr := serve(t)
	for _, c := range []struct {
		name    string
		read    func(s beam.Scope) beam.PCollection
		want    translate.KafkaRead
		bounded bool
	}{
		{name: "defaults",
			read: func(s beam.Scope) beam.PCollection { return kafkaio.Read(s, addr, "b:9092", []string{"in"}) },
			want: translate.KafkaRead{Topics: []string{"in"}, BootstrapServers: "b:9092", KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime"}},
		{name: "every option",
			read: func(s beam.Scope) beam.PCollection {
				return kafkaio.Read(s, addr, "b1:9092,b2:9092", []string{"in1", "in2"},
					kafkaio.ConsumerConfigs(map[string]string{"isolation.level": "read_committed", "group.id": "mine"}),
					kafkaio.StartReadTimestamp(1700000000000), kafkaio.MaxNumRecords(5), kafkaio.MaxReadSecs(7),
					kafkaio.CommitOffsetInFinalize(true), kafkaio.TimestampPolicy(kafkaio.CreateTime))
			},
			want: translate.KafkaRead{Topics: []string{"in1", "in2"}, BootstrapServers: "b1:9092,b2:9092",
				ConsumerConfig: map[string]string{"isolation.level": "read_committed"},
				KeyFormat:      "ByteArray", ValueFormat: "ByteArray", StartReadTimeMs: ptr(1700000000000),
				MaxNumRecords: ptr(5), MaxReadTimeMs: ptr(7000), TimestampPolicy: "CreateTime"},
			bounded: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pipe := expansiontest.Pipeline(t, func(s beam.Scope) { beam.ParDo(s, identity, c.read(s)) })
			reads := expansiontest.Transforms(pipe, translate.URNKafkaRead)
			if len(reads) != 1 {
				t.Fatalf("%d %s transforms, want 1", len(reads), translate.URNKafkaRead)
			}
			got, err := translate.DecodeKafkaRead(reads[0].GetSpec().GetPayload())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, c.want) {
				t.Errorf("spec\n got %s\nwant %s", expansiontest.JSON(*got), expansiontest.JSON(c.want))
			}
			comps := pipe.GetComponents()
			for _, id := range reads[0].GetOutputs() {
				pc := comps.GetPcollections()[id]
				if got, want := expansiontest.CoderString(comps, pc.GetCoderId()), "kv(nullable(bytes),nullable(bytes))"; got != want {
					t.Errorf("output coder %s, want %s", got, want)
				}
				if got := pc.GetIsBounded() == pipepb.IsBounded_BOUNDED; got != c.bounded {
					t.Errorf("output bounded %v, want %v", got, c.bounded)
				}
			}
		})
	}
}

func TestGoSDKWrite(t *testing.T) {
	addr := serve(t)
	pipe := expansiontest.Pipeline(t, func(s beam.Scope) {
		in := beam.ParDo(s, identity, kafkaio.Read(s, addr, "b:9092", []string{"in"}))
		kafkaio.Write(s, addr, "out:9092", "out", in, kafkaio.ProducerConfigs(map[string]string{"acks": "all"}))
	})
	writes := expansiontest.Transforms(pipe, translate.URNKafkaWrite)
	if len(writes) != 1 {
		t.Fatalf("%d %s transforms, want 1", len(writes), translate.URNKafkaWrite)
	}
	got, err := translate.DecodeKafkaWrite(writes[0].GetSpec().GetPayload())
	if err != nil {
		t.Fatal(err)
	}
	want := translate.KafkaWrite{Topic: "out", BootstrapServers: "out:9092", ProducerConfig: map[string]string{"acks": "all"}, KeyFormat: "ByteArray", ValueFormat: "ByteArray"}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("spec\n got %s\nwant %s", expansiontest.JSON(*got), expansiontest.JSON(want))
	}
	if len(writes[0].GetInputs()) != 1 || len(writes[0].GetOutputs()) != 0 {
		t.Errorf("inputs %v outputs %v, want one input and no outputs", writes[0].GetInputs(), writes[0].GetOutputs())
	}
	for _, in := range writes[0].GetInputs() {
		if pipe.GetComponents().GetPcollections()[in] == nil {
			t.Errorf("input %s is not a PCollection of the pipeline", in)
		}
	}
}

func init() { beam.RegisterFunction(toStrings) }

func toStrings(k, v []byte) (string, string) { return string(k), string(v) }

// A write whose input the serializers cannot write fails its expansion,
// naming the coders.
func TestGoSDKWriteWrongInput(t *testing.T) {
	addr := serve(t)
	p, s := beam.NewPipelineWithRoot()
	_ = p
	in := beam.ParDo(s, toStrings, kafkaio.Read(s, addr, "b:9092", []string{"in"}))
	_, err := beam.TryCrossLanguage(s, URNWrite,
		encode(t, goStyleWrite{Topic: "out", KeySerializer: ser + "ByteArraySerializer", ValueSerializer: ser + "ByteArraySerializer"}),
		addr, beam.UnnamedInput(in), nil)
	if err == nil || !strings.Contains(err.Error(), "beam:coder:string_utf8:v1") || !strings.Contains(err.Error(), "ByteArray") {
		t.Errorf("got %v, want an expansion error naming the input's coder and the serializer", err)
	}
}

// Rows as the SDKs encode them (xlangx.EncodeStructPayload, the Go SDK's
// encoder), in Go's and in Python's case style.
type goStyleRead struct {
	ConsumerConfig         map[string]string
	Topics                 []string
	KeyDeserializer        string
	ValueDeserializer      string
	StartReadTime          *int64
	MaxNumRecords          *int64
	MaxReadTime            *int64
	CommitOffsetInFinalize bool
	TimestampPolicy        string
}

type snakeStyleRead struct {
	ConsumerConfig    map[string]string `beam:"consumer_config"`
	Topics            []string          `beam:"topics"`
	KeyDeserializer   string            `beam:"key_deserializer"`
	ValueDeserializer string            `beam:"value_deserializer"`
	MaxReadTime       *int64            `beam:"max_read_time"`
	TimestampPolicy   string            `beam:"timestamp_policy"`
	ConsumerFactory   *string           `beam:"consumer_factory_fn_class"`
	PollingTimeout    *int64            `beam:"consumer_polling_timeout"`
	Redistribute      *bool             `beam:"redistribute"`
	DynamicPoll       *int64            `beam:"dynamic_read_poll_interval_seconds"`
}

type unknownFieldRead struct {
	ConsumerConfig map[string]string
	Topics         []string
	Bogus          string `beam:"bogus_field"`
}

type goStyleWrite struct {
	ProducerConfig  map[string]string
	Topic           string
	KeySerializer   string
	ValueSerializer string
}

func encode(t *testing.T, row any) []byte {
	t.Helper()
	b, err := xlangx.EncodeStructPayload(row)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const ser = "org.apache.kafka.common.serialization."

func TestConfigRead(t *testing.T) {
	factory := "com.example.MyConsumerFactory"
	for _, c := range []struct {
		name     string
		row      any
		meta     bool
		want     *translate.KafkaRead
		warnings []string // substrings, in order
		err      []string // substrings of the error
	}{
		{name: "Go style, every deserializer",
			row: goStyleRead{ConsumerConfig: map[string]string{"bootstrap.servers": "b:9092"}, Topics: []string{"t"},
				KeyDeserializer: ser + "StringDeserializer", ValueDeserializer: ser + "IntegerDeserializer", MaxReadTime: ptr(2)},
			want: &translate.KafkaRead{Topics: []string{"t"}, BootstrapServers: "b:9092", KeyFormat: "String", ValueFormat: "Integer",
				MaxReadTimeMs: ptr(2000), TimestampPolicy: "ProcessingTime"}},
		{name: "snake case, Long, hints",
			row: snakeStyleRead{ConsumerConfig: map[string]string{"bootstrap.servers": "b:9092", "group.id": "g"}, Topics: []string{"a", "b"},
				KeyDeserializer: "LongDeserializer", ValueDeserializer: ser + "ByteArrayDeserializer", TimestampPolicy: "LogAppendTime",
				PollingTimeout: ptr(2), Redistribute: new(bool)},
			want: &translate.KafkaRead{Topics: []string{"a", "b"}, BootstrapServers: "b:9092", KeyFormat: "Long", ValueFormat: "ByteArray",
				TimestampPolicy: "LogAppendTime"},
			warnings: []string{`consumer_config: group.id "g" ignored`}},
		{name: "with metadata", meta: true,
			row:  goStyleRead{Topics: []string{"t"}, KeyDeserializer: ser + "ByteArrayDeserializer"},
			want: &translate.KafkaRead{Topics: []string{"t"}, KeyFormat: "ByteArray", ValueFormat: "ByteArray", WithMetadata: true, TimestampPolicy: "ProcessingTime"}},
		{name: "commit_offset_in_finalize is reported",
			row:      goStyleRead{Topics: []string{"t"}, CommitOffsetInFinalize: true},
			want:     &translate.KafkaRead{Topics: []string{"t"}, KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime"},
			warnings: []string{"CommitOffsetInFinalize: ignored: ksrunner always commits"}},
		{name: "unsupported key deserializer",
			row: goStyleRead{Topics: []string{"t"}, KeyDeserializer: "io.confluent.kafka.serializers.KafkaAvroDeserializer"},
			err: []string{"KeyDeserializer", `"io.confluent.kafka.serializers.KafkaAvroDeserializer"`}},
		{name: "unsupported value deserializer, snake case",
			row: snakeStyleRead{Topics: []string{"t"}, ValueDeserializer: ser + "DoubleDeserializer"},
			err: []string{"value_deserializer", ser + "DoubleDeserializer"}},
		{name: "custom consumer factory",
			row: snakeStyleRead{Topics: []string{"t"}, ConsumerFactory: &factory},
			err: []string{"consumer_factory_fn_class", factory}},
		{name: "dynamic read: its interval is the metadata's max age",
			row:  snakeStyleRead{Topics: []string{"t"}, DynamicPoll: ptr(30)},
			want: &translate.KafkaRead{Topics: []string{"t"}, KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime", ConsumerConfig: map[string]string{"metadata.max.age.ms": "30000"}}},
		{name: "dynamic read: a shorter metadata.max.age.ms stays",
			row:  snakeStyleRead{Topics: []string{"t"}, DynamicPoll: ptr(30), ConsumerConfig: map[string]string{"metadata.max.age.ms": "2000"}},
			want: &translate.KafkaRead{Topics: []string{"t"}, KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime", ConsumerConfig: map[string]string{"metadata.max.age.ms": "2000"}}},
		{name: "dynamic read: a longer metadata.max.age.ms gives way",
			row:  snakeStyleRead{Topics: []string{"t"}, DynamicPoll: ptr(30), ConsumerConfig: map[string]string{"metadata.max.age.ms": "300000"}},
			want: &translate.KafkaRead{Topics: []string{"t"}, KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime", ConsumerConfig: map[string]string{"metadata.max.age.ms": "30000"}}},
		{name: "dynamic read: zero", row: snakeStyleRead{Topics: []string{"t"}, DynamicPoll: ptr(0)},
			err: []string{"dynamic_read_poll_interval_seconds", "0: want 1 to 3600 seconds"}},
		{name: "unknown field", row: unknownFieldRead{Topics: []string{"t"}}, err: []string{"bogus_field", "not a field"}},
		{name: "no topics", row: goStyleRead{}, err: []string{"no topics"}},
		{name: "bad timestamp policy", row: goStyleRead{Topics: []string{"t"}, TimestampPolicy: "EventTime"}, err: []string{`"EventTime"`}},
		{name: "with metadata needs bytes", meta: true,
			row: goStyleRead{Topics: []string{"t"}, KeyDeserializer: ser + "StringDeserializer"},
			err: []string{"with metadata", "ByteArrayDeserializer"}},
		{name: "security settings honoured",
			row: snakeStyleRead{Topics: []string{"t"}, ConsumerConfig: map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
				"sasl.jaas.config":    `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`,
				"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}},
			want: &translate.KafkaRead{Topics: []string{"t"}, KeyFormat: "ByteArray", ValueFormat: "ByteArray", TimestampPolicy: "ProcessingTime",
				ConsumerConfig: map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
					"sasl.jaas.config":    `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`,
					"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}}},
		{name: "unsupported security key",
			row: snakeStyleRead{Topics: []string{"t"}, ConsumerConfig: map[string]string{"security.protocol": "SASL_SSL", "sasl.kerberos.service.name": "kafka"}},
			err: []string{"consumer_config sasl.kerberos.service.name is not supported"}},
		{name: "unsupported security value",
			row: goStyleRead{Topics: []string{"t"}, ConsumerConfig: map[string]string{"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": "/ts.jks"}},
			err: []string{`ConsumerConfig ssl.truststore.type="JKS": not supported`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			urn := URNReadWithoutMetadata
			if c.meta {
				urn = URNReadWithMetadata
			}
			res, warnings, err := Expand(&jobpb.ExpansionRequest{Namespace: "ns",
				Transform: &pipepb.PTransform{UniqueName: "Read", Spec: &pipepb.FunctionSpec{Urn: urn, Payload: encode(t, c.row)}}})
			if c.err != nil {
				if err == nil {
					t.Fatalf("no error, want one naming %q", c.err)
				}
				for _, s := range c.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := translate.DecodeKafkaRead(res.GetTransform().GetSpec().GetPayload())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("spec\n got %s\nwant %s", expansiontest.JSON(got), expansiontest.JSON(c.want))
			}
			if len(warnings) != len(c.warnings) {
				t.Fatalf("warnings %q, want %d like %q", warnings, len(c.warnings), c.warnings)
			}
			for i, w := range c.warnings {
				if !strings.Contains(warnings[i], w) {
					t.Errorf("warning %q, want it to contain %q", warnings[i], w)
				}
			}
		})
	}
}

func TestConfigWrite(t *testing.T) {
	got, err := ConfigWrite(encode(t, goStyleWrite{ProducerConfig: map[string]string{"bootstrap.servers": "b:9092", "linger.ms": "5"},
		Topic: "out", KeySerializer: ser + "LongSerializer", ValueSerializer: "StringSerializer"}), false)
	if err != nil {
		t.Fatal(err)
	}
	want := &translate.KafkaWrite{Topic: "out", BootstrapServers: "b:9092", ProducerConfig: map[string]string{"linger.ms": "5"}, KeyFormat: "Long", ValueFormat: "String"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec\n got %s\nwant %s", expansiontest.JSON(got), expansiontest.JSON(want))
	}
	_, err = ConfigWrite(encode(t, goStyleWrite{Topic: "out", KeySerializer: "com.example.AvroSerializer"}), false)
	if err == nil || !strings.Contains(err.Error(), "KeySerializer") || !strings.Contains(err.Error(), "com.example.AvroSerializer") {
		t.Errorf("unsupported serializer: %v, want an error naming the field and the class", err)
	}
	_, err = ConfigWrite(encode(t, goStyleWrite{ProducerConfig: map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, Topic: "out"}), false)
	if err == nil || !strings.Contains(err.Error(), `ProducerConfig sasl.mechanism="GSSAPI": not supported`) {
		t.Errorf("unsupported SASL mechanism: %v, want an expansion error naming it", err)
	}
	_, err = ConfigWrite(encode(t, goStyleWrite{KeySerializer: ser + "StringSerializer"}), true)
	if err == nil || !strings.Contains(err.Error(), "ByteArraySerializer") {
		t.Errorf("with headers, String key: %v, want an error", err)
	}
}

// The service answers an expansion it refuses with the response's error,
// which the Go SDK raises, naming the field and the class.
func TestGoSDKExpansionError(t *testing.T) {
	addr := serve(t)
	p, s := beam.NewPipelineWithRoot()
	_ = p
	_, err := beam.TryCrossLanguage(s, URNReadWithoutMetadata,
		encode(t, goStyleRead{Topics: []string{"t"}, ValueDeserializer: "io.confluent.kafka.serializers.KafkaAvroDeserializer"}),
		addr, nil, beam.UnnamedOutput(typex.NewKV(typex.New(reflectx.ByteSlice), typex.New(reflectx.ByteSlice))))
	if err == nil || !strings.Contains(err.Error(), "ValueDeserializer") || !strings.Contains(err.Error(), "KafkaAvroDeserializer") {
		t.Errorf("got %v, want the expansion error naming ValueDeserializer and the class", err)
	}
}
