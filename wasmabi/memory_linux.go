package wasmabi

import (
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// linearMemory backs an instance's linear memory with a private anonymous
// mapping reserved at the memory's maximum (MemoryLimitPages at most), so
// that it grows in place. wazero's default backing is a Go slice grown by
// append: every growth copies the memory and leaves the old copy for the
// garbage collector, and a Go guest growing to 512 MiB took the process's
// RSS to 1.5 GB. Untouched pages of the reservation cost address space
// only (MAP_NORESERVE).
//
// Release: wazero calls Free when the instance closes; Free gives the pages
// back at once (madvise DONTNEED), so the RSS drops without waiting for a
// garbage collection. The mapping itself is unmapped by a cleanup once
// nothing references the memory any more: a guest call still running on
// another goroutine (a module closed under it) keeps it reachable, and
// touches zero pages rather than unmapped ones.
type linearMemory struct {
	buf   []byte // the whole reservation
	freed atomic.Bool
}

func newLinearMemory(_, max uint64) experimental.LinearMemory {
	if max == 0 || max > 1<<32 {
		return &heapMemory{}
	}
	b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return &heapMemory{}
	}
	m := &linearMemory{buf: b}
	runtime.AddCleanup(m, func(b []byte) { _ = syscall.Munmap(b) }, b)
	return m
}

// Reallocate returns the first size bytes of the reservation (fresh pages
// of an anonymous mapping are zero, as WebAssembly requires), or nil past
// it, which fails the guest's memory.grow.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) || m.freed.Load() {
		return nil
	}
	return m.buf[:size:size]
}

func (m *linearMemory) Free() {
	if m.freed.CompareAndSwap(false, true) {
		_ = syscall.Madvise(m.buf, syscall.MADV_DONTNEED)
	}
}
