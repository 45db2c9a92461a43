package watermark

import (
	"fmt"
	"math/rand"
	"testing"
	"testing/quick"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

func TestNewAggregatorRejectsZero(t *testing.T) {
	if _, err := NewAggregator(0); err == nil {
		t.Fatal("NewAggregator(0): want error")
	}
}

func TestAggregatorHoldsUntilAllReport(t *testing.T) {
	a, _ := NewAggregator(3)
	steps := []struct {
		producer string
		wm       mtime.Time
		changed  bool
		want     mtime.Time
	}{
		{"a", 10, false, mtime.MinTimestamp},
		{"b", 20, false, mtime.MinTimestamp},
		{"a", 5, false, mtime.MinTimestamp}, // stale: ignored
		{"c", 30, true, 10},
		{"a", 25, true, 20},
		{"b", 15, false, 20}, // stale: b stays at 20
		{"b", 40, true, 25},
		{"c", mtime.MaxTimestamp, false, 25},
		{"a", mtime.MaxTimestamp, true, 40},
		{"b", mtime.MaxTimestamp, true, mtime.MaxTimestamp},
	}
	for i, s := range steps {
		if got := a.Report(s.producer, s.wm); got != s.changed {
			t.Errorf("step %d: Report(%q, %v) changed = %v, want %v", i, s.producer, s.wm, got, s.changed)
		}
		if got := a.Watermark(); got != s.want {
			t.Errorf("step %d: Watermark() = %v, want %v", i, got, s.want)
		}
	}
}

func TestOutput(t *testing.T) {
	if got := Output(100); got != 100 {
		t.Errorf("Output(100) = %v", got)
	}
	if got := Output(100, 50, 70); got != 50 {
		t.Errorf("Output(100, 50, 70) = %v", got)
	}
	if got := Output(mtime.MaxTimestamp, mtime.MaxTimestamp+5); got != mtime.MaxTimestamp {
		t.Errorf("Output(max, beyond max) = %v", got)
	}
	if got := Min(); got != mtime.MaxTimestamp {
		t.Errorf("Min() = %v", got)
	}
	if got := Min(3, 1, 2); got != 1 {
		t.Errorf("Min(3,1,2) = %v", got)
	}
}

type report struct {
	producer int
	wm       int64
}

// checkProperties replays reports against an aggregator expecting n producers
// and checks the §5 invariants after every report:
//   - the aggregate never goes back;
//   - it never exceeds the latest report of any producer that reported;
//   - it is MinTimestamp until every expected producer has reported, and the
//     exact minimum of the latest reports afterwards;
//   - changed is true exactly when the aggregate moved.
func checkProperties(n int, reports []report) error {
	a, err := NewAggregator(n)
	if err != nil {
		return err
	}
	latest := map[string]mtime.Time{}
	prev := a.Watermark()
	for i, r := range reports {
		p := fmt.Sprintf("p%d", r.producer%n)
		wm := mtime.Time(r.wm)
		changed := a.Report(p, wm)
		if old, ok := latest[p]; !ok || wm > old {
			latest[p] = wm
		}
		got := a.Watermark()
		if got < prev {
			return fmt.Errorf("report %d: watermark went back from %v to %v", i, prev, got)
		}
		if changed != (got != prev) {
			return fmt.Errorf("report %d: changed=%v but watermark %v -> %v", i, changed, prev, got)
		}
		want := mtime.MaxTimestamp
		for _, l := range latest {
			if got > l {
				return fmt.Errorf("report %d: watermark %v exceeds a producer's latest report %v", i, got, l)
			}
			want = min(want, l)
		}
		if len(latest) < n {
			want = mtime.MinTimestamp
		}
		if got != want {
			return fmt.Errorf("report %d: watermark %v, want %v", i, got, want)
		}
		prev = got
	}
	return nil
}

func TestAggregatorProperties(t *testing.T) {
	f := func(n uint8, producers []uint8, wms []int16) bool {
		reports := make([]report, min(len(producers), len(wms)))
		for i := range reports {
			reports[i] = report{producer: int(producers[i]), wm: int64(wms[i])}
		}
		if err := checkProperties(int(n%16)+1, reports); err != nil {
			t.Log(err)
			return false
		}
		return true
	}
	cfg := &quick.Config{MaxCount: 500, Rand: rand.New(rand.NewSource(1))}
	if err := quick.Check(f, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestAggregatorSeededTable drives many producers with small, colliding
// watermark values (so stale and equal reports are frequent).
func TestAggregatorSeededTable(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	for c := 0; c < 200; c++ {
		n := rng.Intn(8) + 1
		reports := make([]report, rng.Intn(64))
		for i := range reports {
			reports[i] = report{producer: rng.Intn(n), wm: int64(rng.Intn(20))}
		}
		if err := checkProperties(n, reports); err != nil {
			t.Fatalf("case %d (n=%d, %v): %v", c, n, reports, err)
		}
	}
}

func FuzzAggregator(f *testing.F) {
	f.Add(uint8(3), []byte{0, 10, 1, 20, 2, 5, 0, 1})
	f.Add(uint8(1), []byte{0, 255, 0, 0})
	f.Fuzz(func(t *testing.T, n uint8, data []byte) {
		reports := make([]report, 0, len(data)/2)
		for i := 0; i+1 < len(data); i += 2 {
			reports = append(reports, report{producer: int(data[i]), wm: int64(int8(data[i+1]))})
		}
		if err := checkProperties(int(n%8)+1, reports); err != nil {
			t.Fatal(err)
		}
	})
}
