package host

import (
	"context"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/harness"
)

// stageExecutor is the seam between the host and an executor of user code
// (the Fn API harness or wasmabi). The host hands a bundle batches of encoded
// windowed values of the stage's input and receives, through emit, chunks of
// encoded windowed values per output PCollection. Neither side knows about
// Kafka.
type stageExecutor interface {
	// startBundle opens a bundle. emit must not block on the executor: the
	// host only buffers or produces to Kafka in it.
	startBundle(ctx context.Context, emit func(pcoll string, data []byte) error, io bundleIO) (stageBundle, error)
}

// bundleIO is what a bundle reads and writes besides its data: state (side
// inputs, user state) and, for stateful stages, the timers it sets.
type bundleIO struct {
	state  harness.StateHandler // nil: none
	timers func(transformID, familyID string, data []byte) error
}

type stageBundle interface {
	process(data []byte) error
	// processTimers delivers fired timers (encoded in the family's timer
	// coder) to a stateful transform of the stage.
	processTimers(transformID, familyID string, data []byte) error
	finish() (bundleResult, error)
}

type bundleResult struct {
	// residuals are encoded windowed values of the stage's input to process
	// again (splittable DoFn checkpoints).
	residuals [][]byte
	metrics   []*pipepb.MonitoringInfo
	// finalize, when set, is called once the bundle's output and state are
	// committed (Beam's bundle finalization).
	finalize func(context.Context) error
}

type harnessExecutor struct {
	stage *harness.Stage
}

func (e harnessExecutor) startBundle(ctx context.Context, emit func(string, []byte) error, io bundleIO) (stageBundle, error) {
	var opts []harness.BundleOption
	if io.state != nil {
		opts = append(opts, harness.WithStateHandler(io.state))
	}
	if io.timers != nil {
		opts = append(opts, harness.WithTimerOutput(io.timers))
	}
	b, err := e.stage.StartBundle(ctx, emit, opts...)
	if err != nil {
		return nil, err
	}
	return harnessBundle{b}, nil
}

type harnessBundle struct{ b *harness.Bundle }

func (b harnessBundle) process(data []byte) error { return b.b.Process(data) }

func (b harnessBundle) processTimers(transformID, familyID string, data []byte) error {
	return b.b.ProcessTimers(transformID, familyID, data)
}

func (b harnessBundle) finish() (bundleResult, error) {
	res, err := b.b.Finish()
	if err != nil {
		return bundleResult{}, err
	}
	out := bundleResult{metrics: res.MonitoringInfos}
	if res.RequiresFinalization {
		out.finalize = b.b.Finalize
	}
	for _, r := range res.Residuals {
		out.residuals = append(out.residuals, r.Element)
	}
	return out, nil
}
