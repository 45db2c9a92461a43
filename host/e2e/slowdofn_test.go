package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function2x0(paddedRange)
	register.Function2x0(slowLine)
	register.Emitter1[string]()
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
	for _, b := range []broker{{"embedded", ""}, {"kafkatest", kafkatest.Broker(t)}} {
		t.Run(b.name, func(t *testing.T) {
			slowElements := 3000
			if b.bootstrap != "" {
				slowElements = 8000
			}
			ctx := testContext(t, 3*time.Minute)
			opts := map[string]string{"transaction_timeout_ms": "4000", "internal_parallelism": "1"}
			if b.bootstrap != "" {
				opts["bootstrap_servers"] = b.bootstrap
				opts["application_id"] = kafkatest.UniqueName(t, "slowdofn")
			}
			got := runToLines(ctx, t, ksrunner, func(out string) *beam.Pipeline {
				p, s := beam.NewPipelineWithRoot()
				elements := beam.Reshuffle(s, beam.ParDo(s, paddedRange, beam.Create(s, slowElements)))
				textio.Write(s, out, beam.ParDo(s, slowLine, elements))
				return p
			}, opts)
			want := make([]string, slowElements)
			for i := range want {
				want[i] = fmt.Sprintf("element %d", i)
			}
			diffLines(t, got, sortedLines(strings.Join(want, "\n")))
		})
	}
}
