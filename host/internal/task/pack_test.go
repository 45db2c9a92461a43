package task

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// shuffleValues are what the fake producer stage of shuffleRun emits for
// the impulse: values of ten keys in two windows, one value larger than
// any pack limit the tests use, and a key with more values than one
// stored GroupByKey run holds (maxStoredValue), all in one cycle.
func shuffleValues() [][]byte {
	w0, w1 := interval(0, 60000), interval(60000, 120000)
	var out [][]byte
	for i := range 200 {
		w := w0
		if i%3 == 0 {
			w = w1
		}
		out = append(out, wv(int64(i), kv(fmt.Sprintf("k%d", i%10), fmt.Sprintf("v%d%s", i, strings.Repeat("x", i%17))), w))
		if i == 100 {
			out = append(out, wv(int64(i), kv("k3", strings.Repeat("L", 2000)), w0))
		}
	}
	for i := range 300 {
		out = append(out, wv(int64(i), kv("big", fmt.Sprintf("%04d%s", i, strings.Repeat("b", 1000))), w0))
	}
	return out
}

// shuffleRun runs the impulse task of groupingPipeline (its stage emits
// shuffleValues) with record_pack_bytes packBytes, then the GroupByKey
// task of each partition on what it produced; it returns the produced
// records and the groups each GroupByKey task fired, sorted. With abort,
// the producing task first runs a cycle that aborts.
func shuffleRun(t *testing.T, packBytes int, abort bool) ([]*kgo.Record, []string) {
	t.Helper()
	const partitions = 3
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), partitions)
	te.env.RecordPackBytes = packBytes
	prodSub := te.find("writing the GroupByKey's input", func(st *translate.SubTopology) bool { return te.writes(st, translate.TopicRepartition) })
	vals := shuffleValues()
	te.exec(prodSub).setFn(func(shuffle.WindowedValue) [][]byte { return vals })
	in := te.input(prodSub, 0)
	if abort {
		tk := te.task(prodSub, 0)
		if err := tk.Handle(context.Background(), []*kgo.Record{in.rec([]byte{shuffle.KindData})}); err != nil {
			t.Fatal(err)
		}
		tk.Abort()
		te.exec(prodSub).takeBundles()
		if recs := te.take(); len(recs) > 0 {
			t.Fatalf("an aborted cycle's task produced %d records before its commit, want none (the packs are open until the commit)", len(recs))
		}
		in = te.input(prodSub, 0) // redelivered
	}
	prod := te.task(prodSub, 0)
	te.cycle(prod, in.rec([]byte{shuffle.KindData}))
	produced := te.take()

	gbkSub := groupTask(t, te)
	byPartition := map[int32][]*kgo.Record{}
	for _, r := range produced {
		if r.Topic == te.env.Topics.Full(gbkSub.Input) {
			byPartition[r.Partition] = append(byPartition[r.Partition], r)
		}
	}
	var groups []string
	for p := range int32(partitions) {
		tk := te.task(gbkSub, p)
		te.cycle(tk, byPartition[p]...)
		groups = append(groups, te.exec(gbkSub).inputs()...)
	}
	slices.Sort(groups)
	return produced, groups
}

// Packing changes the records, not the result: every value reaches the
// GroupByKey task of its key's partition, in order, and the groups fired
// are those of the unpacked shuffle, a key with more values than a stored
// run holds included (its values share record offsets, which must not
// make their runs overwrite each other).
func TestPackedShuffleGroupsAsUnpacked(t *testing.T) {
	unpackedRecs, want := shuffleRun(t, 0, false)
	if len(want) != 11*2-1 { // k0..k9 and big; big only in the first window
		t.Fatalf("the unpacked run fired %d groups: %v", len(want), want)
	}
	for _, r := range unpackedRecs {
		if r.Value[0] == shuffle.KindDataPacked {
			t.Fatalf("record_pack_bytes=0 produced a packed record")
		}
	}
	for _, limit := range []int{256, 64 << 10, MaxTestPackBytes} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			recs, got := shuffleRun(t, limit, false)
			checkLines(t, "groups", got, want)
			checkPacks(t, recs, limit, len(shuffleValues()))
		})
	}
}

// MaxTestPackBytes is more than the big key's values (maxStoredValue).
const MaxTestPackBytes = 512 << 10

// An aborted cycle's packs are never produced; the redelivered input
// produces them once.
func TestPackedAbortDropsPacks(t *testing.T) {
	_, want := shuffleRun(t, 0, false)
	recs, got := shuffleRun(t, 1024, true)
	checkLines(t, "groups after an aborted cycle", got, want)
	checkPacks(t, recs, 1024, len(shuffleValues()))
}

// checkPacks checks the records of the impulse task of shuffleRun: every
// value is in a pack of at most limit bytes (but the one too large, alone
// in a DATA record), in the partition of its key, before the partition's
// watermark report; there are values values in all.
func checkPacks(t *testing.T, recs []*kgo.Record, limit, values int) {
	t.Helper()
	var codec *shuffle.ElementCodec
	n, packed := 0, 0
	reported := map[string]bool{}
	for _, r := range recs {
		where := fmt.Sprintf("%s/%d offset %d", r.Topic, r.Partition, r.Offset)
		if len(r.Value) == 0 || strings.HasSuffix(r.Topic, shuffle.StatusTopic) {
			continue
		}
		partition := func(raw []byte) {
			if codec == nil {
				return
			}
			wv, err := codec.Next(raw)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			key, _, _ := codec.SplitKV(wv.Elem)
			if p := shuffle.KeyPartition(key, 3); p != r.Partition {
				t.Errorf("%s: a value of key %q in partition %d, want %d", where, key, r.Partition, p)
			}
			n++
		}
		switch r.Value[0] {
		case shuffle.KindWatermark:
			reported[where[:strings.Index(where, " ")]] = true
			continue
		case shuffle.KindData, shuffle.KindDataPacked:
			if reported[where[:strings.Index(where, " ")]] {
				t.Errorf("%s: data after the partition's watermark report", where)
			}
		}
		if codec == nil {
			codec = testCodecOf(t, r)
		}
		switch r.Value[0] {
		case shuffle.KindData:
			if len(r.Value)-1 <= limit {
				t.Errorf("%s: a value of %d bytes not packed (limit %d)", where, len(r.Value)-1, limit)
			}
			partition(r.Value[1:])
		case shuffle.KindDataPacked:
			packed++
			if r.Key != nil {
				t.Errorf("%s: a packed record with key %q", where, r.Key)
			}
			cnt, vals, err := shuffle.DecodePacked(r.Value)
			if err != nil || len(vals) > limit {
				t.Errorf("%s: pack of %d values, %d bytes (limit %d): %v", where, cnt, len(vals), limit, err)
			}
			if err := codec.EachPacked(r.Value, func(_ int, raw []byte) error { partition(raw); return nil }); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	if n != values || packed == 0 {
		t.Errorf("%d values in %d packs, want %d values", n, packed, values)
	}
}

// testCodecOf is the codec of the GroupByKey input grouping pipelines write.
var testCodecOf = func(t *testing.T, r *kgo.Record) *shuffle.ElementCodec {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), 3)
	return te.env.Codecs[te.env.Topics.ByName[strings.TrimPrefix(r.Topic, shuffle.TopicName(testApp, ""))].PCollection]
}

// A topic may hold both kinds of records (a job restarted with another
// record_pack_bytes): a GroupByKey task takes each value at its own
// position, and a value delivered again after its run was stored
// (at_least_once: state applied, offsets not committed) counts once
// whether it came packed or not.
func TestGroupByKeyTakesMixedRecords(t *testing.T) {
	te := newTestEnv(t, marshal(t, groupingPipeline(t)), 1)
	sub := groupTask(t, te)
	tk := te.task(sub, 0)
	in := te.input(sub, 0)
	prod := te.producer(sub, 0) // the input's one producer
	w0 := interval(0, 60000)
	packOf := func(vals ...[]byte) *kgo.Record {
		var p shuffle.Pack
		for _, v := range vals {
			p.Add(v)
		}
		return in.rec(p.Take())
	}
	first := packOf(wv(1, kv("k", "a"), w0), wv(2, kv("k", "b"), w0), wv(3, kv("j", "x"), w0))
	single := in.data(wv(4, kv("k", "c"), w0))[0]
	te.cycle(tk, first, single)
	// Delivered again (same offsets), then new data.
	te.cycle(tk, first, single, packOf(wv(5, kv("k", "d"), w0), wv(6, kv("j", "y"), w0)), in.wm(prod, 70000))
	checkLines(t, "groups", te.exec(sub).inputs(), []string{
		`"j":["x" "y"] @59999 [0,60000) ontime#0 first last`,
		`"k":["a" "b" "c" "d"] @59999 [0,60000) ontime#0 first last`,
	})
}
