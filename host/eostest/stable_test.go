package eostest

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function1x1(tagRandomly)
	register.Function1x0(recordTag)
}

// tagRandomly tags i with a random number: a producer that computes
// something else each time it runs again.
func tagRandomly(i int) string { return strconv.Itoa(i) + ":" + strconv.FormatUint(rand.Uint64(), 36) }

// tagsSeen records, per element, the tags recordTag was called with and how
// many times (the DoFns run in this process, LOOPBACK).
var tagsSeen struct {
	sync.Mutex
	tags  map[int]map[string]bool
	calls int
}

func recordTag(s string) {
	i, err := strconv.Atoi(s[:strings.IndexByte(s, ':')])
	if err != nil {
		panic(err)
	}
	tagsSeen.Lock()
	defer tagsSeen.Unlock()
	if tagsSeen.tags[i] == nil {
		tagsSeen.tags[i] = map[string]bool{}
	}
	tagsSeen.tags[i][s] = true
	tagsSeen.calls++
}

// TestStableInputUnderAbortedCycles runs 0..n-1 → tagRandomly → recordTag
// with commit cycles aborted after recordTag ran. When recordTag requires stable
// input, every retry of its bundles sees the tags of the first attempt: one
// tag per element however often it is called. Without it, recordTag is
// fused with tagRandomly and a retry re-tags: the control run shows that the
// aborts do make elements be processed again with other tags.
func TestStableInputUnderAbortedCycles(t *testing.T) {
	for _, stable := range []bool{true, false} {
		t.Run("stable="+strconv.FormatBool(stable), func(t *testing.T) {
			const n = 20_000
			tagsSeen.Lock()
			tagsSeen.tags, tagsSeen.calls = map[int]map[string]bool{}, 0
			tagsSeen.Unlock()

			p, s := beam.NewPipelineWithRoot()
			in := make([]int, n)
			for i := range in {
				in[i] = i
			}
			beam.ParDo0(s, recordTag, beam.ParDo(s, tagRandomly, beam.CreateList(s, in)))
			pipe := env.Marshal(t, p)
			if stable {
				if err := pipelinetest.RequireStableInput(pipe, "recordTag"); err != nil {
					t.Fatal(err)
				}
			}
			aborted := abortCyclesThatCall(t, func() int {
				tagsSeen.Lock()
				defer tagsSeen.Unlock()
				return tagsSeen.calls
			})
			runDone(t, pipe, map[string]string{"commit_interval_ms": "20"})
			tagsSeen.Lock()
			defer tagsSeen.Unlock()
			retagged := 0
			for _, tags := range tagsSeen.tags {
				if len(tags) > 1 {
					retagged++
				}
			}
			t.Logf("%d cycles aborted; recordTag called %d times for %d elements; %d elements seen with more than one tag",
				aborted(), tagsSeen.calls, len(tagsSeen.tags), retagged)
			if len(tagsSeen.tags) != n {
				t.Errorf("recordTag saw %d elements, want %d", len(tagsSeen.tags), n)
			}
			switch {
			case stable && tagsSeen.calls == n:
				t.Errorf("recordTag was called once per element: no bundle of it was retried, the test shows nothing")
			case stable && retagged > 0:
				t.Errorf("with stable input, %d elements reached recordTag with different tags", retagged)
			case !stable && retagged == 0:
				t.Errorf("without stable input no element was re-tagged: the aborts did not make the producer run again")
			}
		})
	}
}

// abortCyclesThatCall aborts the first three commit cycles in which a DoFn
// was called, calls counting its calls. Unlike abortCycles it cannot spend
// its aborts before the records reach the DoFn (on a real broker the first
// cycles often carry only the work before it).
func abortCyclesThatCall(t *testing.T, calls func() int) (aborted func() int) {
	var mu sync.Mutex
	aborts, last := 0, 0
	restore := hooks.Set(host.TestHooks{BeforeCommit: func(int) error {
		n := calls()
		mu.Lock()
		defer mu.Unlock()
		called := n > last
		last = n
		if called && aborts < 3 {
			aborts++
			return host.ErrAbortCycle
		}
		return nil
	}})
	t.Cleanup(restore)
	return func() int { mu.Lock(); defer mu.Unlock(); return aborts }
}
