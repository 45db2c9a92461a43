package runtime

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
)

// Stats counts a source's records and its lag as of each fetch, the data
// records of internal topics (not watermarks), and the least reported
// watermark; a dropped partition's lag goes.
func TestStats(t *testing.T) {
	var s Stats
	rec := func(off int64, kind byte) *kgo.Record { return &kgo.Record{Offset: off, Value: []byte{kind}} }
	s.fetched(kgo.FetchTopicPartition{Topic: "in", FetchPartition: kgo.FetchPartition{Partition: 0, Records: []*kgo.Record{rec(5, 'x'), rec(6, 'x')}}}, true, 10)
	s.fetched(kgo.FetchTopicPartition{Topic: "in", FetchPartition: kgo.FetchPartition{Partition: 1}}, true, 3)
	s.fetched(kgo.FetchTopicPartition{Topic: "shuffle", FetchPartition: kgo.FetchPartition{Records: []*kgo.Record{
		rec(0, shuffle.KindData), rec(1, shuffle.KindWatermark), rec(2, shuffle.KindData)}}}, false, 3)
	s.reported("0/0", 500, 3)
	s.reported("1/0", 200, 3)
	s.reported("0/0", 900, 3)
	got := s.Snapshot()
	want := StatsSnapshot{Elements: 4, SourceLag: 3, SourcePartitions: 2, Watermark: 200, Reported: 2, Tasks: 3}
	if got != want {
		t.Errorf("snapshot %+v, want %+v", got, want)
	}
	s.dropped("in", 0)
	if got := s.Snapshot(); got.SourceLag != 0 || got.SourcePartitions != 1 {
		t.Errorf("after dropping in/0: %+v", got)
	}
	var none *Stats
	if got := none.Snapshot(); got != (StatsSnapshot{}) {
		t.Errorf("nil stats: %+v", got)
	}
}
