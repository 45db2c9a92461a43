package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	beam.Init()
	os.Exit(m.Run())
}

// testRecords is the test's record count: KSRUNNER_STREAMING_RECORDS, default
// 2,000 (the acceptance run by hand: 100,000).
func testRecords(t *testing.T) int {
	s := os.Getenv("KSRUNNER_STREAMING_RECORDS")
	if s == "" {
		return 2000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("KSRUNNER_STREAMING_RECORDS=%q: want a positive count", s)
	}
	return n
}

// TestRun runs the example on the test broker with 2,000 records (see
// testRecords) and checks
// the counts topic after the job is cancelled, read whole: one line per key
// and 10-second window of the records in the words topic (read back, not
// taken from Run), each once, with that window's exact count.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	cfg := Config{
		Bootstrap:     bootstrap,
		WordsTopic:    kafkatest.UniqueName(t, "words"),
		CountsTopic:   kafkatest.UniqueName(t, "counts"),
		ApplicationID: kafkatest.UniqueName(t, "streaming"),
		Records:       testRecords(t),
		Keys:          20,
		Deadline:      2 * time.Minute,
	}
	var out strings.Builder
	start := time.Now()
	res, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("Run took %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())

	// Each of the 4 partitions was read to its end by the job's source
	// task and committed.
	if len(res.Ends) != 4 {
		t.Errorf("%s has %d partitions, want 4", cfg.WordsTopic, len(res.Ends))
	}
	for p, end := range res.Ends {
		if res.Committed[p] != end {
			t.Errorf("%s partition %d: committed offset %d, want the end %d", cfg.WordsTopic, p, res.Committed[p], end)
		}
	}

	// The input as the broker holds it.
	var words []*kgo.Record
	kafkatest.ReadTopic(ctx, t, bootstrap, cfg.WordsTopic, nil, func(r *kgo.Record) { words = append(words, r) })
	if len(words) != cfg.Records {
		t.Fatalf("%s holds %d records, want %d", cfg.WordsTopic, len(words), cfg.Records)
	}
	want := map[string]int64{}
	for _, r := range words {
		if len(r.Value) != 8 {
			t.Fatalf("%s offset %d: value %x is not a Long", cfg.WordsTopic, r.Offset, r.Value)
		}
		start := time.UnixMilli(r.Timestamp.UnixMilli() - r.Timestamp.UnixMilli()%Window.Milliseconds()).UTC()
		want[string(r.Key)+","+start.Format(time.RFC3339)] += int64(binary.BigEndian.Uint64(r.Value))
	}
	if len(want) < 2*cfg.Keys {
		t.Fatalf("the input spans only %d keys and windows", len(want))
	}

	// The output, whole, after the job: each key and window once, with its
	// count.
	got := map[string]int64{}
	var bad []string
	kafkatest.ReadTopic(ctx, t, bootstrap, cfg.CountsTopic, nil, func(r *kgo.Record) {
		l := string(r.Value)
		i := strings.LastIndexByte(l, ',')
		n, err := strconv.ParseInt(l[i+1:], 10, 64)
		switch {
		case i < 0 || err != nil:
			bad = append(bad, fmt.Sprintf("offset %d: %q is not key,windowStart,count", r.Offset, l))
		case string(r.Key) != l[:strings.IndexByte(l, ',')]:
			bad = append(bad, fmt.Sprintf("offset %d: record key %q, line %q", r.Offset, r.Key, l))
		}
		if _, dup := got[l[:max(i, 0)]]; dup {
			bad = append(bad, fmt.Sprintf("offset %d: %s written twice", r.Offset, l[:max(i, 0)]))
		}
		got[l[:max(i, 0)]] = n
	})
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: missing, want %d", k, want[k]))
		} else if g != want[k] {
			bad = append(bad, fmt.Sprintf("%s: count %d, want %d", k, g, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: count %d, no such key and window in the input", k, got[k]))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s, %d windows expected:\n%s", cfg.CountsTopic, len(want), strings.Join(bad, "\n"))
	}
}
