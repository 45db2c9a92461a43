package guest

import (
	"encoding/binary"
	"unsafe"
)

// Little-endian loads and stores of the ABI's integers in one memory access.
// The Go compiler does not merge byte accesses into wider ones on wasm (it
// does not assume unaligned access is cheap there), so binary.LittleEndian
// costs 4 or 8 single-byte loads or stores and the shifts on the hot path of
// a guest. WebAssembly memory is little-endian and allows unaligned access;
// on a big-endian platform (native tests only) these fall back to
// encoding/binary. Callers pass arrays, so the bounds are checked once, by
// the conversion to an array pointer.

func load32(b *[4]byte) uint32 {
	if littleEndian {
		return *(*uint32)(unsafe.Pointer(b))
	}
	return binary.LittleEndian.Uint32(b[:])
}

func load64(b *[8]byte) uint64 {
	if littleEndian {
		return *(*uint64)(unsafe.Pointer(b))
	}
	return binary.LittleEndian.Uint64(b[:])
}

func store32(b *[4]byte, v uint32) {
	if littleEndian {
		*(*uint32)(unsafe.Pointer(b)) = v
		return
	}
	binary.LittleEndian.PutUint32(b[:], v)
}

func store64(b *[8]byte, v uint64) {
	if littleEndian {
		*(*uint64)(unsafe.Pointer(b)) = v
		return
	}
	binary.LittleEndian.PutUint64(b[:], v)
}
