// Package expansion is ksrunner's Beam ExpansionService: it expands the
// KafkaIO transforms the Go SDK (io/xlang/kafkaio) and the Python SDK
// (apache_beam.io.kafka) send, which elsewhere a Java expansion service
// answers, into ksrunner's own Kafka primitives (translate.URNKafkaRead,
// translate.URNKafkaWrite).
//
// It owns:
//   - the configuration rows of the four classic KafkaIO URNs, decoded with
//     the Beam Go SDK (xlangx.DecodeStructPayload), field names matched in
//     either case style as Java's expansion service does (ConsumerConfig =
//     consumer_config), and their mapping to translate.KafkaRead and
//     translate.KafkaWrite (Config*, in config.go): every field a user can
//     get wrong is checked here, so the host never sees a spec it cannot
//     run;
//   - the expanded transform and the components around it (service.go):
//     the primitive, its output PCollection with the coder Java's expansion
//     service gives it (so SDK-side DoFns decode the elements as they would
//     under Java), and the global windowing strategy;
//   - the check of a write's input coder against its serializers (a write
//     with headers: a row translate.CheckKafkaWriteSchema accepts);
//   - the gRPC service (Service), served by `ksrunner jobserver` on
//     expansion_port, and Expand, which host/kafkaio calls in-process;
//   - the Kafka schema transforms (schema.go): DiscoverSchemaTransform
//     lists beam:transform:managed:v1 and Java's kafka_read and
//     kafka_write identifiers with their configuration schemas, and Expand
//     takes a SchemaTransformPayload naming either directly (Beam YAML,
//     SchemaAwareExternalTransform) or through managed (Python's
//     managed.Read/Write(KAFKA): the underlying identifier and its
//     configuration as YAML). Formats RAW, JSON, AVRO (the default;
//     with or without a schema registry), PROTO (and STRING for reads)
//     expand to the primitives with payload rows (translate.KafkaPayloadSchema,
//     or the row of the read's schema); a read's error_handling adds the
//     primitive's error output. What cannot run (a write's error
//     handling, a protobuf source, a registry for other formats) is an
//     expansion error naming the field and the value.
//
// What a Java expansion service would honour but ksrunner does not (a
// consumer group.id, commit_offset_in_finalize: the host commits a read's
// offsets in the task's transaction, under the application's group) is
// reported as a warning; what it cannot run at all (a custom consumer
// factory, a deserializer it does not implement) is an expansion error
// naming the field and the value.
package expansion
