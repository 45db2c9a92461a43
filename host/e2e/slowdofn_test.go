package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function2x0(paddedRange)
	register.Function2x0(slowLine)
	register.Function1x2(keyByNumber)
	register.Function3x0(slowGroup)
	register.Emitter1[string]()
	register.Iter1[string]()
}

// keyByNumber keys a paddedRange element by its number.
func keyByNumber(e string) (int, string) {
	n, _, _ := strings.Cut(e, " ")
	k, _ := strconv.Atoi(n)
	return k, e
}

// slowGroup takes slowStep a group.
func slowGroup(k int, values func(*string) bool, emit func(string)) {
	time.Sleep(slowStep)
	var v string
	for values(&v) {
		emit(fmt.Sprintf("group %d", k))
	}
}

// paddedRange emits n elements of about 1 KiB, so that a packed record of
// an internal topic holds about 60 of them.
func paddedRange(n int, emit func(string)) {
	pad := strings.Repeat(".", 1000)
	for i := range n {
		emit(fmt.Sprintf("%d %s", i, pad))
	}
}

// slowLine takes slowStep an element, as a DoFn that calls an outside
// service does.
func slowLine(e string, emit func(string)) {
	time.Sleep(slowStep)
	n, _, _ := strings.Cut(e, " ")
	emit("element " + n)
}

// TestSlowDoFn: a DoFn of 2 ms an element reads elements from a topic (a
// Reshuffle's), in one task: 3,000 on the embedded broker, 6 s of work,
// more than the job's transaction_timeout_ms (4000); 8,000 on Kafka, 16 s,
// since Kafka looks for timed-out transactions every 10 s
// (transaction.abort.timed.out.transaction.cleanup.interval.ms). A cycle
// that took them all could not commit (the broker aborts its transaction:
// the job failed with INVALID_PRODUCER_EPOCH); the instance sizes its
// cycles by how long the ones before took (cycleBound), so each commits in
// time, and the output holds every element once.
func TestSlowDoFn(t *testing.T) {
	checkSlow(t, "slowdofn", func(s beam.Scope, n int) beam.PCollection {
		elements := beam.Reshuffle(s, beam.ParDo(s, paddedRange, beam.Create(s, n)))
		return beam.ParDo(s, slowLine, elements)
	}, "element %d")
}

// TestSlowDoFnAfterGroupByKey: a DoFn of 2 ms a group reads the groups of
// a GroupByKey over 3,000 keys (8,000 on Kafka), all due at once when the
// input ends, in one task, with a 4 s transaction_timeout_ms. A GroupByKey
// fired up to 100,000 stored groups a cycle, so that cycle outlived the
// timeout (the job failed, or on kfake, whose timeout checks come late,
// went on past the warning); the instance bounds the stored groups a task
// fires in a cycle by how long the firing cycles before took (fireBound),
// from 1,000 at first, so each commits in time. The trigger puts the
// GroupByKey on the windowed path, whose groups are all stored: on the
// fast path the groups whose values all came in the firing cycle fire
// from memory, bounded by the cycle's input instead (cycleBound).
func TestSlowDoFnAfterGroupByKey(t *testing.T) {
	checkSlow(t, "slowgbk", func(s beam.Scope, n int) beam.PCollection {
		kvs := beam.ParDo(s, keyByNumber, beam.ParDo(s, paddedRange, beam.Create(s, n)))
		kvs = beam.WindowInto(s, window.NewGlobalWindows(), kvs, beam.Trigger(trigger.AfterEndOfWindow()))
		return beam.ParDo(s, slowGroup, beam.GroupByKey(s, kvs))
	}, "group %d")
}

// checkSlow runs, on the embedded broker and on Kafka, a job of one task
// whose lines (made by lines from n elements, n = 3,000 and 8,000) take 2
// ms each, with a 4 s transaction_timeout_ms, and checks that it writes
// the lines of format for 0..n-1 once each and that no step of a commit
// cycle lasted the timeout (the cycle watch's warning, runtime/cyclewatch.go).
func checkSlow(t *testing.T, name string, lines func(s beam.Scope, n int) beam.PCollection, format string) {
	for _, b := range []broker{{"embedded", ""}, {"kafkatest", kafkatest.Broker(t)}} {
		t.Run(b.name, func(t *testing.T) {
			n := 3000
			if b.bootstrap != "" {
				n = 8000
			}
			ctx := testContext(t, 3*time.Minute)
			opts := map[string]string{"transaction_timeout_ms": "4000", "internal_parallelism": "1"}
			if b.bootstrap != "" {
				opts["bootstrap_servers"] = b.bootstrap
				opts["application_id"] = kafkatest.UniqueName(t, name)
			}
			out := filepath.Join(t.TempDir(), "out.txt")
			p, s := beam.NewPipelineWithRoot()
			textio.Write(s, out, lines(s, n))
			_, r := runEnded(ctx, t, ksrunner, marshal(t, p), opts, jobpb.JobState_DONE)
			for _, m := range r.Messages {
				if strings.Contains(m, "the instance's commit cycle has been") {
					t.Errorf("a cycle outlived the transaction timeout: %s", m)
				}
			}
			text, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("reading the output: %v", err)
			}
			want := make([]string, n)
			for i := range want {
				want[i] = fmt.Sprintf(format, i)
			}
			diffLines(t, sortedLines(string(text)), sortedLines(strings.Join(want, "\n")))
		})
	}
}
