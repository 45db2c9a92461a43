package expansion

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/xlangx"

	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/translate"
)

// The KafkaIO URNs, as the Go SDK (io/xlang/kafkaio) and the Python SDK
// (apache_beam/io/kafka.py) send them.
const (
	URNReadWithoutMetadata = "beam:transform:org.apache.beam:kafka_read_without_metadata:v1"
	URNReadWithMetadata    = "beam:transform:org.apache.beam:kafka_read_with_metadata:v1"
	URNWrite               = "beam:transform:org.apache.beam:kafka_write:v1"
	URNWriteWithHeaders    = "beam:transform:org.apache.beam:kafka_write_with_headers:v1"
)

// URNSchemaTransformPayload is the spec URN of a schema transform's
// expansion (a SchemaTransformPayload naming it), which managed.Read/Write
// and Beam YAML send.
const URNSchemaTransformPayload = "beam:expansion:payload:schematransform:v1"

// URNs are the transforms Expand expands.
var URNs = []string{URNReadWithoutMetadata, URNReadWithMetadata, URNWrite, URNWriteWithHeaders}

// fields is a decoded configuration row: each field's value by its
// normalized name (lower case, no underscores), nil when null.
type fields map[string]any

// normalize makes a field name match in either case style:
// ConsumerConfig, consumerConfig and consumer_config are one name.
func normalize(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", ""))
}

// decodeRow decodes an ExternalConfigurationPayload (the schema and the row
// the SDKs build) with the Beam Go SDK.
func decodeRow(payload []byte) (fields, map[string]string, error) {
	v, err := xlangx.DecodeStructPayload(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("configuration row: %w", err)
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil, nil, fmt.Errorf("configuration row: decoded to %v, want a row", rv.Type())
	}
	f, names := decodeStruct(rv)
	return f, names, nil
}

// decodeStruct takes the fields of a decoded row, by normalized name, and
// their names as sent.
func decodeStruct(rv reflect.Value) (fields, map[string]string) {
	f := fields{}
	names := map[string]string{} // normalized -> as sent, for messages
	for i := 0; i < rv.NumField(); i++ {
		sf := rv.Type().Field(i)
		name := sf.Name
		if tag, ok := sf.Tag.Lookup("beam"); ok && tag != "" {
			name = strings.Split(tag, ",")[0]
		}
		n := normalize(name)
		names[n] = name
		f[n] = plain(rv.Field(i))
	}
	return f, names
}

// plain turns a decoded field into nil (null), a string, an int64, a bool,
// a []string or a map[string]string where it is one of those.
func plain(v reflect.Value) any {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return int64(v.Uint())
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.String {
			out := make([]string, v.Len())
			for i := range out {
				out[i] = v.Index(i).String()
			}
			return out
		}
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		if v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String {
			out := make(map[string]string, v.Len())
			for it := v.MapRange(); it.Next(); {
				out[it.Key().String()] = it.Value().String()
			}
			return out
		}
	}
	return v.Interface()
}

// reader takes the fields of a row one by one, with errors naming the field
// as the SDK sent it.
type reader struct {
	f     fields
	names map[string]string
	err   error
}

func (r *reader) fail(name string, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s", r.name(name), fmt.Sprintf(format, args...))
	}
}

func (r *reader) name(n string) string {
	if s, ok := r.names[normalize(n)]; ok {
		return s
	}
	return n
}

// take removes and returns the field, nil when absent or null.
func (r *reader) take(name string) any {
	n := normalize(name)
	v := r.f[n]
	delete(r.f, n)
	return v
}

func (r *reader) string(name string) string {
	switch v := r.take(name).(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		r.fail(name, "%v (%T), want a string", v, v)
		return ""
	}
}

func (r *reader) int(name string) *int64 {
	switch v := r.take(name).(type) {
	case nil:
		return nil
	case int64:
		return &v
	default:
		r.fail(name, "%v (%T), want an integer", v, v)
		return nil
	}
}

func (r *reader) bool(name string) bool {
	switch v := r.take(name).(type) {
	case nil:
		return false
	case bool:
		return v
	default:
		r.fail(name, "%v (%T), want a boolean", v, v)
		return false
	}
}

func (r *reader) strings(name string) []string {
	switch v := r.take(name).(type) {
	case nil:
		return nil
	case []string:
		return v
	default:
		r.fail(name, "%v (%T), want a list of strings", v, v)
		return nil
	}
}

// errorHandling returns the output named by an ErrorHandling field ({output:
// NAME}, a mapping in managed's YAML or a row), "" when it is absent.
func (r *reader) errorHandling(name string) string {
	v := r.take(name)
	var out any
	switch v := v.(type) {
	case nil:
		return ""
	case map[string]string:
		out = v["output"]
		if len(v) != 1 {
			out = nil
		}
	default:
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Struct {
			if f, _ := decodeStruct(rv); len(f) == 1 {
				out = f["output"]
			}
		}
	}
	s, ok := out.(string)
	if !ok || s == "" {
		r.fail(name, "%v: want {output: NAME}, the name of the output of records that fail", v)
	}
	return s
}

func (r *reader) stringMap(name string) map[string]string {
	switch v := r.take(name).(type) {
	case nil:
		return nil
	case map[string]string:
		return v
	default:
		r.fail(name, "%v (%T), want a map of strings", v, v)
		return nil
	}
}

func (r *reader) format(name string) string {
	class := r.string(name)
	if class == "" {
		// The SDKs always send one; Java's default is ByteArray.
		return translate.KafkaByteArray
	}
	f, err := translate.KafkaFormat(class)
	if err != nil {
		r.fail(name, "%v", err)
	}
	return f
}

// rest fails on fields no KafkaIO configuration has, naming them.
func (r *reader) rest() {
	var left []string
	for n := range r.f {
		left = append(left, r.name(n))
	}
	if len(left) > 0 {
		slices.Sort(left)
		r.fail(left[0], "not a field of this KafkaIO transform's configuration (unknown fields: %s)", strings.Join(left, ", "))
	}
}

// ConfigRead maps the configuration row of a kafka_read_with(out)_metadata
// transform to its spec, with the warnings to report.
func ConfigRead(payload []byte, withMetadata bool) (*translate.KafkaRead, []string, error) {
	f, names, err := decodeRow(payload)
	if err != nil {
		return nil, nil, err
	}
	r := &reader{f: f, names: names}
	var warn []string
	spec := &translate.KafkaRead{WithMetadata: withMetadata}
	cfg := r.stringMap("consumer_config")
	spec.Topics = r.strings("topics")
	spec.KeyFormat = r.format("key_deserializer")
	spec.ValueFormat = r.format("value_deserializer")
	spec.StartReadTimeMs = r.int("start_read_time")
	spec.MaxNumRecords = r.int("max_num_records")
	if secs := r.int("max_read_time"); secs != nil {
		ms := *secs * 1000
		spec.MaxReadTimeMs = &ms
	}
	if r.bool("commit_offset_in_finalize") {
		warn = append(warn, r.name("commit_offset_in_finalize")+": ignored: ksrunner always commits a read's offsets in the task's transaction, under the application's consumer group")
	}
	spec.TimestampPolicy = r.string("timestamp_policy")
	if spec.TimestampPolicy == "" {
		spec.TimestampPolicy = translate.TimestampProcessingTime // Java's default
	}
	if v := r.int("stop_read_time"); v != nil {
		r.fail("stop_read_time", "%d: ksrunner does not stop a read at a time (use max_read_time or max_num_records)", *v)
	}
	if c := r.string("consumer_factory_fn_class"); c != "" {
		r.fail("consumer_factory_fn_class", "%q: ksrunner runs no Java consumer factories", c)
	}
	r.stringMap("consumer_factory_fn_params")
	// Tuning and hints of Java's reader, with no meaning here: a task per
	// partition reads every partition, and the host's poll loop is its own.
	r.int("consumer_polling_timeout")
	if r.bool("redistribute") {
		warn = append(warn, r.name("redistribute")+": ignored: a Kafka read is one task per partition")
	}
	r.int("redistribute_num_keys")
	r.bool("allow_duplicates")
	// Java's dynamic read looks for added partitions this often; the
	// host's client does when its metadata ages out (metadata.max.age.ms),
	// and starts them at their beginning.
	dynamicPoll := r.int("dynamic_read_poll_interval_seconds")
	if dynamicPoll != nil && (*dynamicPoll < 1 || *dynamicPoll > 3600) {
		r.fail("dynamic_read_poll_interval_seconds", "%d: want 1 to 3600 seconds", *dynamicPoll)
	}
	r.rest()
	if r.err != nil {
		return nil, nil, r.err
	}
	for k, v := range cfg {
		switch k {
		case "bootstrap.servers":
			spec.BootstrapServers = v
		case "group.id":
			warn = append(warn, fmt.Sprintf("%s: group.id %q ignored: ksrunner reads under the application's consumer group (application_id) and commits offsets in its transactions", r.name("consumer_config"), v))
		default:
			if spec.ConsumerConfig == nil {
				spec.ConsumerConfig = map[string]string{}
			}
			spec.ConsumerConfig[k] = v
		}
	}
	if dynamicPoll != nil {
		ms := *dynamicPoll * 1000
		if given, err := strconv.ParseInt(spec.ConsumerConfig["metadata.max.age.ms"], 10, 64); err == nil && given < ms {
			ms = given // the shorter serves both
		}
		if spec.ConsumerConfig == nil {
			spec.ConsumerConfig = map[string]string{}
		}
		spec.ConsumerConfig["metadata.max.age.ms"] = strconv.FormatInt(ms, 10)
	}
	if _, err := kafkaio.ParseSecurity(spec.ConsumerConfig, r.name("consumer_config")); err != nil {
		return nil, nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, nil, err
	}
	return spec, warn, nil
}

// ConfigWrite maps the configuration row of a kafka_write(_with_headers)
// transform to its spec.
func ConfigWrite(payload []byte, withHeaders bool) (*translate.KafkaWrite, error) {
	f, names, err := decodeRow(payload)
	if err != nil {
		return nil, err
	}
	r := &reader{f: f, names: names}
	spec := &translate.KafkaWrite{WithHeaders: withHeaders}
	cfg := r.stringMap("producer_config")
	spec.Topic = r.string("topic")
	spec.KeyFormat = r.format("key_serializer")
	spec.ValueFormat = r.format("value_serializer")
	r.rest()
	if r.err != nil {
		return nil, r.err
	}
	if withHeaders && (spec.KeyFormat != translate.KafkaByteArray || spec.ValueFormat != translate.KafkaByteArray) {
		return nil, fmt.Errorf("kafka write with headers: key and value serializers must be ByteArraySerializer (the rows' key and value are bytes), got %s and %s", spec.KeyFormat, spec.ValueFormat)
	}
	for k, v := range cfg {
		if k == "bootstrap.servers" {
			spec.BootstrapServers = v
			continue
		}
		if spec.ProducerConfig == nil {
			spec.ProducerConfig = map[string]string{}
		}
		spec.ProducerConfig[k] = v
	}
	if _, err := kafkaio.ParseSecurity(spec.ProducerConfig, r.name("producer_config")); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return spec, nil
}
