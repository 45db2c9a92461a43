package runtime

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger passes the instance's Kafka client's own log to the job's
// logger: its warnings and errors (a group join that keeps failing, offsets
// it cannot fetch, a produce it keeps retrying) as such, and its info
// lines (transactions ended, sessions reset, rebalances) at debug. Its
// debug lines, several per request, are left out. While the brokers are
// out of reach its warnings and errors, one per attempt, go to debug too:
// reach reports the outage once (brokers.go).
type kgoLogger struct {
	l     *slog.Logger
	reach *reach
}

func (k kgoLogger) Level() kgo.LogLevel {
	if k.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelError
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	case kgo.LogLevelInfo:
	default:
		return
	}
	if lvl > slog.LevelDebug && k.reach.down() > 0 {
		lvl = slog.LevelDebug
	}
	k.l.Log(context.Background(), lvl, "kafka client: "+msg, keyvals...)
}
