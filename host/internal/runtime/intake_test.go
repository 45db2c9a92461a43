package runtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func intakeInternal(topic string) bool { return strings.HasPrefix(topic, "__beam") }

// cycleOf lists a cycle's records as topic/partition@offset, and its
// partitions with no records as topic/partition@end.
func cycleOf(f kgo.Fetches) []string {
	var out []string
	f.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			out = append(out, fmt.Sprintf("%s/%d@end", p.Topic, p.Partition))
		}
		for _, r := range p.Records {
			out = append(out, fmt.Sprintf("%s/%d@%d", p.Topic, p.Partition, r.Offset))
		}
	})
	return out
}

func emptyFetch(topic string, partition int32) kgo.Fetches {
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topic, Partitions: []kgo.FetchPartition{{Partition: partition, HighWatermark: 1000}}}}}}
}

func TestIntakeCycle(t *testing.T) {
	type step struct {
		polled  []kgo.Fetches
		max     int
		want    []string // the cycle's records, in order
		carried int      // elements carried after it
	}
	cases := []struct {
		name  string
		steps []step
	}{{
		name: "within the bound, or past it by at most a quarter: the whole poll",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"__beam_r", 0, 10, []int{40, 40}}, part{"src", 1, 0, []int{0, 0, 0}})}, max: 83,
				want: []string{"__beam_r/0@10", "__beam_r/0@11", "src/1@0", "src/1@1", "src/1@2"}},
			{polled: []kgo.Fetches{fetchesOf(part{"__beam_r", 0, 12, []int{40, 40, 45}})}, max: 100,
				want: []string{"__beam_r/0@12", "__beam_r/0@13", "__beam_r/0@14"}},
		},
	}, {
		// The side join's case: a poll brings a long run of one
		// partition; a cycle takes a share of each, and the partition
		// whose records came first does not take the bound alone.
		name: "a share of each partition; the rest carried, handed out first next cycle",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"__beam_r", 0, 0, []int{40, 40, 40, 40, 40}}, part{"__beam_r", 1, 0, []int{40}},
				part{"__beam_r", 2, 0, []int{40, 40, 40, 40, 40}}, part{"__beam_r", 3, 0, []int{40}})}, max: 250,
				want:    []string{"__beam_r/0@0", "__beam_r/0@1", "__beam_r/1@0", "__beam_r/2@0", "__beam_r/2@1", "__beam_r/3@0"},
				carried: 240},
			{polled: []kgo.Fetches{fetchesOf(part{"__beam_r", 1, 1, []int{40, 40, 40}})}, max: 250,
				want:    []string{"__beam_r/2@2", "__beam_r/2@3", "__beam_r/1@1", "__beam_r/1@2", "__beam_r/0@2", "__beam_r/0@3"},
				carried: 120},
			{max: 250, want: []string{"__beam_r/0@4", "__beam_r/2@4", "__beam_r/1@3"}},
		},
	}, {
		name: "a source's records count one each, whatever their first byte",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"src", 0, 5, []int{0, 0, 0, 0, 0, 0}})}, max: 3,
				want: []string{"src/0@5", "src/0@6", "src/0@7"}, carried: 3},
		},
	}, {
		name: "at least one record, however large",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"__beam_r", 0, 10, []int{500, 1}})}, max: 100,
				want: []string{"__beam_r/0@10"}, carried: 1},
			{max: 100, want: []string{"__beam_r/0@11"}},
		},
	}, {
		name: "the partition whose share comes first turns at every cut",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"__beam_r", 0, 10, []int{70, 70}}, part{"__beam_r", 1, 20, []int{70, 70}})}, max: 100,
				want: []string{"__beam_r/0@10"}, carried: 210},
			{max: 100, want: []string{"__beam_r/1@20"}, carried: 140},
			{max: 100, want: []string{"__beam_r/0@11"}, carried: 70},
		},
	}, {
		name: "a partition in two fetches (the second poll) keeps its order",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"__beam_r", 0, 10, []int{30, 30}}, part{"__beam_r", 1, 50, []int{10}}),
				fetchesOf(part{"__beam_r", 0, 12, []int{30}})}, max: 50,
				want: []string{"__beam_r/0@10", "__beam_r/1@50"}, carried: 60},
			{max: 50, want: []string{"__beam_r/0@11", "__beam_r/0@12"}}, // 60 is within a quarter
		},
	}, {
		name: "a partition at its end: handed out empty, unless records of it are carried",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"src", 0, 0, []int{0, 0, 0, 0, 0, 0}}), emptyFetch("src", 1)}, max: 4,
				want: []string{"src/1@end", "src/0@0", "src/0@1", "src/0@2", "src/0@3"}, carried: 2},
			{polled: []kgo.Fetches{emptyFetch("src", 0), fetchesOf(part{"src", 1, 0, []int{0, 0, 0, 0}})}, max: 3,
				want: []string{"src/1@0", "src/1@1", "src/0@4"}, carried: 3}, // shares of one each, src/1's turn first, filled
		},
	}, {
		name: "records polled again (the client went back): they replace the carried ones",
		steps: []step{
			{polled: []kgo.Fetches{fetchesOf(part{"src", 0, 0, []int{0, 0, 0, 0, 0, 0}})}, max: 2,
				want: []string{"src/0@0", "src/0@1"}, carried: 4},
			{polled: []kgo.Fetches{fetchesOf(part{"src", 0, 3, []int{0, 0, 0, 0}})}, max: 2,
				want: []string{"src/0@3", "src/0@4"}, carried: 2},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var in intake
			for k, s := range c.steps {
				var polled kgo.Fetches
				for _, f := range s.polled {
					polled = append(polled, f...)
				}
				got, n := in.cycle(polled, s.max, s.max, intakeInternal)
				if !slices.Equal(cycleOf(got), s.want) {
					t.Fatalf("cycle %d: %v, want %v", k, cycleOf(got), s.want)
				}
				if e := elementsIn(got, intakeInternal); n != e {
					t.Errorf("cycle %d says it holds %d elements; its records hold %d", k, n, e)
				}
				if in.size() != s.carried {
					t.Errorf("cycle %d: %d elements carried, want %d", k, in.size(), s.carried)
				}
			}
		})
	}
}

// TestIntakeProperties feeds the intake random polls of a few partitions
// (records of random sizes, some polls repeated from the first carried
// record as after a reset, some drops) and checks its invariants: every
// record is handed out once, in offset order per partition, unless dropped
// (then it comes again); a cycle holds at most its bound (a quarter more
// when it takes the whole intake), or one record; when a cycle is cut,
// every partition whose first carried record fits its share gets some,
// and so does every one whose first record fits the hard bound (the
// option, when the cycle's bound is below it) beside the cycle's;
// commitOffsets names each partition's first carried record.
func TestIntakeProperties(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var in intake
		const parts = 4
		next := make([]int64, parts)   // the client's position
		handed := make([]int64, parts) // the next offset the tasks expect
		sizes := map[[2]int64]int{}    // partition, offset -> elements
		back := -1                     // a partition the client went back on, unnoticed: polled next
		for round := range 60 {
			maxElements := 50 + rng.IntN(200)
			var polled kgo.Fetches
			for p := range int32(parts) {
				if rng.IntN(3) == 0 && int(p) != back {
					continue
				}
				var counts []int
				records := rng.IntN(6)
				if int(p) == back {
					records = max(records, 1)
				}
				for range records {
					c := 1 + rng.IntN(120)
					sizes[[2]int64{int64(p), next[p] + int64(len(counts))}] = c
					counts = append(counts, c)
				}
				if len(counts) == 0 {
					polled = append(polled, emptyFetch("__beam_r", p)...)
					continue
				}
				polled = append(polled, fetchesOf(part{"__beam_r", p, next[p], counts})...)
				next[p] += int64(len(counts))
			}
			back = -1
			// What the intake holds now, per partition: from what was
			// handed to the client's position.
			var pending []int
			var firstOf []int
			for p := range parts {
				e := 0
				for o := handed[p]; o < next[p]; o++ {
					e += sizes[[2]int64{int64(p), o}]
				}
				pending = append(pending, e)
				firstOf = append(firstOf, sizes[[2]int64{int64(p), handed[p]}])
			}
			fair := share(slices.DeleteFunc(slices.Clone(pending), func(e int) bool { return e == 0 }), maxElements)
			firstCarried := in.commitOffsets()
			hard := maxElements // the option; maxElements the cycle's bound
			if rng.IntN(2) == 0 {
				hard += rng.IntN(400)
			}
			got, n := in.cycle(polled, maxElements, hard, intakeInternal)
			total, records := 0, 0
			gotParts := map[int32]bool{}
			got.EachPartition(func(fp kgo.FetchTopicPartition) {
				for _, r := range fp.Records {
					if r.Offset != handed[fp.Partition] {
						t.Fatalf("seed %d round %d: partition %d handed offset %d, want %d (carried first %v)", seed, round, fp.Partition, r.Offset, handed[fp.Partition], firstCarried)
					}
					handed[fp.Partition]++
					total += sizes[[2]int64{int64(fp.Partition), r.Offset}]
					records++
					gotParts[fp.Partition] = true
				}
				if len(fp.Records) == 0 {
					if _, carried := in.commitOffsets()["__beam_r"][fp.Partition]; carried {
						t.Fatalf("seed %d round %d: partition %d handed out empty with records carried", seed, round, fp.Partition)
					}
				}
			})
			if total != n {
				t.Fatalf("seed %d round %d: cycle says %d elements, holds %d", seed, round, n, total)
			}
			carried := in.size()
			if carried == 0 {
				if n > max(maxElements+maxElements/overshoot, hard) && records > 1 {
					t.Fatalf("seed %d round %d: took the whole intake of %d elements, bound %d", seed, round, n, maxElements)
				}
			} else {
				if n > hard && records > 1 {
					t.Fatalf("seed %d round %d: a cut cycle of %d elements, hard bound %d", seed, round, n, hard)
				}
				if records == 0 {
					t.Fatalf("seed %d round %d: a cycle of nothing with %d elements carried", seed, round, carried)
				}
				for p := range int32(parts) {
					if pending[p] > 0 && firstOf[p] <= fair && !gotParts[p] {
						t.Fatalf("seed %d round %d: partition %d holds %d elements, its first record %d fits the share %d, and the cut cycle gave it none", seed, round, p, pending[p], firstOf[p], fair)
					}
					if pending[p] > 0 && n+firstOf[p] <= hard && !gotParts[p] {
						t.Fatalf("seed %d round %d: partition %d holds %d elements, its first record %d fits the hard bound %d beside the cycle's %d, and the cut cycle gave it none", seed, round, p, pending[p], firstOf[p], hard, n)
					}
				}
			}
			// Every carried partition's first record is where its
			// commit must stay, right after what was handed.
			for p, o := range in.commitOffsets()["__beam_r"] {
				if o.Offset != handed[p] || o.Epoch != 3 {
					t.Fatalf("seed %d round %d: partition %d commit offset %v, want %d (epoch 3)", seed, round, p, o, handed[p])
				}
			}
			switch rng.IntN(10) {
			case 0: // an abort: the client goes back to what was handed
				in.drop()
				copy(next, handed)
			case 1: // a revoked partition, come back at once
				p := int32(rng.IntN(parts))
				in.dropPartitions(map[string][]int32{"__beam_r": {p}})
				next[p] = handed[p]
			case 2: // the client goes back unnoticed: merge must notice
				back = rng.IntN(parts)
				next[back] = handed[back]
			}
		}
	}
}

func TestShare(t *testing.T) {
	for _, c := range []struct {
		sizes       []int
		limit, want int
	}{
		{[]int{205, 41, 205, 41}, 250, 84},
		{[]int{10, 10}, 100, 100},
		{[]int{300}, 100, 100},
		{[]int{30, 500, 500}, 130, 50},
		{[]int{1, 1, 1, 1}, 3, 0},
	} {
		if got := share(c.sizes, c.limit); got != c.want {
			t.Errorf("share(%v, %d) = %d, want %d", c.sizes, c.limit, got, c.want)
		}
	}
}

func TestIntakeCommitRewrite(t *testing.T) {
	var in intake
	in.cycle(fetchesOf(part{"src", 0, 5, []int{0, 0, 0, 0}}, part{"src", 1, 7, []int{0}}), 2, 2, intakeInternal)
	at := in.commitOffsets()
	if len(at) != 1 || len(at["src"]) != 1 || at["src"][0] != (kgo.EpochOffset{Epoch: 3, Offset: 6}) {
		t.Fatalf("commit offsets %v, want src/0 at 6 (epoch 3)", at)
	}
	uncommitted := map[string]map[int32]kgo.EpochOffset{"src": {0: {Epoch: 3, Offset: 9}, 1: {Epoch: 3, Offset: 8}}}
	if got := adjust(uncommitted, at); got["src"][0].Offset != 6 || got["src"][1].Offset != 8 {
		t.Errorf("adjusted %v, want src/0 6, src/1 8", got)
	}
	txn := &kmsg.TxnOffsetCommitRequest{Topics: []kmsg.TxnOffsetCommitRequestTopic{{Topic: "src", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 9, LeaderEpoch: 4}, {Partition: 1, Offset: 8}}}}}
	if err := rewriteTxnCommit(at)(txn); err != nil || txn.Topics[0].Partitions[0].Offset != 6 || txn.Topics[0].Partitions[0].LeaderEpoch != 3 || txn.Topics[0].Partitions[1].Offset != 8 {
		t.Errorf("transaction commit rewritten to %+v, %v; want src/0 at 6 epoch 3, src/1 at 8", txn.Topics[0].Partitions, err)
	}
	oc := &kmsg.OffsetCommitRequest{Topics: []kmsg.OffsetCommitRequestTopic{{Topic: "src", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 9}, {Partition: 1, Offset: 8}}}}}
	if err := rewriteCommit(at)(oc); err != nil || oc.Topics[0].Partitions[0].Offset != 6 || oc.Topics[0].Partitions[1].Offset != 8 {
		t.Errorf("offset commit rewritten to %+v, %v; want src/0 at 6, src/1 at 8", oc.Topics[0].Partitions, err)
	}
	in.dropOffsets(map[string]map[int32]kgo.EpochOffset{"src": {0: {}}})
	if in.size() != 0 || in.commitOffsets() != nil {
		t.Errorf("after dropping src/0: %d carried, commit offsets %v; want none", in.size(), in.commitOffsets())
	}
}
