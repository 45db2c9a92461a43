package shuffle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Standard coder URNs the host parses. Every other coder reaches the host
// wrapped in a length prefix (translate guarantees it).
const (
	urnBytes          = "beam:coder:bytes:v1"
	urnString         = "beam:coder:string_utf8:v1"
	urnVarInt         = "beam:coder:varint:v1"
	urnDouble         = "beam:coder:double:v1"
	urnBool           = "beam:coder:bool:v1"
	urnNullable       = "beam:coder:nullable:v1"
	urnKV             = "beam:coder:kv:v1"
	urnIterable       = "beam:coder:iterable:v1"
	urnLengthPrefix   = "beam:coder:length_prefix:v1"
	urnGlobalWindow   = "beam:coder:global_window:v1"
	urnIntervalWindow = "beam:coder:interval_window:v1"
	urnWindowedValue  = "beam:coder:windowed_value:v1"
)

// ErrShort reports that a buffer ends inside an element: the caller keeps the
// bytes and retries when more arrive.
var ErrShort = errors.New("shuffle: buffer ends inside an element")

// lengthFunc returns the encoded length of the value at the start of b.
type lengthFunc func(b []byte) (int, error)

// ElementCodec parses the windowed values of one PCollection as they cross the
// host: on the data channel, in Kafka records and in state. It never decodes
// the user's values, it only finds their boundaries.
type ElementCodec struct {
	elem       lengthFunc
	window     lengthFunc
	key, value lengthFunc // non-nil when the element coder is a KV
	// grouped is the length of one value of a KV's iterable value
	// (KV<K, iterable<V>>: a GroupByKey's output), nil for other coders.
	grouped    lengthFunc
	globalOnly bool // window coder is the global window
	// elemPrefixed: the element is a varint length and that many bytes
	// (bytes, string_utf8 and length_prefix coders).
	elemPrefixed bool
	elemCoderID  string
}

// NewElementCodec builds the codec of the windowed_value coder wvCoderID.
func NewElementCodec(coders map[string]*pipepb.Coder, wvCoderID string) (*ElementCodec, error) {
	wv, ok := coders[wvCoderID]
	if !ok {
		return nil, fmt.Errorf("coder %q: not in the pipeline's components", wvCoderID)
	}
	if urn := wv.GetSpec().GetUrn(); urn != urnWindowedValue || len(wv.GetComponentCoderIds()) != 2 {
		return nil, fmt.Errorf("coder %q: want a windowed_value coder with 2 components, got %s", wvCoderID, urn)
	}
	elemID, winID := wv.GetComponentCoderIds()[0], wv.GetComponentCoderIds()[1]
	c := &ElementCodec{elemCoderID: elemID}
	var err error
	if c.elem, err = compileLength(coders, elemID); err != nil {
		return nil, fmt.Errorf("coder %q: element: %w", wvCoderID, err)
	}
	if c.window, err = compileLength(coders, winID); err != nil {
		return nil, fmt.Errorf("coder %q: window: %w", wvCoderID, err)
	}
	c.globalOnly = coders[winID].GetSpec().GetUrn() == urnGlobalWindow
	switch coders[elemID].GetSpec().GetUrn() {
	case urnBytes, urnString, urnLengthPrefix:
		c.elemPrefixed = true
	}
	if ec := coders[elemID]; ec.GetSpec().GetUrn() == urnKV && len(ec.GetComponentCoderIds()) == 2 {
		if c.key, err = compileLength(coders, ec.GetComponentCoderIds()[0]); err != nil {
			return nil, fmt.Errorf("coder %q: key: %w", wvCoderID, err)
		}
		if c.value, err = compileLength(coders, ec.GetComponentCoderIds()[1]); err != nil {
			return nil, fmt.Errorf("coder %q: value: %w", wvCoderID, err)
		}
		if vc := coders[ec.GetComponentCoderIds()[1]]; vc.GetSpec().GetUrn() == urnIterable && len(vc.GetComponentCoderIds()) == 1 {
			if c.grouped, err = compileLength(coders, vc.GetComponentCoderIds()[0]); err != nil {
				return nil, fmt.Errorf("coder %q: iterable value: %w", wvCoderID, err)
			}
		}
	}
	return c, nil
}

// IsKV reports whether the elements are KVs whose key the host can find.
func (c *ElementCodec) IsKV() bool { return c.key != nil }

// GlobalWindowOnly reports whether the window coder is the global window's.
func (c *ElementCodec) GlobalWindowOnly() bool { return c.globalOnly }

// WindowedValue is a view into an encoded windowed value. Its slices alias the
// buffer it was parsed from.
type WindowedValue struct {
	Timestamp int64  // event time in milliseconds (Beam's mtime)
	Windows   []byte // the encoded windows, without the count
	NWindows  int
	Pane      []byte // the encoded pane
	Elem      []byte // the encoded element (nested context)
	Raw       []byte // the whole encoded windowed value
}

// Next parses the windowed value at the start of b. It returns ErrShort when b
// ends inside it.
func (c *ElementCodec) Next(b []byte) (WindowedValue, error) {
	l, err := c.Locate(b)
	if err != nil {
		return WindowedValue{}, err
	}
	return WindowedValue{
		Timestamp: l.Timestamp,
		Windows:   b[windowsOffset:l.Pane],
		NWindows:  l.NWindows,
		Pane:      b[l.Pane:l.Elem],
		Elem:      b[l.Elem:l.End],
		Raw:       b[:l.End],
	}, nil
}

// Location locates the parts of an encoded windowed value by their offsets
// in a buffer: the timestamp is [Start, Start+8), the window count the next
// 4 bytes, the windows [Start+12, Pane), the pane [Pane, Elem) and the
// element [Elem, End).
type Location struct {
	Timestamp int64 // event time in milliseconds (Beam's mtime)
	NWindows  int
	Start     int
	Pane      int
	Elem      int
	End       int
}

// Scan appends to dst the locations of the windowed values of b from off
// on, whole values only, up to the first that ends limit or more bytes past
// off (at least one value), and returns them and where they end. The common
// case, as in Locate, runs inline: Scan is the per-element cost of reading
// a batch.
func (c *ElementCodec) Scan(dst []Location, b []byte, off, limit int) ([]Location, int, error) {
	end := off
	fast := c.globalOnly && c.elemPrefixed
	for first := true; end < len(b) && (first || end-off < limit); first = false {
		// A global window (count 1, no bytes), a one-byte pane and an
		// element under 128 bytes.
		if r := b[end:]; fast && len(r) >= 14 && binary.BigEndian.Uint32(r[8:]) == 1 && r[12] < 0x10 && r[13] < 0x80 && 14+int(r[13]) <= len(r) {
			next := end + 14 + int(r[13])
			dst = append(dst, Location{
				Timestamp: int64(binary.BigEndian.Uint64(r) + math.MaxInt64 + 1), NWindows: 1,
				Start: end, Pane: end + windowsOffset, Elem: end + windowsOffset + 1, End: next,
			})
			end = next
			continue
		}
		l, err := c.Locate(b[end:])
		if err != nil {
			return dst, end, fmt.Errorf("value at offset %d: %w", end, err)
		}
		l.Start, l.Pane, l.Elem, l.End = end, end+l.Pane, end+l.Elem, end+l.End
		dst = append(dst, l)
		end = l.End
	}
	return dst, end, nil
}

// windowsOffset is where the windows start: after the timestamp and the count.
const windowsOffset = 12

// Locate is Next without the slices, for callers that keep offsets into a
// large buffer. The common case (the global window, a one-byte pane, an
// element of a length-prefixed coder under 128 bytes) takes no function
// calls: it is what every host executor and shuffle pays per element.
func (c *ElementCodec) Locate(b []byte) (Location, error) {
	var l Location
	if len(b) < windowsOffset+1 {
		return l, ErrShort
	}
	l.Timestamp = int64(binary.BigEndian.Uint64(b) + math.MaxInt64 + 1)
	n := int32(binary.BigEndian.Uint32(b[8:]))
	if c.globalOnly && n == 1 && b[windowsOffset]>>4 == 0 {
		l.NWindows, l.Pane, l.Elem = 1, windowsOffset, windowsOffset+1
		if e := l.Elem; c.elemPrefixed && e < len(b) && b[e] < 0x80 {
			if l.End = e + 1 + int(b[e]); l.End > len(b) {
				return Location{}, ErrShort
			}
			return l, nil
		}
	} else {
		if n < 0 {
			return Location{}, fmt.Errorf("windowed value: negative window count %d", n)
		}
		// Every window is followed by at least the pane byte, so a count
		// larger than the bytes left cannot be complete (and a zero-width
		// window coder must not make a corrupt count loop for billions of
		// rounds).
		if int(n) > len(b)-windowsOffset {
			return Location{}, ErrShort
		}
		l.NWindows = int(n)
		off := windowsOffset
		for i := 0; i < l.NWindows; i++ {
			wl, err := c.window(b[off:])
			if err != nil {
				return Location{}, err
			}
			off += wl
		}
		pl, err := paneLength(b[off:])
		if err != nil {
			return Location{}, err
		}
		l.Pane, l.Elem = off, off+pl
	}
	el, err := c.elem(b[l.Elem:])
	if err != nil {
		return Location{}, err
	}
	l.End = l.Elem + el
	return l, nil
}

// SplitWindows returns each encoded window of wv.
func (c *ElementCodec) SplitWindows(wv WindowedValue) ([][]byte, error) {
	out := make([][]byte, 0, wv.NWindows)
	b := wv.Windows
	for i := 0; i < wv.NWindows; i++ {
		l, err := c.window(b)
		if err != nil {
			return nil, err
		}
		out = append(out, b[:l])
		b = b[l:]
	}
	return out, nil
}

// GroupedValueLength returns the length of the encoded value at the start
// of b, one of the values of an element KV<K, iterable<V>>.
func (c *ElementCodec) GroupedValueLength(b []byte) (int, error) {
	if c.grouped == nil {
		return 0, fmt.Errorf("element coder %q is not a KV of an iterable", c.elemCoderID)
	}
	return c.grouped(b)
}

// SplitKV splits an encoded KV element into its encoded key and value.
func (c *ElementCodec) SplitKV(elem []byte) (key, value []byte, err error) {
	if c.key == nil {
		return nil, nil, fmt.Errorf("element coder %q is not a KV coder", c.elemCoderID)
	}
	kl, err := c.key(elem)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	return elem[:kl], elem[kl:], nil
}

// paneLength returns the length of the encoded pane at the start of b: one
// byte whose high nibble says how many varints follow.
func paneLength(b []byte) (int, error) {
	if len(b) < 1 {
		return 0, ErrShort
	}
	n := 1
	for i := 0; i < int(b[0]>>4); i++ {
		l, err := varintLength(b[n:])
		if err != nil {
			return 0, err
		}
		n += l
	}
	if b[0]>>4 > 2 {
		return 0, fmt.Errorf("pane: unknown encoding %d", b[0]>>4)
	}
	return n, nil
}

func varintLength(b []byte) (int, error) {
	for i := 0; i < len(b) && i < binary.MaxVarintLen64; i++ {
		if b[i] < 0x80 {
			return i + 1, nil
		}
	}
	if len(b) >= binary.MaxVarintLen64 {
		return 0, errors.New("varint overflows 64 bits")
	}
	return 0, ErrShort
}

func lengthPrefixed(b []byte) (int, error) {
	v, n := binary.Uvarint(b)
	if n == 0 {
		return 0, ErrShort
	}
	if n < 0 {
		return 0, errors.New("length prefix overflows 64 bits")
	}
	if v > uint64(len(b)-n) {
		return 0, ErrShort
	}
	return n + int(v), nil
}

func fixed(size int) lengthFunc {
	return func(b []byte) (int, error) {
		if len(b) < size {
			return 0, ErrShort
		}
		return size, nil
	}
}

func compileLength(coders map[string]*pipepb.Coder, id string) (lengthFunc, error) {
	c, ok := coders[id]
	if !ok {
		return nil, fmt.Errorf("coder %q: not in the pipeline's components", id)
	}
	comps := c.GetComponentCoderIds()
	sub := func(i int) (lengthFunc, error) {
		if len(comps) <= i {
			return nil, fmt.Errorf("coder %q (%s): missing component %d", id, c.GetSpec().GetUrn(), i)
		}
		return compileLength(coders, comps[i])
	}
	switch urn := c.GetSpec().GetUrn(); urn {
	case urnBytes, urnString, urnLengthPrefix:
		return lengthPrefixed, nil
	case urnVarInt:
		return varintLength, nil
	case urnDouble:
		return fixed(8), nil
	case urnBool:
		return fixed(1), nil
	case urnNullable:
		// A flag byte, then the value (nested) when the flag is 1.
		in, err := sub(0)
		if err != nil {
			return nil, err
		}
		return func(b []byte) (int, error) {
			if len(b) < 1 {
				return 0, ErrShort
			}
			if b[0] == 0 {
				return 1, nil
			}
			l, err := in(b[1:])
			return 1 + l, err
		}, nil
	case urnGlobalWindow:
		return fixed(0), nil
	case urnIntervalWindow:
		return func(b []byte) (int, error) {
			if len(b) < 8 {
				return 0, ErrShort
			}
			l, err := varintLength(b[8:])
			return 8 + l, err
		}, nil
	case urnKV:
		k, err := sub(0)
		if err != nil {
			return nil, err
		}
		v, err := sub(1)
		if err != nil {
			return nil, err
		}
		return func(b []byte) (int, error) {
			kl, err := k(b)
			if err != nil {
				return 0, err
			}
			vl, err := v(b[kl:])
			return kl + vl, err
		}, nil
	case urnIterable:
		e, err := sub(0)
		if err != nil {
			return nil, err
		}
		return iterableLength(e), nil
	case urnWindowedValue:
		nested, err := NewElementCodec(coders, id)
		if err != nil {
			return nil, err
		}
		return func(b []byte) (int, error) {
			wv, err := nested.Next(b)
			return len(wv.Raw), err
		}, nil
	default:
		return nil, fmt.Errorf("coder %q: the host cannot parse %s (it must be length-prefixed)", id, urn)
	}
}

// iterableLength handles both encodings of Beam's iterable coder: a known
// count (int32 >= 0) followed by the elements, or -1 followed by blocks of
// varint count + elements, ended by a zero count or by varint(-1) and a
// length-prefixed state token (a state-backed iterable).
func iterableLength(elem lengthFunc) lengthFunc {
	return func(b []byte) (int, error) {
		if len(b) < 4 {
			return 0, ErrShort
		}
		n := int32(binary.BigEndian.Uint32(b))
		off := 4
		each := func(count int) error {
			for i := 0; i < count; i++ {
				l, err := elem(b[off:])
				if err != nil {
					return err
				}
				off += l
			}
			return nil
		}
		if n >= 0 {
			if int(n) > len(b)-off {
				return 0, ErrShort // every element the host parses has at least one byte
			}
			return off, each(int(n))
		}
		if n != -1 {
			return 0, fmt.Errorf("iterable: invalid count %d", n)
		}
		for {
			cnt, l := binary.Uvarint(b[off:])
			if l == 0 {
				return 0, ErrShort
			}
			if l < 0 {
				return 0, errors.New("iterable: block count overflows")
			}
			off += l
			if cnt == 0 {
				return off, nil
			}
			if cnt == math.MaxUint64 {
				// varint(-1): the rest of the iterable is runner
				// state (a paged group), behind a length-prefixed
				// token that ends the encoding.
				tl, l := binary.Uvarint(b[off:])
				if l == 0 {
					return 0, ErrShort
				}
				if l < 0 || tl > uint64(len(b)-off-l) {
					if l < 0 {
						return 0, errors.New("iterable: state token length overflows")
					}
					return 0, ErrShort
				}
				return off + l + int(tl), nil
			}
			if cnt > uint64(len(b)-off) {
				return 0, ErrShort
			}
			if err := each(int(cnt)); err != nil {
				return 0, err
			}
		}
	}
}

// TimerCodec parses timers in Beam's timer coder (beam:coder:timer:v1) of one
// timer family: key, dynamic timer tag, windows, clear bit and, unless
// cleared, fire timestamp, hold timestamp and pane.
type TimerCodec struct {
	key, window lengthFunc
}

// NewTimerCodec builds the codec of the timer coder timerCoderID.
func NewTimerCodec(coders map[string]*pipepb.Coder, timerCoderID string) (*TimerCodec, error) {
	c, ok := coders[timerCoderID]
	if !ok {
		return nil, fmt.Errorf("coder %q: not in the pipeline's components", timerCoderID)
	}
	if urn := c.GetSpec().GetUrn(); urn != "beam:coder:timer:v1" || len(c.GetComponentCoderIds()) != 2 {
		return nil, fmt.Errorf("coder %q: want a timer coder with 2 components, got %s", timerCoderID, urn)
	}
	key, err := compileLength(coders, c.GetComponentCoderIds()[0])
	if err != nil {
		return nil, fmt.Errorf("coder %q: key: %w", timerCoderID, err)
	}
	win, err := compileLength(coders, c.GetComponentCoderIds()[1])
	if err != nil {
		return nil, fmt.Errorf("coder %q: window: %w", timerCoderID, err)
	}
	return &TimerCodec{key: key, window: win}, nil
}

// Timer is a view into an encoded timer; its slices alias the buffer.
type Timer struct {
	Key, Tag []byte
	Windows  [][]byte // each encoded window
	Clear    bool
	Fire     int64 // event or processing time in milliseconds, unless Clear
	Hold     int64 // output timestamp, unless Clear
	Raw      []byte
}

// Next parses the timer at the start of b; ErrShort when b ends inside it.
func (c *TimerCodec) Next(b []byte) (Timer, error) {
	var t Timer
	off := 0
	kl, err := c.key(b)
	if err != nil {
		return t, err
	}
	t.Key = b[:kl]
	off = kl
	tl, err := lengthPrefixed(b[off:])
	if err != nil {
		return t, err
	}
	t.Tag = b[off : off+tl]
	off += tl
	if len(b)-off < 4 {
		return t, ErrShort
	}
	n := int32(binary.BigEndian.Uint32(b[off:]))
	if n < 0 {
		return t, fmt.Errorf("timer: negative window count %d", n)
	}
	off += 4
	for i := 0; i < int(n); i++ {
		wl, err := c.window(b[off:])
		if err != nil {
			return t, err
		}
		t.Windows = append(t.Windows, b[off:off+wl])
		off += wl
	}
	if len(b)-off < 1 {
		return t, ErrShort
	}
	t.Clear = b[off] != 0
	off++
	if !t.Clear {
		if len(b)-off < 16 {
			return t, ErrShort
		}
		t.Fire = int64(binary.BigEndian.Uint64(b[off:]) ^ (1 << 63))
		t.Hold = int64(binary.BigEndian.Uint64(b[off+8:]) ^ (1 << 63))
		off += 16
		pl, err := paneLength(b[off:])
		if err != nil {
			return t, err
		}
		off += pl
	}
	t.Raw = b[:off]
	return t, nil
}

// ValueLength returns a function giving the encoded length of a value of
// coder id at the start of a buffer (ErrShort when it ends inside it), for
// state values the host must split (ordered list state).
func ValueLength(coders map[string]*pipepb.Coder, id string) (func([]byte) (int, error), error) {
	f, err := compileLength(coders, id)
	if err != nil {
		return nil, err
	}
	return f, nil
}
