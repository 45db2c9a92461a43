package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestBenchKafka runs `bench kafka` tiny, every variant and both phases, on
// the test broker: each run checks its output topic exactly (read_committed,
// every record once with its mapped value) and fails otherwise, so this
// fails when any variant loses, duplicates or mis-maps a record. The job
// server's log shows that the wasm variant's map ran as a WASM stage (the
// harness would map the same).
func TestBenchKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder
	var log lockedBuffer
	cfg := benchKafkaConfig{
		Records: 2000, Partitions: 4, ValueBytes: 100, Rate: 20_000, CommitMs: 50,
		Variants: []string{variantCopy, variantWASM, variantHarness}, Timeout: 2 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	}
	res, err := benchKafka(ctx, cfg, kafkatest.Broker(t), &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results, want 3", len(res))
	}
	for _, r := range res {
		if r.RatePerSec <= 0 || r.P50 < 0 || r.P99 < r.P50 || r.Max < r.P99 {
			t.Errorf("%s: implausible figures %+v", r.Variant, r)
		}
	}
	for _, want := range []string{"wasm/copy ratio", "harness/copy ratio", "p99"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if want := "executor WASM, module benchmap.wasm"; !strings.Contains(log.String(), want) {
		t.Errorf("the job server's log lacks %q: the wasm variant's map did not run as a WASM stage; log:\n%s", want, log.String())
	}
}

// lockedBuffer is an io.Writer for a logger of several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBenchKafkaWASMBacklog runs the wasm variant over a backlog big enough
// that the WASM executor reuses its output chunk while records of the last
// one are still being produced: the Kafka sink must not alias the chunk
// (it did: records came out twice, with others' bytes, and others never).
func TestBenchKafkaWASMBacklog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder
	cfg := benchKafkaConfig{
		Records: 100_000, Partitions: 8, ValueBytes: 100, CommitMs: 100,
		Variants: []string{variantWASM}, Timeout: 2 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if _, err := benchKafka(ctx, cfg, kafkatest.Broker(t), &out); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
}

// The output reader's check accepts exactly record seq's value, mapped or
// not.
func TestBenchKafkaIsValue(t *testing.T) {
	v := benchValue(1234567, 100)
	_, upper := upperValue(nil, v)
	other := benchValue(1234568, 100)
	short := v[:99]
	for _, c := range []struct {
		name   string
		v      []byte
		mapped bool
		want   bool
	}{
		{"input", v, false, true},
		{"mapped", upper, true, true},
		{"unmapped as mapped", v, true, false},
		{"mapped as unmapped", upper, false, false},
		{"another record", other, false, false},
		{"short", short, false, false},
	} {
		if got := isValue(c.v, 1234567, 100, c.mapped); got != c.want {
			t.Errorf("%s: isValue = %v, want %v", c.name, got, c.want)
		}
	}
	if got := parseKey(benchKey(1234567)); got != 1234567 {
		t.Errorf("parseKey(benchKey(1234567)) = %d", got)
	}
}
