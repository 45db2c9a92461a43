package runtime

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKgoLogger: the client's warnings and errors keep their level, its
// info goes to debug and its debug nowhere; while the brokers are out of
// reach, its warnings and errors go to debug.
func TestKgoLogger(t *testing.T) {
	for _, tc := range []struct {
		level  kgo.LogLevel
		down   bool
		want   string // slog level in the line, "" for none
		logged slog.Level
	}{
		{kgo.LogLevelError, false, "level=ERROR", slog.LevelInfo},
		{kgo.LogLevelWarn, false, "level=WARN", slog.LevelInfo},
		{kgo.LogLevelInfo, false, "", slog.LevelInfo},
		{kgo.LogLevelInfo, false, "level=DEBUG", slog.LevelDebug},
		{kgo.LogLevelDebug, false, "", slog.LevelDebug},
		{kgo.LogLevelError, true, "", slog.LevelInfo},
		{kgo.LogLevelError, true, "level=DEBUG", slog.LevelDebug},
	} {
		var b bytes.Buffer
		l := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: tc.logged}))
		r := newReach(Config{BootstrapServers: "a:1", Logger: l})
		r.observe("a:1", nil)
		if tc.down {
			r.observe("a:1", errors.New("unable to dial"))
		}
		k := kgoLogger{l: l, reach: r}
		if k.Level() < tc.level {
			// kgo does not call Log above Level.
		} else {
			k.Log(tc.level, "something", "broker", 1)
		}
		got := b.String()
		if tc.want == "" && got != "" || tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, `msg="kafka client: something" broker=1`)) {
			t.Errorf("kgo level %v, down %v, handler at %v: logged %q, want %q", tc.level, tc.down, tc.logged, got, tc.want)
		}
	}
}
