package host

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestWorkerGivesUpOnBrokers: a worker whose brokers cannot be reached
// fails after its broker_unavailable_timeout_ms, with an error naming the
// brokers and the option (its pipeline-topic reads are bounded by it, not
// by franz-go's 30 s retry limit); a timeout under a second is refused.
func TestWorkerGivesUpOnBrokers(t *testing.T) {
	// A port that refuses connections: one just listened on and closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := NewWorker(WorkerConfig{ApplicationID: "a", BootstrapServers: addr, BrokerUnavailableTimeout: 10 * time.Millisecond, Logger: logger}); err == nil ||
		!strings.Contains(err.Error(), "option broker_unavailable_timeout_ms: 10, must be at least 1000") {
		t.Errorf("NewWorker with a 10 ms broker_unavailable_timeout: %v, want an error naming the option", err)
	}
	w, err := NewWorker(WorkerConfig{ApplicationID: "a", BootstrapServers: addr, BrokerUnavailableTimeout: 2 * time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = w.Run(ctx)
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("Run still ran 20s without its brokers (broker_unavailable_timeout_ms 2000); it returned %v", err)
	}
	for _, want := range []string{"Kafka brokers " + addr, "broker_unavailable_timeout_ms 2000", "pipeline topic __beam_a_pipeline"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run: %v, want an error that says %q", err, want)
		}
	}
	if took < 2*time.Second {
		t.Errorf("Run gave up after %v, before broker_unavailable_timeout_ms", took)
	}
	t.Logf("Run gave up after %v: %v", took.Round(time.Millisecond), err)
}
