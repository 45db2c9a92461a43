package runtime

import (
	"fmt"
	"slices"
	"strings"
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

// part is a polled partition for fitCycle's tests: its records' element
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

// kept lists the kept records as topic/partition@offset, in order.
func keptRecords(f kgo.Fetches) []string {
	var out []string
	f.EachPartition(func(p kgo.FetchTopicPartition) {
		for _, r := range p.Records {
			out = append(out, fmt.Sprintf("%s/%d@%d", p.Topic, p.Partition, r.Offset))
		}
	})
	return out
}

func rewinds(r map[string]map[int32]kgo.EpochOffset) []string {
	var out []string
	for topic, ps := range r {
		for p, eo := range ps {
			out = append(out, fmt.Sprintf("%s/%d@%d e%d", topic, p, eo.Offset, eo.Epoch))
		}
	}
	slices.Sort(out)
	return out
}

func TestFitCycle(t *testing.T) {
	internal := func(topic string) bool { return strings.HasPrefix(topic, "__beam") }
	cases := []struct {
		name        string
		parts       []part
		max, start  int
		second      int      // parts from this index on come in a second fetch (the second poll); 0: none
		wantKept    []string // nil: the fetches unchanged
		wantRewinds []string
	}{{
		name:  "within the bound: unchanged",
		parts: []part{{"__beam_r", 0, 10, []int{40, 40}}, {"src", 1, 0, []int{0, 0, 0}}},
		max:   83,
	}, {
		name:  "passing the bound by at most a quarter: unchanged",
		parts: []part{{"__beam_r", 0, 10, []int{40, 40, 45}}},
		max:   100,
	}, {
		name:        "packs count their elements; the partition is cut at the record that passes the bound",
		parts:       []part{{"__beam_r", 0, 10, []int{40, 40, 60}}},
		max:         100,
		wantKept:    []string{"__beam_r/0@10", "__beam_r/0@11"},
		wantRewinds: []string{"__beam_r/0@12 e3"},
	}, {
		name:        "a source's records count one each, whatever their first byte",
		parts:       []part{{"src", 0, 5, []int{0, 0, 0, 0}}},
		max:         3,
		wantKept:    []string{"src/0@5", "src/0@6", "src/0@7"},
		wantRewinds: []string{"src/0@8 e3"},
	}, {
		name:        "a partition left whole is taken out, and rewound to its first record",
		parts:       []part{{"__beam_r", 0, 10, []int{60}}, {"__beam_r", 1, 20, []int{60, 10}}, {"src", 2, 0, nil}},
		max:         100,
		wantKept:    []string{"__beam_r/0@10"},
		wantRewinds: []string{"__beam_r/1@20 e3"},
	}, {
		name:        "at least one record, however large",
		parts:       []part{{"__beam_r", 0, 10, []int{500, 1}}},
		max:         100,
		wantKept:    []string{"__beam_r/0@10"},
		wantRewinds: []string{"__beam_r/0@11 e3"},
	}, {
		name:        "start rotates which partition goes first",
		parts:       []part{{"__beam_r", 0, 10, []int{70}}, {"__beam_r", 1, 20, []int{70}}},
		max:         100,
		start:       1,
		wantKept:    []string{"__beam_r/1@20"},
		wantRewinds: []string{"__beam_r/0@10 e3"},
	}, {
		name: "a partition in two fetches (the second poll) keeps its order: cut in the first, none of the second",
		parts: []part{{"__beam_r", 0, 10, []int{30, 30}}, {"__beam_r", 1, 50, []int{10}},
			{"__beam_r", 0, 12, []int{30}}},
		max:         50,
		second:      2,
		wantKept:    []string{"__beam_r/0@10"},
		wantRewinds: []string{"__beam_r/0@11 e3", "__beam_r/1@50 e3"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := fetchesOf(c.parts...)
			if c.second > 0 {
				second := kgo.Fetch{Topics: in[0].Topics[c.second:]}
				in[0].Topics = in[0].Topics[:c.second]
				in = append(in, second)
			}
			before := keptRecords(in)
			kept, keptElements, rewind := fitCycle(in, elementsIn(in, internal), c.max, c.start, internal)
			if got := elementsIn(kept, internal); keptElements != got {
				t.Errorf("fitCycle says it kept %d elements; the kept records hold %d", keptElements, got)
			}
			if c.wantKept == nil {
				if rewind != nil || !slices.Equal(keptRecords(kept), before) {
					t.Fatalf("fitCycle changed fetches within the bound: kept %v, rewind %v", keptRecords(kept), rewinds(rewind))
				}
				return
			}
			if got := keptRecords(kept); !slices.Equal(got, c.wantKept) {
				t.Errorf("kept %v, want %v", got, c.wantKept)
			}
			if got := rewinds(rewind); !slices.Equal(got, c.wantRewinds) {
				t.Errorf("rewinds %v, want %v", got, c.wantRewinds)
			}
			kept.EachPartition(func(p kgo.FetchTopicPartition) {
				if len(p.Records) == 0 {
					t.Errorf("kept %s/%d with no records: a Kafka source would take its high watermark as reached", p.Topic, p.Partition)
				}
			})
			// Every polled record is kept or at or after its partition's rewind.
			for _, r := range before {
				if slices.Contains(c.wantKept, r) {
					continue
				}
				var topic string
				var p int32
				var off int64
				fmt.Sscanf(strings.Replace(strings.Replace(r, "/", " ", 1), "@", " ", 1), "%s %d %d", &topic, &p, &off)
				if eo, ok := rewind[topic][p]; !ok || eo.Offset > off {
					t.Errorf("record %s is neither kept nor rewound to (rewinds %v): it would be lost", r, rewinds(rewind))
				}
			}
		})
	}
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
