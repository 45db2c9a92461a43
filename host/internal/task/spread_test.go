package task

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

func beamDouble(f float64) []byte {
	return binary.BigEndian.AppendUint64(nil, math.Float64bits(f))
}

func TestRestrictionSize(t *testing.T) {
	for _, c := range []struct {
		name  string
		value []byte
		want  float64
	}{
		{"double", beamDouble(62500), 62500},
		{"length-prefixed double", append([]byte{8}, beamDouble(3.5)...), 3.5},
		{"zero", beamDouble(0), 0},
		{"NaN", beamDouble(math.NaN()), 1},
		{"negative", beamDouble(-4), 1},
		{"infinite", beamDouble(math.Inf(1)), 1e18},
		{"not a double", []byte{1, 2, 3}, 1},
		{"empty", nil, 1},
	} {
		if got := restrictionSize(c.value); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// The spreader gives each partition the same weight of restrictions,
// whatever their sizes or order, and ties go round from the task's own
// partition.
func TestSpreaderBalances(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int32
		start int32
		sizes []float64
		want  []float64 // total size per partition
		first int32     // partition of the first restriction
	}{
		{"16 even splits over 4", 4, 0, repeat(62500, 16), []float64{250000, 250000, 250000, 250000}, 0},
		{"ties start at the task's partition", 4, 2, []float64{1}, []float64{0, 0, 1, 0}, 2},
		{"start beyond n wraps", 3, 7, []float64{5}, []float64{0, 5, 0}, 1},
		{"a large one first", 2, 0, []float64{10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []float64{10, 10}, 0},
		{"zero sizes spread by count", 3, 0, []float64{0, 0, 0, 0, 0, 0}, []float64{0, 0, 0}, 0},
	} {
		var s spreader
		got := make([]float64, c.n)
		counts := make([]int, c.n)
		for i, size := range c.sizes {
			p := s.pick("topic", c.n, c.start, size)
			if i == 0 && p != c.first {
				t.Errorf("%s: first restriction to partition %d, want %d", c.name, p, c.first)
			}
			got[p] += size
			counts[p]++
		}
		for p := range got {
			if got[p] != c.want[p] {
				t.Errorf("%s: weights %v, want %v", c.name, got, c.want)
				break
			}
		}
		if c.name == "zero sizes spread by count" {
			for p, n := range counts {
				if n != 2 {
					t.Errorf("%s: partition %d got %d restrictions, want 2 each (%v)", c.name, p, n, counts)
				}
			}
		}
	}
}

// Topics are weighed apart: a second spread topic starts even.
func TestSpreaderPerTopic(t *testing.T) {
	var s spreader
	s.pick("a", 2, 0, 100)
	if p := s.pick("b", 2, 0, 1); p != 0 {
		t.Errorf("topic b's first restriction to partition %d, want 0 (topic a's weights must not count)", p)
	}
}

func repeat(f float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f
	}
	return out
}

func init() {
	register.DoFn3x0[*sdf.LockRTracker, []byte, func(int64)](&rangeSDF{})
}

// rangeSDF is a splittable DoFn over an offset range.
type rangeSDF struct{}

func (*rangeSDF) CreateInitialRestriction([]byte) offsetrange.Restriction {
	return offsetrange.Restriction{End: 16}
}
func (*rangeSDF) SplitRestriction(_ []byte, r offsetrange.Restriction) []offsetrange.Restriction {
	return r.EvenSplits(16)
}
func (*rangeSDF) RestrictionSize(_ []byte, r offsetrange.Restriction) float64 { return r.Size() }
func (*rangeSDF) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}
func (*rangeSDF) ProcessElement(rt *sdf.LockRTracker, _ []byte, emit func(int64)) {
	for p := rt.GetRestriction().(offsetrange.Restriction).Start; rt.TryClaim(p); p++ {
		emit(p)
	}
}

// The task producing a splittable DoFn's sized restrictions sends them to
// the partitions of the SpreadRestrictions topic by size: 16 of one size
// go 4 to each of 4 partitions, and a restriction as large as the rest
// together gets a partition to itself. (By the hash of their keys, the 16
// ranges of bench gbk --source_splits 16 at 1M elements went 8, 1, 2 and 5.)
func TestSpreadRestrictionsBySize(t *testing.T) {
	const partitions = 4
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo(s, &rangeSDF{}, beam.Impulse(s))
	for _, c := range []struct {
		name  string
		sizes []float64
		want  map[int32]int // restrictions per partition
	}{
		{"even", repeat(62500, 16), map[int32]int{0: 4, 1: 4, 2: 4, 3: 4}},
		{"one large", append([]float64{300}, repeat(100, 9)...), map[int32]int{0: 1, 1: 3, 2: 3, 3: 3}},
	} {
		te := newTestEnv(t, marshal(t, p), partitions)
		te.env.RecordPackBytes = 0
		var spreadTopic string
		prodSub := te.find("writing the restrictions", func(st *translate.SubTopology) bool {
			for _, sk := range st.Sinks {
				if te.env.Topics.ByName[sk.Topic].SpreadBySize {
					spreadTopic = te.env.Topics.Full(sk.Topic)
					return true
				}
			}
			return false
		})
		var vals [][]byte
		for i, size := range c.sizes {
			// KV<KV<element, KV<restriction, watermark estimator state>>,
			// size>: the impulse's bytes, a length-prefixed restriction and
			// a bool (the Go SDK's), a Beam double.
			elem := append(strEl(""), strEl(fmt.Sprintf("restriction %d", i))...)
			elem = append(append(elem, 0), beamDouble(size)...)
			vals = append(vals, wv(0, elem, globalWindow))
		}
		te.exec(prodSub).setFn(func(shuffle.WindowedValue) [][]byte { return vals })
		te.cycle(te.task(prodSub, 0), te.input(prodSub, 0).rec([]byte{shuffle.KindData}))
		got := map[int32]int{}
		for _, r := range te.take() {
			if r.Topic == spreadTopic && len(r.Value) > 0 && r.Value[0] == shuffle.KindData {
				got[r.Partition]++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: restrictions per partition %v, want %v", c.name, got, c.want)
		}
	}
}
