// Package wasmtest builds tiny hand-assembled WASM modules for tests of
// ABI checks and faults, without a toolchain.
package wasmtest

import (
	"maps"
	"slices"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// RawModule assembles a minimal ABI v1 module: one page of memory, the result
// block at address 0 (all zero: no outputs), the input buffer at 1024.
// Every export returns 0 except ksr_abi_version (version), ksr_reserve (1024)
// and those with a body in bodies (instructions before the final "end").
// Exports named in omit are left out.
func RawModule(version int32, bodies map[string][]byte, omit ...string) []byte {
	type fn struct {
		name   string
		params int
		body   []byte
	}
	var fns []fn
	for _, name := range slices.Sorted(maps.Keys(abi.ExportParams)) {
		if slices.Contains(omit, name) {
			continue
		}
		body := []byte{0x41, 0} // i32.const 0
		switch name {
		case abi.ExportVersion:
			body = append([]byte{0x41}, sleb(int64(version))...)
		case abi.ExportReserve:
			body = append([]byte{0x41}, sleb(1024)...)
		}
		if b, ok := bodies[name]; ok {
			body = b
		}
		fns = append(fns, fn{name, abi.ExportParams[name], body})
	}
	section := func(id byte, payload []byte) []byte {
		return append(append([]byte{id}, uleb(uint64(len(payload)))...), payload...)
	}
	vec := func(items ...[]byte) []byte {
		out := uleb(uint64(len(items)))
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	// Types 0, 1, 2: (i32 x n) -> i32.
	var types [][]byte
	for n := range 3 {
		types = append(types, append(append([]byte{0x60}, vec(slices.Repeat([][]byte{{0x7f}}, n)...)...), 1, 0x7f))
	}
	var funcs, exports, codes [][]byte
	for k, f := range fns {
		funcs = append(funcs, uleb(uint64(f.params)))
		exports = append(exports, append(name(f.name), append([]byte{0}, uleb(uint64(k))...)...))
		code := append([]byte{0}, append(f.body, 0x0b)...) // no locals, body, end
		codes = append(codes, append(uleb(uint64(len(code))), code...))
	}
	exports = append(exports, append(name("memory"), 2, 0))
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, vec(types...))...)
	m = append(m, section(3, vec(funcs...))...)
	m = append(m, section(5, vec([]byte{0, 1}))...) // one memory, min 1 page
	m = append(m, section(7, vec(exports...))...)
	m = append(m, section(10, vec(codes...))...)
	return m
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}
