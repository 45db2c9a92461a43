package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

func init() { register.Function2x2(passKV) }

func passKV(k string, v int64) (string, int64) { return k, v }

// TestKafkaReadPartitionsAdded: partitions added to a topic while a job
// reads it are read, from their beginning, by an application of two
// instances, under either group protocol. The read starts at latest
// (Kafka's default) with metadata.max.age.ms 1000:
//   - records written before the job started are not read;
//   - each partition's start offset is committed by its first cycle,
//     before any record reaches it (the test waits for those commits
//     before writing more);
//   - records written to the first four partitions after that are read;
//   - two partitions are added, and records written to them at once,
//     before any instance can know of them: they are read too, where
//     latest would have skipped them.
//
// Then the job is cancelled, two more partitions are added and written to,
// and the job is resubmitted under its application id: it reads them from
// their beginning too (their index is above every partition the
// application read), and goes on in the others where it stopped.
//
// The output topic, read read_committed, must hold exactly the records
// written after the start, once each, after each part; the group's
// committed offsets must be the partitions' ends.
func TestKafkaReadPartitionsAdded(t *testing.T) {
	for _, protocol := range []string{"classic", "consumer"} {
		t.Run(protocol, func(t *testing.T) {
			ctx := testContext(t, 4*time.Minute)
			bootstrap := kafkatest.Broker(t)
			in, out := kafkatest.UniqueName(t, "pin"), kafkatest.UniqueName(t, "pout")
			kafkatest.CreateTopic(t, bootstrap, in, 4)
			kafkatest.CreateTopic(t, bootstrap, out, kafkatest.CountOutPartitions)
			appID := kafkatest.UniqueName(t, "parts")

			cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			adm := kadm.NewClient(cl)
			want := map[string]int64{}
			produce := func(what string, partitions []int32, per int, read bool) {
				t.Helper()
				for _, p := range partitions {
					for i := range per {
						key := fmt.Sprintf("%s-%d-%d", what, p, i)
						v := int64(p)*1000 + int64(i)
						if read {
							want[key] = v
						}
						produceTo(ctx, t, cl, in, p, key, v)
					}
				}
			}
			produce("before", []int32{0, 1, 2, 3}, 5, false)

			insts := []*appInstance{startAppInstance(t, "first"), startAppInstance(t, "second")}
			opts := map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2", "group_protocol": protocol}
			for _, a := range insts {
				a.pipe = passThroughPipeline(t, a.pool, in, out, nil, "latest")
				a.submit(ctx, t, opts)
			}

			// Every partition's start (its end: latest) committed.
			awaitCommits(ctx, t, adm, appID, in, map[int32]int64{0: 5, 1: 5, 2: 5, 3: 5})

			produce("during", []int32{0, 1, 2, 3}, 5, true)
			if resp, err := adm.CreatePartitions(ctx, 2, in); err != nil || resp.Error() != nil {
				t.Fatalf("adding 2 partitions to %s: %v %v", in, err, resp.Error())
			}
			produce("added", []int32{4, 5}, 10, true)

			// Within 90 s: a partition's metadata is at most a second old.
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			got := kafkatest.ReadCounts(rctx, t, bootstrap, out, len(want))
			cancel()
			awaitCommits(ctx, t, adm, appID, in, map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10, 4: 10, 5: 10})
			for _, a := range insts {
				a.cancel(ctx, t)
			}
			if all := kafkatest.ReadCounts(ctx, t, bootstrap, out, -1); !maps.Equal(all, got) {
				t.Errorf("the output grew after the records arrived: %d records, then %d", len(got), len(all))
			}
			kafkatest.CheckCounts(t, "output", got, want)

			// While no job runs, two more partitions, written to, and
			// an old one; the job resubmitted under the application id
			// reads all of that, the new partitions from their
			// beginning (the application had read six).
			if resp, err := adm.CreatePartitions(ctx, 2, in); err != nil || resp.Error() != nil {
				t.Fatalf("adding 2 partitions to %s: %v %v", in, err, resp.Error())
			}
			produce("down", []int32{0, 6, 7}, 5, true)
			for _, a := range insts {
				a.submit(ctx, t, opts)
			}
			rctx, cancel = context.WithTimeout(ctx, 90*time.Second)
			got = kafkatest.ReadCounts(rctx, t, bootstrap, out, len(want))
			cancel()
			awaitCommits(ctx, t, adm, appID, in, map[int32]int64{0: 15, 1: 10, 2: 10, 3: 10, 4: 10, 5: 10, 6: 5, 7: 5})
			for _, a := range insts {
				a.cancel(ctx, t)
			}
			if all := kafkatest.ReadCounts(ctx, t, bootstrap, out, -1); !maps.Equal(all, got) {
				t.Errorf("after the resubmission, the output grew after the records arrived: %d records, then %d", len(got), len(all))
			}
			kafkatest.CheckCounts(t, "output after the resubmission", got, want)
		})
	}
}

// passThroughPipeline reads KV<string, int64> (String, Long) from in and
// writes each record to out as it is; maxNumRecords, if not nil, bounds
// the read, which starts per reset (auto.offset.reset).
func passThroughPipeline(t *testing.T, env func(context.Context) string, in, out string, maxNumRecords *int64, reset string) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	recs := beam.ParDo(s, kafkaReadPlaceholder, beam.Impulse(s))
	beam.ParDo0(s, kafkaWritePlaceholder, beam.ParDo(s, passKV, recs))
	pipe := jobtest.MarshalLoopback(t, p, env, workerBin)
	withKafkaPrimitives(t, pipe, &translate.KafkaRead{
		Topics: []string{in}, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong,
		TimestampPolicy: translate.TimestampProcessingTime, ConsumerConfig: map[string]string{"metadata.max.age.ms": "1000", "auto.offset.reset": reset},
		MaxNumRecords: maxNumRecords,
	}, &translate.KafkaWrite{Topic: out, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong})
	return pipe
}

// produceTo writes key and v (String, Long) to partition p of topic. The
// producer's metadata may not show a partition added a moment ago: it
// fails the record, naming it, and the record is sent again, with fresh
// metadata, for a while.
func produceTo(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, p int32, key string, v int64) {
	t.Helper()
	for tries := 0; ; tries++ {
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: be8(v)}).FirstErr()
		if err == nil {
			return
		}
		if tries == 100 {
			t.Fatalf("producing %s to %s/%d: %v", key, topic, p, err)
		}
		cl.ForceMetadataRefresh()
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitCommits waits, for at most 2 minutes, until group's committed
// offsets of topic are want.
func awaitCommits(ctx context.Context, t *testing.T, adm *kadm.Client, group, topic string, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	got := map[int32]int64{}
	for {
		resp, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			clear(got)
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Topic == topic && o.Err == nil {
					got[o.Partition] = o.At
				}
			})
			if maps.Equal(got, want) {
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("group %s: committed offsets of %s %v (%v), want %v", group, topic, got, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKafkaBoundedReadPartitionsAdded: partitions added to the topic of a
// max_num_records read while it waits for records read none of them (the
// quota was split at Run over the partitions there were), their tasks end
// at once, and the job still ends only when the read has all its records:
// its tasks' ends are tracked by task, not counted (an added task's end
// counted in place of a reading one ended the job early). The output is
// exactly the first 20 records of the first two partitions.
func TestKafkaBoundedReadPartitionsAdded(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "bin"), kafkatest.UniqueName(t, "bout")
	kafkatest.CreateTopic(t, bootstrap, in, 2)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	want := map[string]int64{}
	produce := func(from int, partitions []int32, read bool) {
		t.Helper()
		for _, p := range partitions {
			for i := from; i < from+5; i++ {
				key := fmt.Sprintf("%d-%d", p, i)
				if read {
					want[key] = int64(i)
				}
				produceTo(ctx, t, cl, in, p, key, int64(i))
			}
		}
	}
	produce(0, []int32{0, 1}, true)

	a := startAppInstance(t, "bounded")
	n := int64(20)
	a.pipe = passThroughPipeline(t, a.pool, in, out, &n, "earliest")
	source := sourceSubTopology(t, a.pipe)
	appID := kafkatest.UniqueName(t, "bparts")
	a.submit(ctx, t, map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2"})
	kafkatest.ReadCounts(ctx, t, bootstrap, out, 10)

	if resp, err := adm.CreatePartitions(ctx, 2, in); err != nil || resp.Error() != nil {
		t.Fatalf("adding 2 partitions to %s: %v %v", in, err, resp.Error())
	}
	produce(0, []int32{2, 3}, false)
	// The added partitions' tasks end (report +inf) while the job waits.
	ended := map[string]bool{}
	kafkatest.ReadTopic(ctx, t, bootstrap, shuffle.TopicName(appID, shuffle.StatusTopic), func() bool { return len(ended) == 2 }, func(r *kgo.Record) {
		if k := string(r.Key); (k == fmt.Sprintf("%d/2", source) || k == fmt.Sprintf("%d/3", source)) && int64(binary.BigEndian.Uint64(r.Value)) == int64(mtime.MaxTimestamp) {
			ended[k] = true
		}
	})
	// The job server follows the same status topic: a job that took
	// those ends for the read's would end within a poll of them. It must
	// not: 10 of its 20 records are still to come.
	select {
	case <-a.ended:
		t.Fatalf("the job ended %v (errors %q, %v) with 10 of its 20 records", a.endedAs.state, a.endedAs.errs, a.endedAs.err)
	case <-time.After(5 * time.Second):
	}
	produce(5, []int32{0, 1}, true)
	select {
	case <-a.ended:
	case <-ctx.Done():
		t.Fatal("the job did not end")
	}
	if r := a.endedAs; r.err != nil || r.state != jobpb.JobState_DONE {
		t.Fatalf("job ended %v (errors %q, %v), want DONE", r.state, r.errs, r.err)
	}
	kafkatest.CheckCounts(t, "output", kafkatest.ReadCounts(ctx, t, bootstrap, out, -1), want)
}

// TestKafkaReadTopicDeleted: deleting the topic a running job reads fails
// the job, naming the topic and saying it was deleted, rather than leaving
// it waiting for records that cannot come.
func TestKafkaReadTopicDeleted(t *testing.T) {
	bootstrap := kafkatest.Broker(t)
	ctx := testContext(t, 3*time.Minute)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	kafkatest.CreateTopic(t, bootstrap, in, 2)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	cl := kafkatest.Client(t, bootstrap)
	produceTo(ctx, t, cl, in, 0, "a", 1)
	id, err := submit(ctx, t, ksrunner, passThroughPipeline(t, loopback.EnvironmentConfig, in, out, nil, "earliest"), map[string]string{"application_id": kafkatest.UniqueName(t, "e2e"), "bootstrap_servers": bootstrap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ksrunner.Cancel(context.Background(), &jobpb.CancelJobRequest{JobId: id}) })
	kafkatest.ReadCounts(ctx, t, bootstrap, out, 1) // the job reads
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, in); err != nil {
		t.Fatal(err)
	}
	r, err := wait(ctx, ksrunner, id)
	want := "fetching " + in + "/"
	if msg := strings.Join(r.Errors, "\n"); err != nil || r.State != jobpb.JobState_FAILED || !strings.Contains(msg, want) || !strings.Contains(msg, "the topic was deleted") {
		t.Errorf("job ended %v (errors %q, %v), want FAILED with %q ... the topic was deleted", r.State, r.Errors, err, want)
	}
}
