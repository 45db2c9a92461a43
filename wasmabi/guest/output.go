package guest

import (
	"encoding/binary"
	"unsafe"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// Output records (ABI v1) are written in place into rt.out[rt.outN:], which
// grows geometrically and is reused across calls: no allocation and no
// intermediate slice per output.

// outGrow makes room for n more bytes of records.
func outGrow(n int) {
	if rt.outN+n <= len(rt.out) {
		return
	}
	b := make([]byte, max(2*len(rt.out), rt.outN+n, 64<<10))
	copy(b, rt.out[:rt.outN])
	setOut(b)
}

// setOut makes b the output buffer.
func setOut(b []byte) {
	rt.out, rt.outBase, rt.outShortEnd = b, unsafe.Pointer(unsafe.SliceData(b)), max(len(b)-shortRecordSize+1, 0)
}

// setIn makes b the input buffer.
func setIn(b []byte) {
	rt.in, rt.inBase, rt.inShortEnd = b, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(max(len(b)-16+1, 0))
}

// shortRecordSize is the room outShort needs: a record header, a one-byte
// length and 16 bytes.
const shortRecordSize = abi.RecordHeaderSize + 1 + 16

// outHeader writes a record header at rt.out[p:].
func outHeader(p int, w, src uint32, size int) {
	h := (*[abi.RecordHeaderSize]byte)(rt.out[p:])
	store64((*[8]byte)(h[abi.RecordOutput:]), uint64(w)|uint64(src)<<32) // RecordOutput, RecordSource
	store32((*[4]byte)(h[abi.RecordLen:]), uint32(size))
}

// outString appends a record of output w, derived from source element src,
// whose element is s in the encoding of the string_utf8 and bytes coders (a
// varint length and the bytes). The common case, fewer than 128 bytes that
// fit in the buffer, runs straight through.
func outString(w, src uint32, s string) {
	p := rt.outN
	if end := p + abi.RecordHeaderSize + 1 + len(s); len(s) < 0x80 && end <= len(rt.out) {
		r := rt.out[p:end]
		store64((*[8]byte)(r), uint64(w)|uint64(src)<<32)
		store32((*[4]byte)(r[abi.RecordLen:]), uint32(1+len(s)))
		r[abi.RecordHeaderSize] = byte(len(s))
		copy(r[abi.RecordHeaderSize+1:], s)
		rt.outN = end
		return
	}
	outStringSlow(w, src, s)
}

func outStringSlow(w, src uint32, s string) {
	var v [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(v[:], uint64(len(s)))
	outGrow(abi.RecordHeaderSize + k + len(s))
	p := rt.outN
	outHeader(p, w, src, k+len(s))
	p += abi.RecordHeaderSize
	p += copy(rt.out[p:], v[:k])
	p += copy(rt.out[p:], s)
	rt.outN = p
}

// outElement appends a record of already encoded element bytes, with a
// timestamp if hasTS.
func outElement(w, src uint32, ts int64, hasTS bool, elem []byte) {
	n := abi.RecordHeaderSize + len(elem)
	if hasTS {
		n += 8
		w |= abi.RecordHasTimestamp
	}
	outGrow(n)
	p := rt.outN
	outHeader(p, w, src, len(elem))
	p += abi.RecordHeaderSize
	if hasTS {
		store64((*[8]byte)(rt.out[p:]), uint64(ts))
		p += 8
	}
	p += copy(rt.out[p:], elem)
	rt.outN = p
}

// outValue appends a record of v encoded with c, encoding it in place.
func outValue[T any](w, src uint32, c Coder[T], v T) {
	outGrow(abi.RecordHeaderSize)
	p := rt.outN
	o := c.Append(rt.out[:p+abi.RecordHeaderSize], v)
	setOut(o[:cap(o)]) // Append may have grown it
	rt.outN = len(o)
	outHeader(p, w, src, len(o)-p-abi.RecordHeaderSize)
}

// outputs are the records of the current call.
func outputs() []byte { return rt.out[:rt.outN] }

// stringOf views the bytes of b as a string without copying.
func stringOf(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
