package expansion

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strings"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/bufbuild/protocompile"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/translate"
)

// The Kafka schema transforms: Java's KafkaReadSchemaTransformProvider and
// KafkaWriteSchemaTransformProvider, which Beam YAML's ReadFromKafka and
// WriteToKafka name directly and managed.Read/Write(managed.KAFKA) name
// through the managed transform (a configuration row of the underlying
// identifier and its configuration as YAML). ksrunner expands their RAW,
// JSON, AVRO, PROTO (and, for reads, STRING) formats into its Kafka
// primitives with payload rows (translate.KafkaPayloadSchema,
// JSONRowSchema, AvroRowSchema, ProtoRowSchema); what it cannot run is an
// expansion error naming the field and its value.
const (
	IdentifierManaged    = "beam:transform:managed:v1"
	IdentifierKafkaRead  = "beam:schematransform:org.apache.beam:kafka_read:v1"
	IdentifierKafkaWrite = "beam:schematransform:org.apache.beam:kafka_write:v1"
)

// The formats of the Kafka schema transforms ksrunner runs.
const (
	formatRaw    = "RAW"
	formatString = "STRING"
	formatJSON   = "JSON"
	formatAvro   = "AVRO"
	formatProto  = "PROTO"
)

func atomicType(t pipepb.AtomicType, nullable bool) *pipepb.FieldType {
	return &pipepb.FieldType{Nullable: nullable, TypeInfo: &pipepb.FieldType_AtomicType{AtomicType: t}}
}

func configSchema(id string, fields ...*pipepb.Field) *pipepb.Schema {
	for i, f := range fields {
		f.Id = int32(i)
	}
	return &pipepb.Schema{Id: id, Fields: fields}
}

func stringField(name string, nullable bool) *pipepb.Field {
	return &pipepb.Field{Name: name, Type: atomicType(pipepb.AtomicType_STRING, nullable)}
}

func stringMapField(name string) *pipepb.Field {
	return &pipepb.Field{Name: name, Type: &pipepb.FieldType{Nullable: true, TypeInfo: &pipepb.FieldType_MapType{MapType: &pipepb.MapType{
		KeyType: atomicType(pipepb.AtomicType_STRING, false), ValueType: atomicType(pipepb.AtomicType_STRING, false),
	}}}}
}

// errorHandlingField is Java's ErrorHandling row: the name of the output
// of records that fail.
func errorHandlingField() *pipepb.Field {
	return &pipepb.Field{Name: "error_handling", Type: &pipepb.FieldType{Nullable: true, TypeInfo: &pipepb.FieldType_RowType{RowType: &pipepb.RowType{
		Schema: configSchema("ksrunner-kafka-error-handling-v1", stringField("output", false)),
	}}}}
}

// SchemaTransforms are the schema transforms DiscoverSchemaTransform lists:
// their configuration schemas (the fields of Java's configuration classes,
// snake_case as Java's providers give them) and input and output names.
func SchemaTransforms() map[string]*jobpb.SchemaTransformConfig {
	return map[string]*jobpb.SchemaTransformConfig{
		IdentifierManaged: {
			ConfigSchema: configSchema("ksrunner-managed-config-v1",
				stringField("transform_identifier", false),
				stringField("config_url", true),
				stringField("config", true)),
			InputPcollectionNames:  []string{"input"},
			OutputPcollectionNames: []string{"output"},
			Description:            "Managed transforms: ksrunner expands " + IdentifierKafkaRead + " and " + IdentifierKafkaWrite + " (formats RAW, JSON, AVRO and PROTO, and STRING for reads).",
		},
		IdentifierKafkaRead: {
			ConfigSchema: configSchema("ksrunner-kafka-read-config-v1",
				stringField("bootstrap_servers", false),
				stringField("topic", false),
				stringField("format", true),
				stringField("schema", true),
				stringField("confluent_schema_registry_url", true),
				stringField("confluent_schema_registry_subject", true),
				stringField("file_descriptor_path", true),
				stringField("message_name", true),
				stringField("auto_offset_reset_config", true),
				stringMapField("consumer_config_updates"),
				errorHandlingField(),
				&pipepb.Field{Name: "max_read_time_seconds", Type: atomicType(pipepb.AtomicType_INT32, true)}),
			OutputPcollectionNames: []string{"output", "errors"},
			Description:            "Reads a Kafka topic as rows of its records' values (format RAW: a BYTES field payload; STRING: a STRING field payload; JSON and AVRO: rows of the JSON or Avro schema given as schema, or, for AVRO, by a schema registry; PROTO: rows of message_name of the descriptor set at file_descriptor_path).",
		},
		IdentifierKafkaWrite: {
			ConfigSchema: configSchema("ksrunner-kafka-write-config-v1",
				stringField("bootstrap_servers", false),
				stringField("topic", false),
				stringField("format", false),
				stringMapField("producer_config_updates"),
				errorHandlingField(),
				stringField("file_descriptor_path", true),
				stringField("message_name", true),
				stringField("schema", true)),
			// Java lists no outputs (its errors output is named by
			// error_handling, which ksrunner refuses).
			InputPcollectionNames: []string{"input"},
			Description:           "Writes rows of one BYTES field (format RAW), or rows as JSON objects (format JSON), Avro datums (format AVRO) or protobuf messages (format PROTO), as the values of Kafka records with null keys.",
		},
	}
}

// expandSchemaTransform expands a SchemaTransformPayload: a managed
// transform of a Kafka identifier, or a Kafka identifier directly.
func expandSchemaTransform(req *jobpb.ExpansionRequest, payload []byte) (*pipepb.PTransform, *pipepb.Components, []string, error) {
	p := &pipepb.SchemaTransformPayload{}
	if err := proto.Unmarshal(payload, p); err != nil {
		return nil, nil, nil, err
	}
	id := p.GetIdentifier()
	r, err := schemaTransformConfig(p)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("schema transform %s: %w", id, err)
	}
	if id == IdentifierManaged {
		under := r.string("transform_identifier")
		if url := r.string("config_url"); url != "" {
			r.fail("config_url", "%q: ksrunner reads no configuration files: pass the configuration itself (config)", url)
		}
		yamlConfig := r.string("config")
		r.rest()
		if r.err != nil {
			return nil, nil, nil, fmt.Errorf("schema transform %s: %w", id, r.err)
		}
		if under != IdentifierKafkaRead && under != IdentifierKafkaWrite {
			return nil, nil, nil, fmt.Errorf("schema transform %s: transform_identifier %q: ksrunner's expansion service expands managed %s and %s only", id, under, IdentifierKafkaRead, IdentifierKafkaWrite)
		}
		if r, err = yamlConfigReader(yamlConfig); err != nil {
			return nil, nil, nil, fmt.Errorf("schema transform %s (%s): config: %w", id, under, err)
		}
		id = under
	}
	switch id {
	case IdentifierKafkaRead:
		spec, warn, err := schemaRead(r)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("schema transform %s: %w", id, err)
		}
		out, comps, err := expandRead(req, spec)
		return out, comps, warn, err
	case IdentifierKafkaWrite:
		spec, err := schemaWrite(r)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("schema transform %s: %w", id, err)
		}
		out, comps, err := expandWrite(req, spec)
		return out, comps, nil, err
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		for k := range SchemaTransforms() {
			if !yield(k) {
				return
			}
		}
	})
	return nil, nil, nil, fmt.Errorf("schema transform %q is not one ksrunner's expansion service expands (%s)", id, strings.Join(ids, ", "))
}

// schemaTransformConfig decodes a schema transform's configuration row
// with the Beam Go SDK, as the classic transforms' rows (decodeRow).
func schemaTransformConfig(p *pipepb.SchemaTransformPayload) (*reader, error) {
	b, err := proto.Marshal(&pipepb.ExternalConfigurationPayload{Schema: p.GetConfigurationSchema(), Payload: p.GetConfigurationRow()})
	if err != nil {
		return nil, err
	}
	f, names, err := decodeRow(b)
	if err != nil {
		return nil, err
	}
	return &reader{f: f, names: names}, nil
}

// yamlConfigReader decodes a managed transform's YAML configuration (a
// mapping of the underlying transform's fields) into fields as a
// configuration row's: scalars of maps as strings (a consumer config's
// max.poll.records: 500 is "500"), YAML's null as null.
func yamlConfigReader(config string) (*reader, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(config), &m); err != nil {
		return nil, err
	}
	r := &reader{f: fields{}, names: map[string]string{}}
	for k, v := range m {
		n := normalize(k)
		r.names[n] = k
		switch v := v.(type) {
		case int:
			r.f[n] = int64(v)
		case map[string]any:
			out := make(map[string]string, len(v))
			for mk, mv := range v {
				out[mk] = fmt.Sprint(mv)
			}
			r.f[n] = out
		default:
			r.f[n] = v
		}
	}
	return r, nil
}

// unsupported fails on the fields of formats ksrunner does not run (a
// schema registry, a protobuf descriptor, a schema) and error handling,
// naming the field and its value.
func (r *reader) unsupported(names ...string) {
	for _, n := range names {
		switch v := r.take(n).(type) {
		case nil:
		case string:
			if v != "" {
				r.fail(n, "%q: not supported by ksrunner yet (it reads RAW and STRING values without a schema, JSON ones of a schema given as schema, and AVRO ones of a schema given as schema or by a registry; no protobuf)", v)
			}
		default:
			r.fail(n, "%v: ksrunner does not run a Kafka schema transform's error handling yet: a record it cannot handle fails the job", v)
		}
	}
}

// schemaRead maps a kafka_read schema transform's configuration to a
// payload row read, as Java's KafkaReadSchemaTransformProvider reads:
// auto.offset.reset is auto_offset_reset_config, else latest (Java's
// default), and the consumer config updates override it.
func schemaRead(r *reader) (*translate.KafkaRead, []string, error) {
	var warn []string
	spec := &translate.KafkaRead{PayloadRow: true, KeyFormat: translate.KafkaByteArray, TimestampPolicy: translate.TimestampProcessingTime}
	spec.BootstrapServers = r.string("bootstrap_servers")
	if t := r.string("topic"); t != "" {
		spec.Topics = []string{t}
	} else {
		r.fail("topic", "missing: a Kafka read needs its topic")
	}
	switch f := r.string("format"); f {
	case formatRaw:
		spec.ValueFormat = translate.KafkaByteArray
	case formatString:
		spec.ValueFormat = translate.KafkaString
	case formatJSON, formatAvro, "":
		// Java reads AVRO when no format is given.
		spec.ValueFormat = translate.KafkaByteArray
		spec.RowFormat, spec.RowSchema = cmp.Or(f, formatAvro), r.string("schema")
		if url := r.string("confluent_schema_registry_url"); url != "" {
			registryRead(r, spec, url)
			break
		}
		if spec.RowSchema == "" {
			what := map[string]string{formatJSON: "JSON schema", formatAvro: "Avro schema"}[spec.RowFormat]
			r.fail("schema", "missing: a read of format %s needs the %s of its records' values (or, for AVRO, confluent_schema_registry_url and _subject)", spec.RowFormat, what)
		} else if _, err := spec.PayloadSchema(); err != nil {
			r.fail("schema", "%v", err)
		}
	case formatProto:
		spec.ValueFormat = translate.KafkaByteArray
		spec.RowFormat = formatProto
		spec.RowSchema, spec.MessageName = protoConfig(r)
		if r.err == nil {
			if _, err := spec.PayloadSchema(); err != nil {
				r.fail("message_name", "%q: %v", spec.MessageName, err)
			}
		}
	default:
		r.fail("format", "%q: ksrunner reads the formats %s, %s, %s, %s and %s only", f, formatRaw, formatString, formatJSON, formatAvro, formatProto)
	}
	if out := r.errorHandling("error_handling"); out == "output" {
		r.fail("error_handling", "output %q: the name of the read's rows; name the errors' output otherwise", out)
	} else {
		spec.ErrorOutput = out
	}
	r.unsupported("schema", "confluent_schema_registry_url", "confluent_schema_registry_subject", "file_descriptor_path", "message_name")
	reset := r.string("auto_offset_reset_config")
	cfg := r.stringMap("consumer_config_updates")
	if secs := r.int("max_read_time_seconds"); secs != nil {
		ms := *secs * 1000
		spec.MaxReadTimeMs = &ms
	}
	r.rest()
	if r.err != nil {
		return nil, nil, r.err
	}
	spec.ConsumerConfig = map[string]string{"auto.offset.reset": "latest"}
	if reset != "" {
		spec.ConsumerConfig["auto.offset.reset"] = reset
	}
	for k, v := range cfg {
		switch k {
		case "bootstrap.servers":
			spec.BootstrapServers = v
		case "group.id":
			warn = append(warn, fmt.Sprintf("%s: group.id %q ignored: ksrunner reads under the application's consumer group (application_id) and commits offsets in its transactions", r.name("consumer_config_updates"), v))
		default:
			spec.ConsumerConfig[k] = v
		}
	}
	if _, err := kafkaio.ParseSecurity(spec.ConsumerConfig, r.name("consumer_config_updates")); err != nil {
		return nil, nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, nil, err
	}
	return spec, warn, nil
}

// registryRead makes spec a read of Confluent's wire format through the
// registry at url, its rows those of the subject's latest schema, as
// Java's provider fixes them when it expands.
func registryRead(r *reader, spec *translate.KafkaRead, url string) {
	subject := r.string("confluent_schema_registry_subject")
	switch {
	case spec.RowFormat != formatAvro:
		r.fail("confluent_schema_registry_url", "%q: a schema registry serves format %s, not %s", kafkaio.RedactURL(url), formatAvro, spec.RowFormat)
		return
	case spec.RowSchema != "":
		r.fail("schema", "given with confluent_schema_registry_url %q: a read takes its schema from one or the other", kafkaio.RedactURL(url))
		return
	case subject == "":
		r.fail("confluent_schema_registry_subject", "missing: a read through schema registry %q needs its subject", kafkaio.RedactURL(url))
		return
	}
	client, err := kafkaio.NewRegistryClient(url)
	if err != nil {
		r.fail("confluent_schema_registry_url", "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaio.RegistryTimeout)
	defer cancel()
	s, err := client.GetLatestSchema(ctx, subject)
	if err != nil {
		r.fail("confluent_schema_registry_subject", "%q: the latest schema from registry %s: %v", subject, kafkaio.RedactURL(url), err)
		return
	}
	spec.RowSchema, spec.SchemaRegistryURL = s.String(), url
	if _, err := spec.PayloadSchema(); err != nil {
		r.fail("confluent_schema_registry_subject", "%q: its latest schema: %v", subject, err)
	}
}

// protoConfig reads a PROTO read's or write's descriptor, as a
// FileDescriptorSet (base64), and message_name: the set is the file at
// file_descriptor_path (which the expansion service reads, on its own
// machine), or the set compiled from the .proto source given as schema
// (as Java's ProtoByteUtils takes either).
func protoConfig(r *reader) (set, message string) {
	path, source, message := r.string("file_descriptor_path"), r.string("schema"), r.string("message_name")
	switch {
	case path != "" && source != "":
		r.fail("schema", "given with file_descriptor_path %q: format PROTO takes its descriptor from one or the other", path)
		return "", ""
	case path == "" && source == "":
		r.fail("file_descriptor_path", "missing: format PROTO needs the FileDescriptorSet of its messages (protoc --include_imports --descriptor_set_out=FILE), or their .proto source as schema")
		return "", ""
	case message == "":
		r.fail("message_name", "missing: format PROTO needs the name of its messages' type")
		return "", ""
	}
	if source != "" {
		b, err := compileProto(source)
		if err != nil {
			r.fail("schema", "%v", err)
			return "", ""
		}
		return base64.StdEncoding.EncodeToString(b), message
	}
	b, err := os.ReadFile(path)
	if err != nil {
		r.fail("file_descriptor_path", "%q: %v (the expansion service reads it, on its own machine)", path, err)
		return "", ""
	}
	return base64.StdEncoding.EncodeToString(b), message
}

// compileProto compiles one .proto source (which may import Google's
// well-known types, nothing else) into a FileDescriptorSet holding it and
// what it imports, as protoc --include_imports writes it.
func compileProto(source string) ([]byte, error) {
	const name = "schema.proto"
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{name: source}),
	})}
	files, err := c.Compile(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("protobuf source: %w", err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(files[0])
	return proto.Marshal(set)
}

// schemaWrite maps a kafka_write schema transform's configuration to a
// payload row write: format RAW, or JSON (which writes the input's rows
// whatever their schema, as Java does; its schema field is PROTO's, and
// ignored).
func schemaWrite(r *reader) (*translate.KafkaWrite, error) {
	spec := &translate.KafkaWrite{PayloadRow: true, KeyFormat: translate.KafkaByteArray, ValueFormat: translate.KafkaByteArray}
	spec.BootstrapServers = r.string("bootstrap_servers")
	spec.Topic = r.string("topic")
	if spec.Topic == "" {
		r.fail("topic", "missing: a Kafka write needs its topic")
	}
	switch f := r.string("format"); f {
	case formatRaw:
	case formatJSON, formatAvro:
		spec.RowFormat = f
		r.take("schema")
	case formatProto:
		spec.RowFormat = f
		spec.RowSchema, spec.MessageName = protoConfig(r)
	default:
		r.fail("format", "%q: ksrunner writes the formats %s (rows of one BYTES field), %s, %s and %s only", f, formatRaw, formatJSON, formatAvro, formatProto)
	}
	if out := r.errorHandling("error_handling"); out != "" {
		if spec.RowFormat == "" {
			// Java's RAW write has no failures to report either.
			r.fail("error_handling", "{output: %s}: a write of format RAW has no errors to output", out)
		}
		spec.ErrorOutput = out
	}
	r.unsupported("schema", "file_descriptor_path", "message_name")
	cfg := r.stringMap("producer_config_updates")
	r.rest()
	if r.err != nil {
		return nil, r.err
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
	if _, err := kafkaio.ParseSecurity(spec.ProducerConfig, r.name("producer_config_updates")); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return spec, nil
}
