package translate

import (
	"reflect"
	"strings"
	"testing"
)

func TestKafkaFormat(t *testing.T) {
	for _, tc := range []struct{ class, want, err string }{
		{"org.apache.kafka.common.serialization.ByteArrayDeserializer", KafkaByteArray, ""},
		{"org.apache.kafka.common.serialization.StringSerializer", KafkaString, ""},
		{"LongDeserializer", KafkaLong, ""},
		{"org.apache.kafka.common.serialization.IntegerSerializer", KafkaInteger, ""},
		{"io.confluent.kafka.serializers.KafkaAvroDeserializer", "", "KafkaAvroDeserializer"},
		{"org.apache.kafka.common.serialization.String", "", "not a Kafka serializer"},
	} {
		got, err := KafkaFormat(tc.class)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("KafkaFormat(%q) = %q, %v; want an error naming %q", tc.class, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("KafkaFormat(%q) = %q, %v; want %q", tc.class, got, err, tc.want)
		}
	}
}

func TestKafkaSpecsRoundTrip(t *testing.T) {
	n, start := int64(100), int64(1700000000000)
	r := &KafkaRead{Topics: []string{"in"}, BootstrapServers: "b:9092", ConsumerConfig: map[string]string{"fetch.max.bytes": "1048576"},
		KeyFormat: KafkaString, ValueFormat: KafkaLong, WithMetadata: true, StartReadTimeMs: &start, MaxNumRecords: &n, TimestampPolicy: TimestampCreateTime}
	b, err := EncodeKafkaRead(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeKafkaRead(b)
	if err != nil || !reflect.DeepEqual(got, r) || !got.Bounded() {
		t.Fatalf("DecodeKafkaRead = %+v, %v; want %+v, bounded", got, err, r)
	}
	w := &KafkaWrite{Topic: "out", KeyFormat: KafkaByteArray, ValueFormat: KafkaInteger, ProducerConfig: map[string]string{"acks": "all"}}
	if b, err = EncodeKafkaWrite(w); err != nil {
		t.Fatal(err)
	}
	if gw, err := DecodeKafkaWrite(b); err != nil || !reflect.DeepEqual(gw, w) {
		t.Fatalf("DecodeKafkaWrite = %+v, %v; want %+v", gw, err, w)
	}
}

func TestKafkaSpecsRefused(t *testing.T) {
	neg := int64(-1)
	ok := KafkaRead{Topics: []string{"in"}, KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray, TimestampPolicy: TimestampProcessingTime}
	for _, tc := range []struct {
		name string
		edit func(*KafkaRead)
		want string
	}{
		{"no topics", func(r *KafkaRead) { r.Topics = nil }, "no topics"},
		{"unknown value format", func(r *KafkaRead) { r.ValueFormat = "Avro" }, `value_format "Avro"`},
		{"unknown timestamp policy", func(r *KafkaRead) { r.TimestampPolicy = "Wall" }, `timestamp policy "Wall"`},
		{"negative max records", func(r *KafkaRead) { r.MaxNumRecords = &neg }, "max_num_records -1"},
		{"negative max read time", func(r *KafkaRead) { r.MaxReadTimeMs = &neg }, "max_read_time -1ms"},
		{"negative start read time", func(r *KafkaRead) { r.StartReadTimeMs = &neg }, "start_read_time -1ms"},
	} {
		r := ok
		tc.edit(&r)
		if _, err := EncodeKafkaRead(&r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := EncodeKafkaWrite(&KafkaWrite{KeyFormat: KafkaByteArray, ValueFormat: KafkaByteArray}); err == nil || !strings.Contains(err.Error(), "no topic") {
		t.Errorf("a write without a topic: %v", err)
	}
	if _, err := EncodeKafkaRead(&ok); err != nil {
		t.Errorf("a valid read refused: %v", err)
	}
}
