// Package kafkastreams is ksrunner's runner for the Beam Go SDK. Importing
// it,
//
//	import _ "github.com/ksrunner/ksrunner/host/kafkastreams"
//
// registers the runner under the names "kafkastreams" and
// "KafkaStreamsRunner" (the Python SDK's name for it), so that
//
//	go run ./mypipeline --runner=kafkastreams
//
// runs a pipeline that calls beamx.Run (or beam.Run(ctx, "kafkastreams", p))
// on ksrunner. It also registers ksrunner's in-process KafkaIO expansion
// (package host/kafkaio): the SDK's kafkaio.Read and kafkaio.Write with an
// empty expansion address expand into ksrunner's own Kafka read and write.
//
// Without --endpoint the runner starts a ksrunner job server in the
// program's process, on the embedded in-memory broker unless
// --bootstrap_servers names a Kafka cluster, submits the pipeline to it
// with the LOOPBACK environment (the SDK workers run in the program), waits
// for the job to end and stops the server, as the SDK's Prism runner does.
// The job server's defaults are ksrunner's, overridden by KSRUNNER_*
// environment variables of the job options (KSRUNNER_INTERNAL_PARALLELISM=8);
// its log goes to stderr at KSRUNNER_LOG_LEVEL (default warn; KSRUNNER_DEBUG
// set: debug). It serves the status page while the job runs, on
// localhost:8074 as `ksrunner jobserver` does, or on a free port when 8074
// is in use; KSRUNNER_STATUS_PORT sets the port (in use: an error), 0 turns
// it off. The terminal's first line says where the job server, its broker
// and its status page are.
//
// With --endpoint=HOST:PORT it submits to that job server (`ksrunner
// jobserver`), with the LOOPBACK environment unless --environment_type
// says otherwise (the SDK's own default, DOCKER, is not one ksrunner runs).
//
// Either way the program's terminal shows the job's state changes and
// messages (the job server's notices, the SDK's log lines of bundles,
// warnings and errors) from the job's message stream, each once, through
// the default slog logger. --async (with --endpoint) returns once the job
// is submitted; a LOOPBACK job then ends with the program's Run.
//
// The package defines a flag for each of ksrunner's job options
// (bootstrap_servers, application_id, internal_parallelism, ...; see
// `ksrunner help jobserver` or the README): a flag given on the command
// line is sent with the job as its pipeline option and overrides the job
// server's default for that job. A program importing the package must not
// define flags of those names itself; it reads them with flag.Lookup.
package kafkastreams
