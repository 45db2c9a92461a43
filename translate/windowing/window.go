package windowing

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
)

// Window is a Beam window: the global window or an interval window
// [Start, End). It is comparable and usable as a map key.
//
// Invariant: for the global window Start and End are zero; for an interval
// window Start < End (windows with End <= Start are rejected by the
// constructors' callers; the window fns never make them).
type Window struct {
	Start, End mtime.Time
	global     bool
}

// GlobalWindow returns the global window.
func GlobalWindow() Window { return Window{global: true} }

// IntervalWindow returns the window [start, end).
func IntervalWindow(start, end mtime.Time) Window { return Window{Start: start, End: end} }

// IsGlobal reports whether w is the global window.
func (w Window) IsGlobal() bool { return w.global }

// MaxTimestamp is the largest timestamp in the window: End-1 for an interval
// window, the end of the global window for the global window.
func (w Window) MaxTimestamp() mtime.Time {
	if w.global {
		return mtime.EndOfGlobalWindowTime
	}
	return w.End - 1
}

// Intersects reports whether two interval windows overlap. Adjacent windows
// ([a,b) and [b,c)) do not intersect, as in Beam's IntervalWindow.
func (w Window) Intersects(o Window) bool {
	if w.global || o.global {
		return w.global && o.global
	}
	return w.Start < o.End && o.Start < w.End
}

// Span returns the smallest interval window containing both interval windows.
func (w Window) Span(o Window) Window {
	return IntervalWindow(min(w.Start, o.Start), max(w.End, o.End))
}

func (w Window) String() string {
	if w.global {
		return "[*]"
	}
	return fmt.Sprintf("[%d,%d)", int64(w.Start), int64(w.End))
}

// Typex returns the Go SDK representation of the window.
func (w Window) Typex() typex.Window {
	if w.global {
		return window.GlobalWindow{}
	}
	return window.IntervalWindow{Start: w.Start, End: w.End}
}

// FromTypex converts a Go SDK window.
func FromTypex(w typex.Window) (Window, error) {
	switch w := w.(type) {
	case window.GlobalWindow:
		return GlobalWindow(), nil
	case window.IntervalWindow:
		return IntervalWindow(w.Start, w.End), nil
	default:
		return Window{}, fmt.Errorf("windowing: unsupported window type %T", w)
	}
}

// Window coder URNs (beam_runner_api.proto StandardCoders).
const (
	URNGlobalWindowCoder   = "beam:coder:global_window:v1"
	URNIntervalWindowCoder = "beam:coder:interval_window:v1"
)

// ErrUnsupportedWindowCoder is returned (wrapped) for a window coder the
// host cannot decode itself; the host falls back to the SDK harness.
var ErrUnsupportedWindowCoder = errors.New("unsupported window coder")

// WindowCoder encodes and decodes windows in Beam's global_window /
// interval_window encodings, via the Go SDK's exec window coders:
// the global window encodes to no bytes; an interval window to its end as a
// big-endian timestamp (millis shifted by 2^63) followed by the varint
// duration end-start.
type WindowCoder struct {
	wc  *coder.WindowCoder
	enc exec.WindowEncoder
	dec exec.WindowDecoder
}

// NewWindowCoder returns the coder for a window coder URN.
func NewWindowCoder(urn string) (*WindowCoder, error) {
	var wc *coder.WindowCoder
	switch urn {
	case URNGlobalWindowCoder:
		wc = coder.NewGlobalWindow()
	case URNIntervalWindowCoder:
		wc = coder.NewIntervalWindow()
	default:
		return nil, fmt.Errorf("windowing: window coder %q: %w", urn, ErrUnsupportedWindowCoder)
	}
	return &WindowCoder{wc: wc, enc: exec.MakeWindowEncoder(wc), dec: exec.MakeWindowDecoder(wc)}, nil
}

// SDK returns the Go SDK window coder, for exec's windowed value coders.
func (c *WindowCoder) SDK() *coder.WindowCoder { return c.wc }

// Encode encodes one window.
func (c *WindowCoder) Encode(w Window) ([]byte, error) {
	if w.global != (c.wc.Kind == coder.GlobalWindow) {
		return nil, fmt.Errorf("windowing: cannot encode window %v with the %v coder", w, c.wc)
	}
	var buf bytes.Buffer
	if err := c.enc.EncodeSingle(w.Typex(), &buf); err != nil {
		return nil, fmt.Errorf("windowing: encoding window %v: %w", w, err)
	}
	return buf.Bytes(), nil
}

// Decode decodes one window, rejecting trailing bytes.
func (c *WindowCoder) Decode(b []byte) (Window, error) {
	r := bytes.NewReader(b)
	tw, err := c.dec.DecodeSingle(r)
	if err != nil {
		return Window{}, fmt.Errorf("windowing: decoding %v window: %w", c.wc, err)
	}
	if r.Len() != 0 {
		return Window{}, fmt.Errorf("windowing: decoding %v window: %d trailing bytes", c.wc, r.Len())
	}
	return FromTypex(tw)
}

// EncodePane encodes pane info in Beam's windowed value pane encoding.
func EncodePane(p PaneInfo) ([]byte, error) {
	var buf bytes.Buffer
	if err := coder.EncodePane(p, &buf); err != nil {
		return nil, fmt.Errorf("windowing: encoding pane %+v: %w", p, err)
	}
	return buf.Bytes(), nil
}

// DecodePane decodes pane info, rejecting trailing bytes.
func DecodePane(b []byte) (PaneInfo, error) {
	r := bytes.NewReader(b)
	p, err := coder.DecodePane(r)
	if err != nil {
		return PaneInfo{}, fmt.Errorf("windowing: decoding pane: %w", err)
	}
	if r.Len() != 0 {
		return PaneInfo{}, fmt.Errorf("windowing: decoding pane: %d trailing bytes", r.Len())
	}
	return p, nil
}
