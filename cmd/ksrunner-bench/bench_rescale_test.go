package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestBenchRescale runs `bench rescale` small, on one instance process (the
// ksrunner binary, built from this module), on the test broker:
// the checker must find every window complete, each key's count exactly
// what the generator produced and nothing twice, so this fails when the
// pipeline, the instance, the generator's counts or the checker's matching
// breaks.
func TestBenchRescale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envRunMain, "1") // the SDK worker pools run this binary's main
	binary, err := ksrunnerBinary(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cfg := rescaleConfig{
		Rate: 2000, Keys: 50, ValueBytes: 10, Partitions: 2,
		Duration: 4 * time.Second, Warmup: time.Second, Grace: time.Minute, Late: 2 * time.Second,
		Plan: []planStep{{At: 0}}, Binary: binary, SDKBinary: self, CommitMs: 50, AddAs: addAsJobServer,
		WorkDir: t.TempDir(), InstanceLogLevel: "info",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	res, err := benchRescale(ctx, cfg, kafkatest.Broker(t), &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	// 4 s at 2000/s, in 10 ms steps of 20 records.
	if res.Produced < 7000 || res.Produced > 8020 {
		t.Errorf("produced %d records, want about 8000", res.Produced)
	}
	var elements int64
	for _, w := range res.Windows {
		if !w.Complete || w.Duplicated || w.Keys != 50 && w.Elements >= 50 {
			t.Errorf("window %v: %+v", w.Start, w)
		}
		elements += w.Elements
	}
	if len(res.Windows) < 4 || elements != res.Produced+res.Primed {
		t.Errorf("%d windows holding %d elements, want at least 4 holding all %d+%d produced", len(res.Windows), elements, res.Primed, res.Produced)
	}
	for _, want := range []string{"1 instance [1s, 4s)", "sustained: ", "incomplete 0, duplicated 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// The checker: a window is complete when its last expected result arrives
// (at that time), whether results or the expected counts come first; a
// wrong count, a missing key or a second result leaves it incomplete, and a
// second result is told apart as a split (panes adding up) or a repeat;
// a window is covered when every produced key has a result, right or not.
func TestWindowChecker(t *testing.T) {
	c := newWindowChecker(3)
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	// Window 0: keys 0 and 2 produced; results after publication.
	c.publish(0, []int32{2, 0, 5})
	c.result(0, 0, 2, at(1500))
	c.result(2, 0, 5, at(1800))
	// Window 1000: results before publication (complete at the last).
	c.result(1, 1000, 4, at(2100))
	c.publish(1000, []int32{0, 4, 0})
	// Window 2000: a wrong count.
	c.publish(2000, []int32{1, 1, 1})
	c.result(0, 2000, 1, at(3500))
	c.result(1, 2000, 2, at(3500))
	c.result(2, 2000, 1, at(3500))
	// Window 3000: key 1 missing.
	c.publish(3000, []int32{1, 1, 1})
	c.result(0, 3000, 1, at(4500))
	c.result(2, 3000, 1, at(4500))
	// Window 4000: key 0 split over two panes, key 1 repeated.
	c.publish(4000, []int32{3, 1, 0})
	c.result(0, 4000, 2, at(5500))
	c.result(1, 4000, 1, at(5500))
	c.result(0, 4000, 1, at(5600))
	c.result(1, 4000, 1, at(5600))
	// Window 9000: results, nothing produced.
	c.result(0, 9000, 1, at(10500))

	rs := c.results()
	if len(rs) != 6 {
		t.Fatalf("%d windows, want 6: %+v", len(rs), rs)
	}
	want := []windowResult{
		{Start: at(0), Keys: 2, Elements: 7, Published: true, Complete: true, Skew: 800 * time.Millisecond, CompleteAt: at(1800), CoveredAt: at(1800)},
		{Start: at(1000), Keys: 1, Elements: 4, Published: true, Complete: true, Skew: 100 * time.Millisecond, CompleteAt: at(2100), CoveredAt: at(2100)},
		{Start: at(2000), Keys: 3, Elements: 3, Published: true, Wrong: 1, CoveredAt: at(3500)},
		{Start: at(3000), Keys: 3, Elements: 3, Published: true, Missing: 1},
		{Start: at(4000), Keys: 2, Elements: 4, Published: true, Wrong: 1, Duplicated: true, Split: 1, Repeated: 1, CoveredAt: at(5500)},
		{Start: at(9000), Published: false},
	}
	for i, w := range want {
		if got := rs[i]; got != w {
			t.Errorf("window %d:\n got %+v\nwant %+v", i, got, w)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.waitAll(ctx); err == nil {
		t.Error("waitAll: nil with window 3000 incomplete and 9000 unpublished")
	}
}

func TestParsePlan(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{in: "start@0s", want: "start@0s"},
		{in: "start@0s, start@20s,kill@40s", want: "start@0s,start@20s,kill@40s"},
		{in: "start@0s,start@0s,kill1@10s,start@1m", want: "start@0s,start@0s,kill1@10s,start@1m0s"},
		{in: "start@5s", err: "first step must be start@0s"},
		{in: "start@0s,kill2@5s", err: "instance 2 is not running"},
		{in: "start@0s,kill@5s,kill@6s", err: "no instance is running"},
		{in: "start@0s,kill1@5s,kill1@6s", err: "instance 1 is not running"},
		{in: "start@0s,start@10s,start@5s", err: "comes before"},
		{in: "start@0s,stop@5s", err: "unknown action"},
		{in: "start", err: "want ACTION@OFFSET"},
	} {
		plan, err := parsePlan(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parsePlan(%q) = %v, %v; want an error with %q", c.in, plan, err, c.err)
			}
			continue
		}
		var got []string
		for _, s := range plan {
			got = append(got, s.String())
		}
		if err != nil || strings.Join(got, ",") != c.want {
			t.Errorf("parsePlan(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
}
