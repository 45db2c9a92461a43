package task

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/shuffle"
)

// A stage whose bundles keep returning residuals (a splittable DoFn that
// self-checkpoints) holds its commit cycle in PrepareCommit, which
// re-processes residuals until none is left: once that has gone on for
// residualWarnAfter, the task says why the cycle does not commit (Beam's
// test_register_finalizations otherwise showed nothing until the broker
// fenced the transaction). Every residual is processed once more, in the
// same cycle.
func TestResidualRoundsWarn(t *testing.T) {
	te, tk, in, f, clock := bundleTimeTask(t, time.Hour)
	// PrepareCommit logs from the test's goroutine.
	var log bytes.Buffer
	te.env.Logger = slog.New(slog.NewTextHandler(&log, nil))
	const rounds = 6
	var mu sync.Mutex
	var last []byte // the element of the bundle being finished
	f.each = func(_ *fakeBundle, in shuffle.WindowedValue) error {
		mu.Lock()
		defer mu.Unlock()
		last = append([]byte(nil), in.Raw...)
		return nil
	}
	f.finish = func() (executor.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		clock.advance(residualWarnAfter / 4)
		if f.finished > rounds {
			return executor.Result{}, nil
		}
		return executor.Result{Residuals: [][]byte{last}}, nil
	}
	ctx := context.Background()
	if err := tk.Handle(ctx, elems(in, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(bundleIDs(t, f)); got != rounds+1 {
		t.Errorf("%d bundles, want %d (the element, then a residual after each of %d checkpoints)", got, rounds+1, rounds)
	}
	if n := strings.Count(log.String(), "a splittable DoFn keeps checkpointing"); n != 1 {
		t.Errorf("%d warnings, want 1 in the cycle; log:\n%s", n, log.String())
	}
}
