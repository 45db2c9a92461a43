package translate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Kafka IO primitives. ksrunner's expansion service (host/internal/expansion)
// expands Beam's KafkaIO transforms (the URNs the Go and Python SDKs send,
// which elsewhere a Java expansion service answers) into these two
// primitives; translate lays them out and the host runs them on its own
// Kafka machinery:
//
//   - URNKafkaRead: a root transform (no inputs) whose output is the
//     records of the user's topics, as KV<key, value> (KafkaRead.WithMetadata
//     false), as the with-metadata record row, or as the payload row of the
//     Kafka schema transforms (KafkaRead.PayloadRow, kafkapayload.go; a
//     structured format's read may have a second output, of the values it
//     cannot parse: KafkaRead.ErrorOutput). It heads a sub-topology of its
//     own that reads the topics under the application's consumer group,
//     one task per partition.
//   - URNKafkaWrite: a transform with one input whose elements are
//     produced to KafkaWrite.Topic by the task that computes them, inside
//     its transaction; it has no output, except a structured format's
//     write's error output (KafkaWrite.ErrorOutput).
//
// The payload of both is the spec as JSON (EncodeKafkaRead,
// EncodeKafkaWrite): the expansion service has already checked every field
// a user can get wrong, so the host never sees a configuration it cannot
// honour.
const (
	URNKafkaRead  = "ksrunner:transform:kafka_read:v1"
	URNKafkaWrite = "ksrunner:transform:kafka_write:v1"
)

// Kafka's serializer and deserializer classes that ksrunner implements
// natively, by their Java class names as the SDKs send them.
const (
	KafkaByteArray = "ByteArray"
	KafkaString    = "String"
	KafkaLong      = "Long"
	KafkaInteger   = "Integer"
)

// Timestamp policies of a Kafka read (KafkaIO's names).
const (
	TimestampProcessingTime = "ProcessingTime"
	TimestampCreateTime     = "CreateTime"
	TimestampLogAppendTime  = "LogAppendTime"
)

// KafkaRead is what a Kafka read reads and how.
type KafkaRead struct {
	// Topics are the user's topics, read whole (every partition).
	Topics []string `json:"topics"`
	// BootstrapServers is the consumer config's bootstrap.servers, a
	// comma-separated broker list; empty means the job's own brokers.
	BootstrapServers string `json:"bootstrap_servers,omitempty"`
	// ConsumerConfig is the rest of the consumer config, as given (the
	// host honours what franz-go has a setting for and reports the rest).
	ConsumerConfig map[string]string `json:"consumer_config,omitempty"`
	// KeyFormat and ValueFormat are the deserializers, one of the Kafka*
	// constants.
	KeyFormat   string `json:"key_format"`
	ValueFormat string `json:"value_format"`
	// WithMetadata: the output is the with-metadata record row (topic,
	// partition, offset, timestamp, timestamp type, headers, key, value)
	// rather than KV<key, value>.
	WithMetadata bool `json:"with_metadata,omitempty"`
	// StartReadTimeMs, when set, is where a partition without a committed
	// offset starts: the first offset whose timestamp is at or after this
	// time (Kafka's offsets for times); a partition without such a record
	// starts per auto.offset.reset.
	StartReadTimeMs *int64 `json:"start_read_time_ms,omitempty"`
	// MaxNumRecords and MaxReadTimeMs, when set, make the read bounded: it
	// ends (its watermark goes to +inf) after exactly that many records of
	// all its partitions together (waiting for them if the topic has
	// fewer), or that long after the job started reading, whichever comes
	// first.
	MaxNumRecords *int64 `json:"max_num_records,omitempty"`
	MaxReadTimeMs *int64 `json:"max_read_time_ms,omitempty"`
	// TimestampPolicy is one of the Timestamp* constants.
	TimestampPolicy string `json:"timestamp_policy"`
	// PayloadRow: the output is the payload row of a Kafka schema
	// transform read (KafkaPayloadSchema of ValueFormat), the record's
	// value alone, rather than KV<key, value>.
	PayloadRow bool `json:"payload_row,omitempty"`
	// RowFormat, with PayloadRow (and ValueFormat ByteArray), makes the
	// read one of a schema transform's structured formats: its values are
	// JSON objects (KafkaRowJSON, kafkajson.go) or Avro datums
	// (KafkaRowAvro, kafkaavro.go) of RowSchema, the format's schema text,
	// and its output rows are of PayloadSchema().
	RowFormat string `json:"row_format,omitempty"`
	RowSchema string `json:"row_schema,omitempty"`
	// MessageName is a PROTO read's message, a full name in RowSchema (a
	// FileDescriptorSet, base64; kafkaproto.go).
	MessageName string `json:"message_name,omitempty"`
	// SchemaRegistryURL, with RowFormat AVRO, makes the values Confluent's
	// wire format (a 0 byte, the writer's schema id as 4 bytes, a datum of
	// that schema), whose schemas the read fetches from this registry;
	// RowSchema is then the schema its rows follow (the subject's latest
	// when the read was expanded), and a value's fields are taken by name
	// from its writer's (kafkaio/registry.go).
	SchemaRegistryURL string `json:"schema_registry_url,omitempty"`
	// ErrorOutput, with PayloadRow, is the local name of a second output
	// (a schema transform's error_handling output): a value the read
	// cannot make its row of goes there as a KafkaErrorSchema row instead
	// of following the deserialization_error_policy. The main output is
	// then the transform's other output.
	ErrorOutput string `json:"error_output,omitempty"`
}

// KafkaWrite is where a Kafka write writes and how.
type KafkaWrite struct {
	Topic string `json:"topic"`
	// BootstrapServers is the producer config's bootstrap.servers; empty
	// means the job's own brokers.
	BootstrapServers string            `json:"bootstrap_servers,omitempty"`
	ProducerConfig   map[string]string `json:"producer_config,omitempty"`
	KeyFormat        string            `json:"key_format"`
	ValueFormat      string            `json:"value_format"`
	// WithHeaders: the input is the write-with-headers row (topic, key,
	// value, headers, partition, timestamp) rather than KV<key, value>.
	WithHeaders bool `json:"with_headers,omitempty"`
	// PayloadRow: the input is a row of one BYTES field, the record's
	// value (a Kafka schema transform write of format RAW); the key is
	// null.
	PayloadRow bool `json:"payload_row,omitempty"`
	// RowFormat, with PayloadRow, makes the write one of a structured
	// format (KafkaRowJSON, KafkaRowAvro): it takes rows of any schema
	// CheckKafkaRowWriteSchema accepts and writes each as a JSON object or
	// an Avro datum.
	RowFormat string `json:"row_format,omitempty"`
	// RowSchema and MessageName are a PROTO write's FileDescriptorSet
	// (base64) and message (kafkaproto.go).
	RowSchema   string `json:"row_schema,omitempty"`
	MessageName string `json:"message_name,omitempty"`
	// ErrorOutput, with RowFormat, is the local name of the write's one
	// output (a schema transform's error_handling output): an input row
	// the format cannot hold goes there as a KafkaWriteErrorSchema row
	// instead of following the deserialization_error_policy.
	ErrorOutput string `json:"error_output,omitempty"`
}

// The structured formats of payload rows (KafkaRead.RowFormat,
// KafkaWrite.RowFormat).
const (
	KafkaRowJSON  = "JSON"
	KafkaRowAvro  = "AVRO"
	KafkaRowProto = "PROTO"
)

var kafkaFormats = []string{KafkaByteArray, KafkaString, KafkaLong, KafkaInteger}

// KafkaFormat maps a Kafka serializer or deserializer class name
// (org.apache.kafka.common.serialization.StringDeserializer, or the short
// StringSerializer) to its format, or fails naming the class.
func KafkaFormat(class string) (string, error) {
	name := class[strings.LastIndex(class, ".")+1:]
	for _, f := range kafkaFormats {
		if name == f+"Serializer" || name == f+"Deserializer" {
			return f, nil
		}
	}
	return "", fmt.Errorf("%q is not a Kafka serializer or deserializer ksrunner implements (want one of %s, as org.apache.kafka.common.serialization classes)", class, strings.Join(kafkaFormats, ", "))
}

// Validate checks the spec is one the host can run.
func (r *KafkaRead) Validate() error {
	if len(r.Topics) == 0 {
		return fmt.Errorf("kafka read: no topics")
	}
	for _, f := range []struct{ name, v string }{{"key_format", r.KeyFormat}, {"value_format", r.ValueFormat}} {
		if !slices.Contains(kafkaFormats, f.v) {
			return fmt.Errorf("kafka read: %s %q: want one of %s", f.name, f.v, strings.Join(kafkaFormats, ", "))
		}
	}
	switch r.TimestampPolicy {
	case TimestampProcessingTime, TimestampCreateTime, TimestampLogAppendTime:
	default:
		return fmt.Errorf("kafka read: timestamp policy %q: want %s, %s or %s", r.TimestampPolicy, TimestampProcessingTime, TimestampCreateTime, TimestampLogAppendTime)
	}
	if r.StartReadTimeMs != nil && *r.StartReadTimeMs < 0 {
		return fmt.Errorf("kafka read: start_read_time %dms is negative (want milliseconds since the epoch)", *r.StartReadTimeMs)
	}
	if r.MaxNumRecords != nil && *r.MaxNumRecords < 0 {
		return fmt.Errorf("kafka read: max_num_records %d is negative", *r.MaxNumRecords)
	}
	if r.MaxReadTimeMs != nil && *r.MaxReadTimeMs < 0 {
		return fmt.Errorf("kafka read: max_read_time %dms is negative", *r.MaxReadTimeMs)
	}
	return r.validatePayload()
}

// Bounded reports whether the read ends by itself.
func (r *KafkaRead) Bounded() bool { return r.MaxNumRecords != nil || r.MaxReadTimeMs != nil }

// Validate checks the spec is one the host can run.
func (w *KafkaWrite) Validate() error {
	if w.Topic == "" && !w.WithHeaders {
		return fmt.Errorf("kafka write: no topic")
	}
	for _, f := range []struct{ name, v string }{{"key_format", w.KeyFormat}, {"value_format", w.ValueFormat}} {
		if !slices.Contains(kafkaFormats, f.v) {
			return fmt.Errorf("kafka write: %s %q: want one of %s", f.name, f.v, strings.Join(kafkaFormats, ", "))
		}
	}
	return w.validatePayload()
}

// EncodeKafkaRead is the payload of a URNKafkaRead transform.
func EncodeKafkaRead(r *KafkaRead) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// DecodeKafkaRead reads what EncodeKafkaRead wrote and validates it.
func DecodeKafkaRead(b []byte) (*KafkaRead, error) {
	var r KafkaRead
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("kafka read payload: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// EncodeKafkaWrite is the payload of a URNKafkaWrite transform.
func EncodeKafkaWrite(w *KafkaWrite) ([]byte, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// DecodeKafkaWrite reads what EncodeKafkaWrite wrote and validates it.
func DecodeKafkaWrite(b []byte) (*KafkaWrite, error) {
	var w KafkaWrite
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("kafka write payload: %w", err)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return &w, nil
}
