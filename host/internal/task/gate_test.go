package task

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ksrunner/ksrunner/host/internal/metrics"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// sortTestTask is a task with a store and one time-sorted stage reading
// strings in the global window.
func sortTestTask(t *testing.T, lateness int64) (*Task, *stageRun) {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c := func(urn string, comps ...string) *pipepb.Coder {
		return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: comps}
	}
	codec, err := shuffle.NewElementCodec(map[string]*pipepb.Coder{
		"str": c("beam:coder:string_utf8:v1"), "gw": c("beam:coder:global_window:v1"), "wv": c("beam:coder:windowed_value:v1", "str", "gw"),
	}, "wv")
	if err != nil {
		t.Fatal(err)
	}
	tk := &Task{
		env:    &Env{Metrics: metrics.NewJob(), Codecs: map[string]*shuffle.ElementCodec{"in": codec}, DB: db},
		prefix: []byte("task"),
		batch:  db.NewIndexedBatch(),
	}
	sr := &stageRun{
		stage:  &translate.Stage{ID: "s", Input: "in", Transforms: []string{"sortedFn"}, TimeSortedInput: true, TimeSortedLateness: lateness},
		sorted: true, sortedUpTo: minWatermark,
	}
	tk.stages = []*stageRun{sr}
	return tk, sr
}

// stamped encodes each timestamp (milliseconds) as a windowed string value
// holding the timestamp's digits, in one chunk.
func stamped(t *testing.T, ts ...int64) []chunk {
	var b bytes.Buffer
	for _, v := range ts {
		if err := exec.EncodeWindowedValueHeader(exec.MakeWindowEncoder(coder.NewGlobalWindow()), window.SingleGlobalWindow, mtime.FromMilliseconds(v), typex.NoFiringPane(), &b); err != nil {
			t.Fatal(err)
		}
		if err := exec.MakeElementEncoder(coder.NewString()).Encode(&exec.FullValue{Elm: mtime.FromMilliseconds(v).String()}, &b); err != nil {
			t.Fatal(err)
		}
	}
	return []chunk{{data: b.Bytes(), elements: len(ts)}}
}

// timestamps decodes the released chunks' timestamps, in order.
func timestamps(t *testing.T, tk *Task, out []chunk) []int64 {
	t.Helper()
	var got []int64
	for _, c := range out {
		for b := c.data; len(b) > 0; {
			l, err := tk.env.Codecs["in"].Locate(b)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, l.Timestamp)
			b = b[l.End:]
		}
	}
	return got
}

// TestSortByTime: the input is released in timestamp order as the
// watermark (less the allowed lateness) passes it, parked elements hold the
// output watermark, and an element older than what was released is dropped
// and counted.
func TestSortByTime(t *testing.T) {
	type step struct {
		in       []int64
		wm       int64
		released []int64
		hold     int64
	}
	for _, tc := range []struct {
		name     string
		lateness int64
		steps    []step
		dropped  int64
	}{{
		name: "no lateness",
		steps: []step{
			{in: []int64{3000, 1000, 2000}, wm: minWatermark, hold: 1000},
			{wm: 2500, released: []int64{1000, 2000}, hold: 3000},
			{in: []int64{500, 2600}, wm: 2500, hold: 2600}, // 500: behind the release point, dropped
			{in: []int64{2500}, wm: 2500, hold: 2500},      // at the release point: waits
			{wm: maxWatermark, released: []int64{2500, 2600, 3000}, hold: maxWatermark},
		},
		dropped: 1,
	}, {
		name:     "lateness 1000",
		lateness: 1000,
		steps: []step{
			{in: []int64{3000, 1000, 2000}, wm: 2500, released: []int64{1000}, hold: 2000},
			{in: []int64{1600}, wm: 2500, hold: 1600}, // behind the watermark, within the lateness: sorted in
			{wm: 3500, released: []int64{1600, 2000}, hold: 3000},
			{in: []int64{2400}, wm: 3500, hold: 3000}, // behind 3500-1000: dropped
			{wm: maxWatermark, released: []int64{3000}, hold: maxWatermark},
		},
		dropped: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tk, sr := sortTestTask(t, tc.lateness)
			for i, st := range tc.steps {
				var in []chunk
				if len(st.in) > 0 {
					in = stamped(t, st.in...)
				}
				out, err := tk.sortByTime(sr, in, st.wm)
				if err != nil {
					t.Fatal(err)
				}
				if got := timestamps(t, tk, out); !slices.Equal(got, st.released) {
					t.Errorf("step %d: released %v, want %v", i, got, st.released)
				}
				hold, err := tk.gateHold(true)
				if err != nil {
					t.Fatal(err)
				}
				if hold != st.hold {
					t.Errorf("step %d: output hold %d, want %d", i, hold, st.hold)
				}
			}
			if dropped := counter(t, tk.env.Metrics.Attempted, "sortedFn", "dropped_late_elements"); dropped != tc.dropped {
				t.Errorf("dropped_late_elements %d, want %d", dropped, tc.dropped)
			}
		})
	}
}

// TestSortByTimeReleasePointIsState: the release point is committed with the
// task's state, so a task reopened after a commit still drops what is
// behind it, and an aborted cycle's advance is forgotten with the cycle.
func TestSortByTimeReleasePointIsState(t *testing.T) {
	tk, sr := sortTestTask(t, 0)
	reopen := func(commit bool) {
		t.Helper()
		if commit {
			if err := tk.batch.Commit(pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		tk.batch.Close()
		tk.batch = tk.env.DB.NewIndexedBatch()
		sr.sortedUpTo = minWatermark
		if err := tk.loadSortedUpTo(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tk.sortByTime(sr, stamped(t, 1000), 2000); err != nil {
		t.Fatal(err)
	}
	reopen(true)
	if sr.sortedUpTo != 2000 {
		t.Fatalf("release point after a committed cycle: %d, want 2000", sr.sortedUpTo)
	}
	if _, err := tk.sortByTime(sr, nil, 5000); err != nil {
		t.Fatal(err)
	}
	reopen(false)
	if sr.sortedUpTo != 2000 {
		t.Fatalf("release point after an aborted cycle: %d, want the committed 2000", sr.sortedUpTo)
	}
	out, err := tk.sortByTime(sr, stamped(t, 1500, 2500), 3000)
	if err != nil {
		t.Fatal(err)
	}
	if got := timestamps(t, tk, out); !slices.Equal(got, []int64{2500}) {
		t.Fatalf("released %v after reopening, want [2500] (1500 is behind the committed release point)", got)
	}
}
