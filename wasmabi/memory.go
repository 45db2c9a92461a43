package wasmabi

// heapMemory is a linear memory in a Go slice, wazero's default backing,
// where a memory cannot be reserved (see linearMemory).
type heapMemory struct{ buf []byte }

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.buf)) {
		b := make([]byte, size, max(size, 2*uint64(cap(m.buf))))
		copy(b, m.buf)
		m.buf = b
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *heapMemory) Free() { m.buf = nil }
