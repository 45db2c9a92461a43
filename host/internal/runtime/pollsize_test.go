package runtime

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// packOf is a DATA_PACKED record value of n one-byte values.
func packOf(n int) []byte {
	var p shuffle.Pack
	for range n {
		p.Add([]byte{0})
	}
	return p.Take()
}

// part is a polled partition for the intake's tests: its records' element
// counts (0: a source record, which counts one whatever its bytes).
type part struct {
	topic     string
	partition int32
	first     int64 // offset of the first record
	counts    []int
}

func fetchesOf(parts ...part) kgo.Fetches {
	var f kgo.Fetch
	for _, p := range parts {
		fp := kgo.FetchPartition{Partition: p.partition, HighWatermark: 1000}
		for k, c := range p.counts {
			v := []byte{shuffle.KindDataPacked} // a source record that looks like a pack
			if c > 0 {
				v = packOf(c)
			}
			fp.Records = append(fp.Records, &kgo.Record{Topic: p.topic, Partition: p.partition, Offset: p.first + int64(k), LeaderEpoch: 3, Value: v})
		}
		f.Topics = append(f.Topics, kgo.FetchTopic{Topic: p.topic, Partitions: []kgo.FetchPartition{fp}})
	}
	return kgo.Fetches{f}
}

func TestPollSize(t *testing.T) {
	s := newPollSize(64 << 10)
	if got := s.records(100_000); got != 24 {
		t.Errorf("first poll with 64 KiB packs: %d records, want 24 (at most 4096 elements a pack)", got)
	}
	s.observe(3, 3)
	if got := s.records(100_000); got != 100_000 {
		t.Errorf("after a poll of unpacked records: %d records, want 100000", got)
	}
	s.observe(20_000, 10)
	if got := s.records(100_000); got != 50 {
		t.Errorf("after a poll of 2000-element packs: %d records, want 50", got)
	}
	s.observe(0, 0)
	if got := s.records(100_000); got != 50 {
		t.Errorf("an empty poll changed the density: %d records, want 50", got)
	}
	if got := s.records(10); got != 1 {
		t.Errorf("a poll takes at least one record: got %d", got)
	}
	off := newPollSize(0)
	if got := off.records(100); got != 100 {
		t.Errorf("packing off: %d records for 100 elements, want 100", got)
	}
}

// TestPostCommitWait: a cycle's first poll waits for the fetch after it
// only when the cycle before produced to a topic the instance consumes,
// which that cycle's commit made readable; changelogs, the status topic and
// the user's output leave nothing to wait for.
func TestPostCommitWait(t *testing.T) {
	i := &instance{subByTopic: map[string]*translate.SubTopology{
		"__beam_app_gbk-repartition": {ID: 1},
		"in":                         {ID: 0}, // a Kafka source
	}}
	for _, tc := range []struct {
		wrote []string
		want  time.Duration
	}{
		{nil, 0},
		{[]string{"__beam_app_subtopology-1-changelog", "__beam_app_status", "out"}, 0},
		{[]string{"__beam_app_subtopology-1-changelog", "__beam_app_gbk-repartition"}, postCommitPollWait},
		{nil, 0},                             // the cycle after: the note does not stay
		{[]string{"in"}, postCommitPollWait}, // a pipeline writing a topic it reads
	} {
		for _, topic := range tc.wrote {
			i.noteWritten(topic)
		}
		if got := postCommitWait(time.Second, i.wroteConsumed.Swap(false)); got != tc.want {
			t.Errorf("after a cycle that wrote %v: wait %v, want %v", tc.wrote, got, tc.want)
		}
	}
	if got := postCommitWait(5*time.Millisecond, true); got != 5*time.Millisecond {
		t.Errorf("a poll time of 5ms: wait %v, want 5ms", got)
	}
}
