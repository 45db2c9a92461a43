package e2e

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/periodic"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function1x2(tickPair)
	register.DoFn2x0[[]byte, int64](&countTicksFn{})
}

func tickPair(b []byte) ([]byte, int64) { return b, 1 }

// ticks counts, per token, the elements countTicksFn saw in this process's
// LOOPBACK worker.
var ticks sync.Map // token -> *atomic.Int64

type countTicksFn struct{ Token string }

func (f *countTicksFn) ProcessElement(_ []byte, _ int64) {
	n, _ := ticks.LoadOrStore(f.Token, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// TestUnboundedSourceEnds: an unbounded pipeline (periodic.Impulse, a
// splittable DoFn that checkpoints until its end time) runs every element
// and ends DONE once its source ends and every task has reported the final
// watermark. Submitted without an application_id, as Beam's own suites
// submit, it runs under one made for it, and a warning names that id.
func TestUnboundedSourceEnds(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	token := kafkatest.UniqueName(t, "ticks")
	p, s := beam.NewPipelineWithRoot()
	start := time.Now()
	imp := periodic.Impulse(s, start, start.Add(2*time.Second), 100*time.Millisecond, false)
	keyed := beam.ParDo(s, tickPair, imp)
	beam.ParDo0(s, &countTicksFn{Token: token}, keyed)
	id, err := submit(ctx, t, ksrunner, marshal(t, p), nil)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	r, err := wait(ctx, ksrunner, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job ended %v (errors %q), want DONE", r.State, r.Errors)
	}
	n, _ := ticks.Load(token)
	if n == nil || n.(*atomic.Int64).Load() != 20 {
		t.Errorf("countTicksFn saw %v elements, want 20 (2s of 100ms ticks)", n)
	}
	if !slices.ContainsFunc(r.Messages, func(m string) bool {
		return strings.Contains(m, "option application_id: not set") && strings.Contains(m, "--application_id=")
	}) {
		t.Errorf("no warning naming the application_id the job runs under; messages: %q", r.Messages)
	}
}
