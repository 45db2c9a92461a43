//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// The ABI v1 exports. Addresses are linear-memory offsets (uint32 = i32).
// Go's garbage collector does not move objects, so the buffers whose
// addresses the host holds stay put while rt references them.

//go:wasmexport ksr_abi_version
func ksrABIVersion() int32 { return abi.Version }

// result is the result block; its address never changes.
var result [abi.ResultSize / 4]uint32

//go:wasmexport ksr_result
func ksrResult() uint32 { return uint32(uintptr(unsafe.Pointer(&result[0]))) }

//go:wasmexport ksr_reserve
func ksrReserve(size int32) uint32 {
	if size <= 0 {
		size = 1
	}
	b := reserve(int(size))
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

//go:wasmexport ksr_setup
func ksrSetup(n int32) int32 {
	return finish(status(func() error { return setup(rt.in[:n]) }))
}

//go:wasmexport ksr_start_bundle
func ksrStartBundle() int32 { return finish(status(startBundle)) }

//go:wasmexport ksr_process
func ksrProcess(n, descOff int32) int32 {
	return finish(status(func() error { return process(int(n), int(descOff)) }))
}

//go:wasmexport ksr_finish_bundle
func ksrFinishBundle() int32 {
	rt.outN = 0
	return finish(status(finishBundle))
}

//go:wasmexport ksr_teardown
func ksrTeardown() int32 { return finish(status(teardown)) }

// finish publishes the outputs or the error message in the result block.
func finish(code int32) int32 {
	result[0], result[1], result[2], result[3] = 0, 0, 0, 0
	if code != abi.StatusOK {
		result[abi.ResultErrPtr/4], result[abi.ResultErrLen/4] = addr(rt.msg), uint32(len(rt.msg))
		return code
	}
	result[abi.ResultOutPtr/4], result[abi.ResultOutLen/4] = addr(outputs()), uint32(rt.outN)
	return code
}

func addr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

//go:wasmimport ksr log
func ksrLog(level int32, msg unsafe.Pointer, n int32)

//go:wasmimport ksr counter
func ksrCounter(transform int32, ns unsafe.Pointer, nsLen int32, name unsafe.Pointer, nameLen int32, delta int64)

//go:wasmimport ksr distribution
func ksrDistribution(transform int32, ns unsafe.Pointer, nsLen int32, name unsafe.Pointer, nameLen int32, count, sum, min, max int64)

func hostLog(level int32, msg string) {
	ksrLog(level, unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg)))
}

func hostCounter(transform int32, ns, name string, delta int64) {
	ksrCounter(transform, unsafe.Pointer(unsafe.StringData(ns)), int32(len(ns)),
		unsafe.Pointer(unsafe.StringData(name)), int32(len(name)), delta)
}

func hostDistribution(transform int32, ns, name string, count, sum, min, max int64) {
	ksrDistribution(transform, unsafe.Pointer(unsafe.StringData(ns)), int32(len(ns)),
		unsafe.Pointer(unsafe.StringData(name)), int32(len(name)), count, sum, min, max)
}
