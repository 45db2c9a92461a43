package harness_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ksrunner/ksrunner/harness"
)

// BenchmarkBundleThroughput pushes 1M small elements per iteration through
// an identity ParDo on a LOOPBACK worker, in batches of about 256KiB, and
// reports elements/s.
func BenchmarkBundleThroughput(b *testing.B) {
	const elements = 1_000_000
	const perBatch = 10_000
	h := startHarnessEnv(b, harness.Config{}, loopbackEnv(b))
	spec := buildStage(b, echoFn, 1)
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		b.Fatalf("Stage: %v", err)
	}
	// Pre-encode the input: the benchmark measures the harness and the SDK,
	// not the test's encoder.
	var batches [][]byte
	var inputBytes int64
	for i := 0; i < elements; i += perBatch {
		elems := make([][]byte, perBatch)
		for j := range elems {
			elems[j] = fmt.Appendf(nil, "e%07d", i+j)
		}
		batch := encodeElements(b, elems...)
		batches = append(batches, batch)
		inputBytes += int64(len(batch))
	}
	b.SetBytes(inputBytes)
	b.ResetTimer()
	for b.Loop() {
		var outputBytes atomic.Int64
		bundle, err := stage.StartBundle(ctx, func(_ string, data []byte) error {
			outputBytes.Add(int64(len(data)))
			return nil
		})
		if err != nil {
			b.Fatalf("StartBundle: %v", err)
		}
		for _, batch := range batches {
			if err := bundle.Process(batch); err != nil {
				b.Fatalf("Process: %v", err)
			}
		}
		if _, err := bundle.Finish(); err != nil {
			b.Fatalf("Finish: %v", err)
		}
		// The identity re-encodes every element exactly as it came in.
		if got := outputBytes.Load(); got != inputBytes {
			b.Fatalf("output %d bytes, want %d", got, inputBytes)
		}
	}
	b.ReportMetric(float64(elements)*float64(b.N)/b.Elapsed().Seconds(), "elements/s")
}
