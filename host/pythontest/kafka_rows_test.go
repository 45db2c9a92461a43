package pythontest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host"
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
	py := beamPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	endpoint := startJobServer(t, host.DefaultOptions())
	expansion := startExpansionServer(t)
	in, out := kafkatest.UniqueName(t, "pyrin"), kafkatest.UniqueName(t, "pyrout")
	recs := kafkatest.FillRowsTopic(ctx, t, bootstrap, in, out)

	jobIDFile := filepath.Join(t.TempDir(), "jobid")
	jobID, jobs, exited := startPythonJob(ctx, t, endpoint, jobIDFile, py, filepath.Join("testdata", "kafka_rows.py"), jobIDFile, in, out, bootstrap, expansion,
		"--runner=PortableRunner", "--job_endpoint="+endpoint, "--environment_type=LOOPBACK", "--streaming",
		"--application_id="+kafkatest.UniqueName(t, "pyrows"), "--bootstrap_servers="+bootstrap)
	defer jobs.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: jobID})

	got := map[string]*kgo.Record{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("kafka_rows.py ended (%v) with %d of %d records in %s", err, len(got), len(recs), out)
		default:
		}
		return len(got) >= len(recs)
	}, func(r *kgo.Record) {
		if _, dup := got[string(r.Value)]; dup {
			t.Errorf("value %q written twice", r.Value)
		}
		got[string(r.Value)] = r
	})
	if _, err := jobs.Cancel(ctx, &jobpb.CancelJobRequest{JobId: jobID}); err != nil {
		t.Fatalf("cancel %s: %v", jobID, err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("kafka_rows.py: %v (want the job CANCELLED)", err)
		}
	case <-ctx.Done():
		t.Errorf("kafka_rows.py did not end after Cancel")
	}
	// Nothing more once cancelled: the whole topic is what was awaited.
	all := map[string]*kgo.Record{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, nil, func(r *kgo.Record) {
		if _, dup := all[string(r.Value)]; dup {
			t.Errorf("value %q written twice", r.Value)
		}
		all[string(r.Value)] = r
	})
	kafkatest.CheckRowsOutput(t, in, recs, all)
}
