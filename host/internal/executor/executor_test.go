package executor

import (
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/ksrunner/ksrunner/harness"
)

// A harness residual's output watermark estimate is the least over its
// outputs, clamped to Beam's timestamps; without estimates it has none.
func TestHarnessResidual(t *testing.T) {
	for _, tc := range []struct {
		name      string
		marks     map[string]time.Time
		want      int64
		estimated bool
	}{
		{"none", nil, 0, false},
		{"least over outputs", map[string]time.Time{"a": time.UnixMilli(7000), "b": time.UnixMilli(3000)}, 3000, true},
		{"past the end of time", map[string]time.Time{"a": mtime.MaxTimestamp.ToTime().Add(time.Hour)}, int64(mtime.MaxTimestamp), true},
		{"before the start of time", map[string]time.Time{"a": time.Date(-300000, 1, 1, 0, 0, 0, 0, time.UTC)}, int64(mtime.MinTimestamp), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := harnessResidual(harness.Residual{Element: []byte("e"), Delay: time.Second, OutputWatermarks: tc.marks})
			if string(r.Element) != "e" || r.Delay != time.Second || r.Estimated != tc.estimated || r.OutputWatermark != tc.want {
				t.Errorf("%+v, want element e, delay 1s, output watermark %d (estimated %v)", r, tc.want, tc.estimated)
			}
		})
	}
}
