package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// boundedInput creates topic in with counts[p] records in partition p,
// keyed "p/i" (i the record's index in its partition; with keyFrom, p
// counts from it) with timestamps
// base+i s, produced in transactions of every partition (so offsets skip
// the commit markers), and an output topic of one partition.
func boundedInput(ctx context.Context, t *testing.T, bootstrap, in, out string, base int64, counts ...int) {
	t.Helper()
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	fillInput(ctx, t, bootstrap, in, 0, base, counts...)
}

// fillInput is boundedInput without the output topic, keys counting
// partitions from keyFrom.
func fillInput(ctx context.Context, t *testing.T, bootstrap, in string, keyFrom int, base int64, counts ...int) {
	t.Helper()
	kafkatest.CreateTopic(t, bootstrap, in, int32(len(counts)))
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(kafkatest.UniqueName(t, "txn")))
	const perTxn = 25
	for from := 0; from < slices.Max(counts); from += perTxn {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for p, n := range counts {
			for i := from; i < min(n, from+perTxn); i++ {
				cl.Produce(ctx, &kgo.Record{Topic: in, Partition: int32(p), Key: fmt.Appendf(nil, "%d/%d", keyFrom+p, i), Value: []byte("v"), Timestamp: time.UnixMilli(base + int64(i)*1000)}, nil)
			}
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	// A read counts what is committed when it starts (the last stable
	// offsets): wait until the markers of the last transaction are
	// written, as the end offsets say.
	adm := kadm.NewClient(cl)
	for {
		stable, err := adm.ListCommittedOffsets(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		ends, err := adm.ListEndOffsets(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		same := true
		ends.Each(func(o kadm.ListedOffset) {
			s, _ := stable.Lookup(o.Topic, o.Partition)
			same = same && s.Offset == o.Offset
		})
		if same {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s: the last stable offsets %v never reached the end offsets %v", in, stable, ends)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readOut returns the keys of topic out (read_committed, to its end) by
// input partition: the indexes read, failing on a key written twice.
func readOut(ctx context.Context, t *testing.T, bootstrap, out string) map[int][]int {
	t.Helper()
	got, seen := map[int][]int{}, map[string]bool{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, nil, func(r *kgo.Record) {
		k := string(r.Key)
		if seen[k] {
			t.Errorf("topic %s: key %q written twice", out, k)
		}
		seen[k] = true
		ps, is, ok := strings.Cut(k, "/")
		p, err1 := strconv.Atoi(ps)
		i, err2 := strconv.Atoi(is)
		if !ok || err1 != nil || err2 != nil {
			t.Errorf("topic %s offset %d: key %q is not an input key", out, r.Offset, k)
			return
		}
		got[p] = append(got[p], i)
	})
	for p := range got {
		slices.Sort(got[p])
	}
	return got
}

// prefixes checks that got holds, per input partition, the indexes
// 0..n-1 for some n, and returns the n by partition and their total.
func prefixes(t *testing.T, got map[int][]int, parts int) (per []int, total int) {
	t.Helper()
	per = make([]int, parts)
	for p := range parts {
		for j, i := range got[p] {
			if i != j {
				t.Errorf("input partition %d: output indexes %v are not a prefix of the partition", p, got[p])
				break
			}
		}
		per[p] = len(got[p])
		total += per[p]
	}
	for p := range got {
		if p < 0 || p >= parts {
			t.Errorf("output names input partition %d of %d", p, parts)
		}
	}
	return per, total
}

// runCopy runs a job of application appID that copies what read reads
// to topic out through the Go SDK's kafkaio (ByteArray keys and values,
// expanded in-process), and fails unless it ends DONE.
func runCopy(ctx context.Context, t *testing.T, bootstrap, appID, out string, read func(beam.Scope) beam.PCollection, opts ...string) {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, "", bootstrap, out, read(s))
	o := map[string]string{"application_id": appID, "bootstrap_servers": bootstrap, "internal_parallelism": "2"}
	for i := 0; i+1 < len(opts); i += 2 {
		o[opts[i]] = opts[i+1]
	}
	runDone(ctx, t, ksrunner, marshal(t, p), o)
}

var earliest = kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"})

// TestKafkaMaxNumRecords: a read of max_num_records over a 4-partition
// topic holding more ends DONE with exactly that many records in the
// output, a prefix of each partition; a second job of the same
// application goes on where the first stopped (its committed offsets), so
// both outputs together are again exactly a prefix of each partition, no
// record lost or repeated; a third reads the rest. Under exactly_once and
// at_least_once alike (no failure here repeats output).
func TestKafkaMaxNumRecords(t *testing.T) {
	for _, g := range []string{"exactly_once", "at_least_once"} {
		t.Run(g, func(t *testing.T) { testKafkaMaxNumRecords(t, g) })
	}
}

func testKafkaMaxNumRecords(t *testing.T, guarantee string) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	counts := []int{130, 70, 100, 0}
	boundedInput(ctx, t, bootstrap, in, out, time.Now().Add(-time.Hour).UnixMilli(), counts...)
	appID := kafkatest.UniqueName(t, "e2e")
	read := func(n int64) func(beam.Scope) beam.PCollection {
		return func(s beam.Scope) beam.PCollection {
			return kafkaio.Read(s, "", bootstrap, []string{in}, earliest, kafkaio.TimestampPolicy(kafkaio.CreateTime), kafkaio.MaxNumRecords(n))
		}
	}
	runCopy(ctx, t, bootstrap, appID, out, read(150), "processing_guarantee", guarantee)
	per, total := prefixes(t, readOut(ctx, t, bootstrap, out), len(counts))
	if total != 150 {
		t.Fatalf("first job: %d records (per partition %v), want 150", total, per)
	}
	t.Logf("first job: per partition %v", per)
	runCopy(ctx, t, bootstrap, appID, out, read(100), "processing_guarantee", guarantee)
	per2, total := prefixes(t, readOut(ctx, t, bootstrap, out), len(counts))
	if total != 250 {
		t.Fatalf("both jobs: %d records (per partition %v), want 250", total, per2)
	}
	t.Logf("both jobs: per partition %v", per2)
	for p := range per {
		if per2[p] < per[p] {
			t.Errorf("partition %d: %d records after the second job, %d after the first", p, per2[p], per[p])
		}
	}
	runCopy(ctx, t, bootstrap, appID, out, read(50), "processing_guarantee", guarantee)
	if per, total := prefixes(t, readOut(ctx, t, bootstrap, out), len(counts)); !slices.Equal(per, counts) {
		t.Errorf("three jobs: per partition %v (%d), want the whole input %v", per, total, counts)
	}
}

// TestKafkaMaxReadTime: a read of max_read_time ends DONE by its deadline
// although max_num_records asks for more than the topic holds, having
// emitted what it read before (the whole input, read at once), not
// before the deadline. An empty topic ends likewise.
func TestKafkaMaxReadTime(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	for _, counts := range [][]int{{12, 8}, {0, 0}} {
		in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
		boundedInput(ctx, t, bootstrap, in, out, time.Now().Add(-time.Hour).UnixMilli(), counts...)
		const secs = 8
		start := time.Now()
		runCopy(ctx, t, bootstrap, kafkatest.UniqueName(t, "e2e"), out, func(s beam.Scope) beam.PCollection {
			return kafkaio.Read(s, "", bootstrap, []string{in}, earliest, kafkaio.MaxNumRecords(1000), kafkaio.MaxReadSecs(secs))
		})
		if d := time.Since(start); d < secs*time.Second {
			t.Errorf("input %v: the job ended after %v, before max_read_time %ds", counts, d, secs)
		}
		if per, _ := prefixes(t, readOut(ctx, t, bootstrap, out), len(counts)); !slices.Equal(per, counts) {
			t.Errorf("input %v: output per partition %v", counts, per)
		}
	}
}

// TestKafkaStartReadTime: a read with start_read_time starts each
// partition at its first record at or after that time (records produced
// with known timestamps), even under auto.offset.reset=earliest.
func TestKafkaStartReadTime(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	boundedInput(ctx, t, bootstrap, in, out, base, 30, 20, 5)
	// Records i >= 11 are at or after the time: 19 + 9 + 0.
	runCopy(ctx, t, bootstrap, kafkatest.UniqueName(t, "e2e"), out, func(s beam.Scope) beam.PCollection {
		return kafkaio.Read(s, "", bootstrap, []string{in}, earliest, kafkaio.TimestampPolicy(kafkaio.CreateTime),
			kafkaio.StartReadTimestamp(base+10_500), kafkaio.MaxNumRecords(28))
	})
	got := readOut(ctx, t, bootstrap, out)
	want := map[int][]int{}
	for p, n := range []int{30, 20} {
		for i := 11; i < n; i++ {
			want[p] = append(want[p], i)
		}
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("output indexes by partition %v, want %v", got, want)
	}
}

// TestKafkaResetByDuration: auto.offset.reset by_duration:PT1H (Kafka
// 4.0's KIP-1106) starts each partition without a committed offset at its
// first record of the last hour: of records two hours old and ten minutes
// old, a read of max_num_records as many as the recent ones copies exactly
// those (its quotas split at Run over what each partition holds from
// there), and a partition with none recent starts at its end.
func TestKafkaResetByDuration(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	kafkatest.CreateTopic(t, bootstrap, in, 3)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	old, recent := time.Now().Add(-2*time.Hour), time.Now().Add(-10*time.Minute)
	want := map[int][]int{}
	var recs []*kgo.Record
	for p, n := range []struct{ old, recent int }{{5, 7}, {3, 4}, {6, 0}} {
		for i := range n.old + n.recent {
			ts := old.Add(time.Duration(i) * time.Second)
			if i >= n.old {
				ts = recent.Add(time.Duration(i) * time.Second)
				want[p] = append(want[p], i)
			}
			recs = append(recs, &kgo.Record{Topic: in, Partition: int32(p), Key: fmt.Appendf(nil, "%d/%d", p, i), Value: []byte("v"), Timestamp: ts})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runCopy(ctx, t, bootstrap, kafkatest.UniqueName(t, "e2e"), out, func(s beam.Scope) beam.PCollection {
		return kafkaio.Read(s, "", bootstrap, []string{in}, kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "by_duration:PT1H"}),
			kafkaio.TimestampPolicy(kafkaio.CreateTime), kafkaio.MaxNumRecords(11))
	})
	if got := readOut(ctx, t, bootstrap, out); !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("output indexes by partition %v, want %v", got, want)
	}
}

// TestKafkaSeveralTopics: a read of two topics reads every partition of
// both (one source task each, through the read's flatten topic);
// max_num_records counts them together: a first job of fewer records than
// both hold ends DONE with exactly that many, a prefix of each partition,
// and a second of the same application reads exactly the rest.
func TestKafkaSeveralTopics(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	a, b, out := kafkatest.UniqueName(t, "ka"), kafkatest.UniqueName(t, "kb"), kafkatest.UniqueName(t, "kout")
	base := time.Now().Add(-time.Hour).UnixMilli()
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	fillInput(ctx, t, bootstrap, a, 0, base, 40, 20)
	fillInput(ctx, t, bootstrap, b, 2, base, 30, 0, 10)
	counts := []int{40, 20, 30, 0, 10}
	appID := kafkatest.UniqueName(t, "e2e")
	read := func(n int64) func(beam.Scope) beam.PCollection {
		return func(s beam.Scope) beam.PCollection {
			return kafkaio.Read(s, "", bootstrap, []string{a, b}, earliest, kafkaio.MaxNumRecords(n))
		}
	}
	runCopy(ctx, t, bootstrap, appID, out, read(60))
	if per, total := prefixes(t, readOut(ctx, t, bootstrap, out), len(counts)); total != 60 {
		t.Fatalf("first job: %d records (per partition %v), want 60", total, per)
	}
	runCopy(ctx, t, bootstrap, appID, out, read(40))
	if per, _ := prefixes(t, readOut(ctx, t, bootstrap, out), len(counts)); !slices.Equal(per, counts) {
		t.Errorf("both jobs: per partition %v, want the whole input %v", per, counts)
	}
}

// TestKafkaResetNone: a read with auto.offset.reset none reads nothing and
// fails the job at Run while a partition of its topic has no committed
// offset in the application's group, naming the partitions lacking one (all
// three, then the one left); once every partition has one, it reads from
// exactly the committed offsets: the output is each partition's records
// from its commit on, none before.
func TestKafkaResetNone(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.Broker(t)
	in, out := kafkatest.UniqueName(t, "kin"), kafkatest.UniqueName(t, "kout")
	boundedInput(ctx, t, bootstrap, in, out, time.Now().Add(-time.Hour).UnixMilli(), 10, 10, 10)
	app := kafkatest.UniqueName(t, "e2e")
	none := kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "none"})
	pipe := func(n int64) *pipepb.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		kafkaio.Write(s, "", bootstrap, out, kafkaio.Read(s, "", bootstrap, []string{in}, none, kafkaio.MaxNumRecords(n)))
		return marshal(t, p)
	}
	opts := map[string]string{"application_id": app, "bootstrap_servers": bootstrap, "internal_parallelism": "2"}
	fails := func(want ...string) {
		t.Helper()
		errs := runFailed(ctx, t, ksrunner, pipe(1), opts)
		if !slices.ContainsFunc(errs, func(e string) bool {
			return !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(e, w) })
		}) {
			t.Errorf("errors %q: none says all of %q", errs, want)
		}
	}
	fails("topic "+in+" partitions [0 1 2]", "no committed offset", "consumer group "+app, "auto.offset.reset is none")
	commit := func(at map[int32]int64) {
		t.Helper()
		var o kadm.Offsets
		for p, off := range at {
			o.Add(kadm.Offset{Topic: in, Partition: p, At: off, LeaderEpoch: -1})
		}
		resp, err := kadm.NewClient(kafkatest.Client(t, bootstrap)).CommitOffsets(ctx, app, o)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	commit(map[int32]int64{0: 4, 1: 0})
	fails("topic "+in+" partitions [2]", "no committed offset")
	if got := readOut(ctx, t, bootstrap, out); len(got) != 0 {
		t.Fatalf("the failed jobs wrote %v", got)
	}
	commit(map[int32]int64{2: 7})
	runDone(ctx, t, ksrunner, pipe(6+10+3), opts)
	got := readOut(ctx, t, bootstrap, out)
	want := map[int][]int{0: {4, 5, 6, 7, 8, 9}, 1: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 2: {7, 8, 9}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("output indexes by partition %v, want %v", got, want)
	}
}
