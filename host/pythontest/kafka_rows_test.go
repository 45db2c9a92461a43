package pythontest

import (
	"testing"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestKafkaRowsPython: a Python pipeline of ReadFromKafka(with_metadata=True)
// → a Map to rows of key, value, headers, topic, partition and timestamp →
// WriteToKafka(with_headers=True), expanded by ksrunner's expansion
// service, runs on ksrunner: Python's rows carry each record's topic,
// partition, offset, timestamp, timestamp type and headers, and the output
// topic (read_committed) holds, once each, records with the rows' key,
// value, headers, partition and timestamp (kafkatest.CheckRowsOutput).
func TestKafkaRowsPython(t *testing.T) {
	ctx, env := newKafkaEnv(t)
	in, out := kafkatest.UniqueName(t, "pyrin"), kafkatest.UniqueName(t, "pyrout")
	recs := kafkatest.FillRowsTopic(ctx, t, env.bootstrap, in, out)
	job := env.startKafkaScript(ctx, t, "kafka_rows.py", in, out, kafkatest.UniqueName(t, "pyrows"), nil)
	readDistinct(ctx, t, env.bootstrap, out, len(recs), job)
	job.end(ctx, t, false, jobpb.JobState_CANCELLED)
	// Nothing more once cancelled: the whole topic is what was awaited.
	kafkatest.CheckRowsOutput(t, in, recs, readDistinct(ctx, t, env.bootstrap, out, -1, job))
}
