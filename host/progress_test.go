package host

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/runtime"
)

// A progress line says the elements, the watermark as a time (and how many
// tasks reported it, until all did) and the Kafka reads' lag, each once.
func TestProgressLine(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 250e6, time.UTC).UnixMilli()
	for _, c := range []struct {
		s    runtime.StatsSnapshot
		want string
	}{
		{runtime.StatsSnapshot{Elements: 10}, `msg="job progress" elements=10 elapsed=12s watermark="none reported yet"`},
		{runtime.StatsSnapshot{Elements: 10, Watermark: at, Reported: 2, Tasks: 3},
			`msg="job progress" elements=10 elapsed=12s watermark=2026-12-03T10:00:00.250Z watermark_tasks="2 of 3"`},
		{runtime.StatsSnapshot{Elements: 7, Watermark: at, Reported: 3, Tasks: 3, SourceLag: 42, SourcePartitions: 4},
			`msg="job progress" elements=7 elapsed=12s watermark=2026-12-03T10:00:00.250Z source_lag=42 source_partitions=4`},
		{runtime.StatsSnapshot{Elements: 7, Watermark: int64(^uint64(0) >> 1), Reported: 3, Tasks: 3},
			`watermark=+inf`},
	} {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("job progress", progressAttrs(c.s, 12300*time.Millisecond)...)
		if !strings.Contains(buf.String(), c.want) {
			t.Errorf("%+v: %s, want %s", c.s, buf.String(), c.want)
		}
	}
}
