package runtime

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger passes the instance's Kafka client's own log to the job's
// logger: its warnings and errors (a group join that keeps failing, offsets
// it cannot fetch, a produce it keeps retrying) as such, and its info
// lines (transactions ended, sessions reset, rebalances) at debug. Its
// debug lines, several per request, are left out. While the brokers are
// out of reach its warnings and errors, one per attempt, go to debug too:
// reach reports the outage once (brokers.go).
//
// One info line is a signal as well: the client's GroupTransactSession.End
// says so when the broker answered its commit UNKNOWN_SERVER_ERROR and it
// aborted anew, after which End reports an abort, not an error, although
// the commit may have happened (franz-go has no other way to tell).
// unconfirmed is set then (endTransaction).
type kgoLogger struct {
	l           *slog.Logger
	reach       *reach
	unconfirmed *atomic.Bool // nil: not watched
}

// unconfirmedCommitLog starts the line franz-go (kgo txn.go) logs when a
// session's commit got UNKNOWN_SERVER_ERROR and it retries as an abort.
const unconfirmedCommitLog = "end transaction returned an unknown server error"

func (k kgoLogger) Level() kgo.LogLevel {
	if k.unconfirmed != nil || k.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if k.unconfirmed != nil && level == kgo.LogLevelInfo && strings.HasPrefix(msg, unconfirmedCommitLog) {
		k.unconfirmed.Store(true)
	}
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
