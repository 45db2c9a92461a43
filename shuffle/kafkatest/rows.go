package kafkatest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// RowsRecord is a record FillRowsTopic produced.
type RowsRecord struct {
	Partition int32
	Offset    int64
	Timestamp int64 // milliseconds
	Key       []byte
	Value     string
	Headers   []kgo.RecordHeader
}

// RowsOutPartitions is the partition count of FillRowsTopic's output topic.
const RowsOutPartitions = 3

// FillRowsTopic creates topic in with 2 partitions and out with
// RowsOutPartitions, and produces to in 4 records per partition with known
// keys (offset 1's null), values (unique), CreateTime timestamps from an
// hour ago, and headers (a repeated key, a null value; offset 3's none).
func FillRowsTopic(ctx context.Context, t testing.TB, bootstrap, in, out string) []RowsRecord {
	t.Helper()
	CreateTopic(t, bootstrap, in, 2)
	CreateTopic(t, bootstrap, out, RowsOutPartitions)
	cl := Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	base := time.Now().Add(-time.Hour).UnixMilli()
	var recs []RowsRecord
	for p := range int32(2) {
		for i := range int64(4) {
			r := RowsRecord{Partition: p, Offset: i, Timestamp: base + int64(p)*100 + i, Key: []byte(fmt.Sprintf("k%d-%d", p, i)), Value: fmt.Sprintf("v%d-%d", p, i),
				Headers: []kgo.RecordHeader{{Key: "h1", Value: []byte(fmt.Sprintf("x%d-%d", p, i))}, {Key: "hnull"}, {Key: "h1", Value: []byte("again")}}}
			if i == 1 {
				r.Key = nil
			}
			if i == 3 {
				r.Headers = nil
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: p, Key: r.Key, Value: []byte(r.Value), Headers: r.Headers, Timestamp: time.UnixMilli(r.Timestamp)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
	}
	return recs
}

// CheckRowsOutput checks that got (the output topic's records by value)
// holds, for each of recs, the record the rows pipelines of e2e and
// pythontest write for it: its key, value and headers, then a "meta"
// header of what the read with metadata said of it
// (topic/partition/offset/timestamp/0/CreateTime/headers count), in
// partition (p+1) mod RowsOutPartitions, at its timestamp + 1000.
func CheckRowsOutput(t testing.TB, in string, recs []RowsRecord, got map[string]*kgo.Record) {
	t.Helper()
	for _, want := range recs {
		r := got[want.Value]
		if r == nil {
			t.Errorf("no output record of %q", want.Value)
			continue
		}
		wantHeaders := append(slices.Clone(want.Headers), kgo.RecordHeader{Key: "meta",
			Value: []byte(fmt.Sprintf("%s/%d/%d/%d/0/CreateTime/%d", in, want.Partition, want.Offset, want.Timestamp, len(want.Headers)))})
		if !headersEqual(r.Headers, wantHeaders) {
			t.Errorf("%q: headers %s, want %s", want.Value, showHeaders(r.Headers), showHeaders(wantHeaders))
		}
		if wp := (want.Partition + 1) % RowsOutPartitions; r.Partition != wp {
			t.Errorf("%q: partition %d, want %d", want.Value, r.Partition, wp)
		}
		if wts := want.Timestamp + 1000; r.Timestamp.UnixMilli() != wts {
			t.Errorf("%q: timestamp %d, want %d", want.Value, r.Timestamp.UnixMilli(), wts)
		}
		if string(r.Key) != string(want.Key) || (r.Key == nil) != (want.Key == nil) {
			t.Errorf("%q: key %q (null %v), want %q (null %v)", want.Value, r.Key, r.Key == nil, want.Key, want.Key == nil)
		}
	}
	if len(got) != len(recs) {
		t.Errorf("%d output records, want %d", len(got), len(recs))
	}
}

func headersEqual(a, b []kgo.RecordHeader) bool {
	return slices.EqualFunc(a, b, func(x, y kgo.RecordHeader) bool {
		return x.Key == y.Key && string(x.Value) == string(y.Value) && (x.Value == nil) == (y.Value == nil)
	})
}

func showHeaders(hs []kgo.RecordHeader) string {
	var s []string
	for _, h := range hs {
		if h.Value == nil {
			s = append(s, h.Key+"=null")
		} else {
			s = append(s, fmt.Sprintf("%s=%q", h.Key, h.Value))
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}
