// Package wire locates the parts of Beam windowed values in a byte stream
// without decoding the elements: the event timestamp, the encoded windows, the
// encoded pane and the element bytes. It understands the standard coders that
// the translate package guarantees on every PCollection crossing the host
// boundary (bytes, string_utf8, varint, double, bool, kv, iterable,
// length_prefix, global and interval windows, windowed_value); all primitive
// encodings are read with the Beam Go SDK's coder helpers.
package wire

import (
	"errors"
	"fmt"
	"io"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Standard coder URNs (beam_runner_api.proto, StandardCoders).
const (
	urnBytes          = "beam:coder:bytes:v1"
	urnStringUTF8     = "beam:coder:string_utf8:v1"
	urnVarInt         = "beam:coder:varint:v1"
	urnDouble         = "beam:coder:double:v1"
	urnBool           = "beam:coder:bool:v1"
	urnKV             = "beam:coder:kv:v1"
	urnIterable       = "beam:coder:iterable:v1"
	urnLengthPrefix   = "beam:coder:length_prefix:v1"
	urnGlobalWindow   = "beam:coder:global_window:v1"
	urnIntervalWindow = "beam:coder:interval_window:v1"
	urnWindowedValue  = "beam:coder:windowed_value:v1"
)

// Value is the location of one windowed value in a buffer: the timestamp is
// b[Start:Start+8], the windows b[Start+8:Pane], the pane b[Pane:Elem] and
// the element b[Elem:End].
type Value struct {
	Timestamp typex.EventTime // milliseconds since the Unix epoch
	Start     int
	Pane      int
	Elem      int
	End       int
}

// Header is the encoded header (timestamp, windows, pane) of v in b.
func (v *Value) Header(b []byte) []byte { return b[v.Start:v.Elem] }

// Scanner splits a stream of concatenated windowed values of one
// windowed_value coder. It is immutable and safe for concurrent use.
type Scanner struct {
	window skipFn // skips one window
	elem   skipFn // skips one element
}

// skipFn advances r past one encoded value.
type skipFn func(r *Reader) error

// NewScanner returns a scanner for the windowed_value coder with the given id
// in coders.
func NewScanner(coders map[string]*pipepb.Coder, windowedValueCoder string) (*Scanner, error) {
	c, ok := coders[windowedValueCoder]
	if !ok {
		return nil, fmt.Errorf("coder %q not found", windowedValueCoder)
	}
	if urn := c.GetSpec().GetUrn(); urn != urnWindowedValue {
		return nil, fmt.Errorf("coder %q is %s, want %s", windowedValueCoder, urn, urnWindowedValue)
	}
	if len(c.GetComponentCoderIds()) != 2 {
		return nil, fmt.Errorf("coder %q: windowed_value needs 2 components, has %d", windowedValueCoder, len(c.GetComponentCoderIds()))
	}
	b := builder{coders: coders}
	elem, err := b.skipper(c.ComponentCoderIds[0], 0)
	if err != nil {
		return nil, err
	}
	wid := c.ComponentCoderIds[1]
	var window skipFn
	switch wc := coders[wid]; wc.GetSpec().GetUrn() {
	case urnGlobalWindow:
		window = skipNothing
	case urnIntervalWindow:
		window = skipIntervalWindow
	default:
		return nil, fmt.Errorf("coder %q: window coder %q (%s) is neither global nor interval", windowedValueCoder, wid, wc.GetSpec().GetUrn())
	}
	return &Scanner{window: window, elem: elem}, nil
}

// Next locates the windowed value that starts at b[off:].
func (s *Scanner) Next(b []byte, off int) (Value, error) {
	r := Reader{b: b, off: off}
	v := Value{Start: off}
	var err error
	if v.Timestamp, err = coder.DecodeEventTime(&r); err != nil {
		return v, fmt.Errorf("timestamp at offset %d: %w", off, err)
	}
	n, err := coder.DecodeInt32(&r)
	if err != nil {
		return v, fmt.Errorf("window count at offset %d: %w", off, err)
	}
	if n < 0 {
		return v, fmt.Errorf("window count at offset %d: %d", off, n)
	}
	for ; n > 0; n-- {
		if err := s.window(&r); err != nil {
			return v, fmt.Errorf("window at offset %d: %w", r.off, err)
		}
	}
	v.Pane = r.off
	if _, err := coder.DecodePane(&r); err != nil {
		return v, fmt.Errorf("pane at offset %d: %w", v.Pane, err)
	}
	v.Elem = r.off
	if err := s.elem(&r); err != nil {
		return v, fmt.Errorf("element at offset %d: %w", v.Elem, err)
	}
	v.End = r.off
	return v, nil
}

// Reader reads a byte slice; it is the io.Reader handed to the Beam coder
// helpers. A short read is io.ErrUnexpectedEOF: values never end early.
type Reader struct {
	b   []byte
	off int
}

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (r *Reader) skip(n int64) error {
	if n < 0 || n > int64(len(r.b)-r.off) {
		return fmt.Errorf("length %d exceeds the %d bytes left", n, len(r.b)-r.off)
	}
	r.off += int(n)
	return nil
}

func skipNothing(*Reader) error { return nil }

func skipLengthPrefixed(r *Reader) error {
	n, err := coder.DecodeVarInt(r)
	if err != nil {
		return err
	}
	return r.skip(n)
}

func skipVarInt(r *Reader) error {
	_, err := coder.DecodeVarInt(r)
	return err
}

func skipIntervalWindow(r *Reader) error {
	// End timestamp, then the span as a varint.
	if _, err := coder.DecodeEventTime(r); err != nil {
		return err
	}
	_, err := coder.DecodeVarUint64(r)
	return err
}

func skipFixed(n int64) skipFn { return func(r *Reader) error { return r.skip(n) } }

type builder struct {
	coders map[string]*pipepb.Coder
}

// maxDepth bounds coder nesting (and cycles in a malformed proto).
const maxDepth = 32

func (b *builder) skipper(id string, depth int) (skipFn, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("coder %q: nested deeper than %d", id, maxDepth)
	}
	c, ok := b.coders[id]
	if !ok {
		return nil, fmt.Errorf("coder %q not found", id)
	}
	comps := c.GetComponentCoderIds()
	need := func(n int) error {
		if len(comps) != n {
			return fmt.Errorf("coder %q (%s): want %d components, have %d", id, c.GetSpec().GetUrn(), n, len(comps))
		}
		return nil
	}
	switch urn := c.GetSpec().GetUrn(); urn {
	case urnBytes, urnStringUTF8, urnLengthPrefix:
		return skipLengthPrefixed, nil
	case urnVarInt:
		return skipVarInt, nil
	case urnDouble:
		return skipFixed(8), nil
	case urnBool:
		return skipFixed(1), nil
	case urnGlobalWindow:
		return skipNothing, nil
	case urnIntervalWindow:
		return skipIntervalWindow, nil
	case urnKV:
		if err := need(2); err != nil {
			return nil, err
		}
		k, err := b.skipper(comps[0], depth+1)
		if err != nil {
			return nil, err
		}
		v, err := b.skipper(comps[1], depth+1)
		if err != nil {
			return nil, err
		}
		return func(r *Reader) error {
			if err := k(r); err != nil {
				return err
			}
			return v(r)
		}, nil
	case urnIterable:
		if err := need(1); err != nil {
			return nil, err
		}
		e, err := b.skipper(comps[0], depth+1)
		if err != nil {
			return nil, err
		}
		return func(r *Reader) error { return skipIterable(r, e) }, nil
	default:
		return nil, fmt.Errorf("coder %q: %s is not a standard coder the host can parse (it must be length-prefixed)", id, urn)
	}
}

// skipIterable skips Beam's iterable encoding: a big-endian i32 count and the
// elements, or -1 and blocks of (varint count, elements) ended by a 0 count.
func skipIterable(r *Reader, elem skipFn) error {
	n, err := coder.DecodeInt32(r)
	if err != nil {
		return err
	}
	if n >= 0 {
		for ; n > 0; n-- {
			if err := elem(r); err != nil {
				return err
			}
		}
		return nil
	}
	if n != -1 {
		return fmt.Errorf("iterable count %d", n)
	}
	for {
		m, err := coder.DecodeVarInt(r)
		if err != nil {
			return err
		}
		if m == 0 {
			return nil
		}
		if m < 0 {
			return errors.New("negative iterable block count")
		}
		for ; m > 0; m-- {
			if err := elem(r); err != nil {
				return err
			}
		}
	}
}

// Appender is an io.Writer appending to a byte slice, for the Beam coder
// helpers' encoders.
type Appender struct{ B []byte }

// Write implements io.Writer.
func (a *Appender) Write(p []byte) (int, error) {
	a.B = append(a.B, p...)
	return len(p), nil
}

// AppendEventTime appends Beam's encoding of an event time to dst.
func AppendEventTime(dst []byte, t typex.EventTime) []byte {
	a := Appender{B: dst}
	_ = coder.EncodeEventTime(t, &a) // Appender never fails
	return a.B
}
