//go:build !linux

package wasmabi

import "github.com/tetratelabs/wazero/experimental"

// newLinearMemory: only Linux reserves linear memories (memory_linux.go).
func newLinearMemory(_, _ uint64) experimental.LinearMemory { return &heapMemory{} }
