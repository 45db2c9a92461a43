// Package interrupt makes a WebAssembly module interruptible at low cost by
// rewriting its code: every loop header counts down a budget held in a new
// mutable global, and when the budget runs out calls a new imported function
// (the poll), then refills it. The host's poll checks whether the guest
// should stop (a deadline, a cancelled context) and, if so, panics, which
// wazero turns into an error of the call into the guest.
//
// Why not wazero's WithCloseOnContextDone: its compiled code leaves native
// code for Go at every loop header (a register save, a stack switch, a
// closed-module check), and Go guests compile every function to a loop, so
// guest code ran 6-7x slower. A countdown is a load, a subtraction, a store
// and a branch per loop header; the poll's exit to Go happens once per
// Budget iterations. It also gives the Go scheduler a preemption point in
// guest code that otherwise never yields (native code cannot be preempted,
// so a guest spinning without a poll would hold up a stop-the-world garbage
// collection of the whole process).
//
// The rewrite appends the poll as the last imported function, so defined
// functions shift up by one: every function index (calls, ref.func, exports,
// the start function, element segments, global initialisers, the name
// section) is remapped. It adds a type and a global at the end of their
// index spaces, so nothing else moves. Branch targets in WebAssembly are
// structured (label depths, not offsets), so inserting instructions needs no
// other fix-up.
package interrupt

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Budget is the number of loop iterations between polls: large enough that
// the poll's cost (an exit to Go, about 100 ns) vanishes, small enough that
// a spinning guest polls every few milliseconds at most.
const Budget = 1 << 16

// Section ids, and the order in which known sections must appear.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// order ranks known sections in their required order (the tag section of
// exception handling sits between memory and global).
var order = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11, secCode: 12, secData: 13,
}

// Instrument returns wasm rewritten to call importModule.importName, a
// function of type () -> (), once per Budget loop iterations.
func Instrument(wasm []byte, importModule, importName string) ([]byte, error) {
	r := &reader{b: wasm}
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || binary.LittleEndian.Uint32(wasm[4:8]) != 1 {
		return nil, errors.New("not a WebAssembly binary (version 1)")
	}
	r.p = 8
	type section struct {
		id      byte
		payload []byte
	}
	var sections []section
	for r.p < len(r.b) {
		id := r.byte()
		n := r.u32()
		payload := r.bytes(int(n))
		if r.err != nil {
			return nil, fmt.Errorf("section %d: %w", id, r.err)
		}
		sections = append(sections, section{id, payload})
	}
	ins := &instrumenter{}
	// First pass: the sizes of the index spaces the rewrite appends to.
	for _, s := range sections {
		var err error
		switch s.id {
		case secType:
			ins.types, err = count(s.payload)
		case secImport:
			err = ins.countImports(s.payload)
		case secGlobal:
			ins.globals, err = count(s.payload)
		}
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", s.id, err)
		}
	}
	ins.pollFunc = ins.importedFuncs
	ins.pollType = ins.types
	ins.fuelGlobal = ins.importedGlobals + ins.globals

	out := append([]byte(nil), wasm[:8]...)
	emit := func(id byte, payload []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(payload)))
		out = append(out, payload...)
	}
	// The sections the rewrite needs may be missing; each is emitted before
	// the first section that must follow it.
	added := map[byte]bool{}
	need := []byte{secType, secImport, secGlobal}
	present := map[byte]bool{}
	for _, s := range sections {
		present[s.id] = true
	}
	addMissing := func(before byte) {
		for _, id := range need {
			if present[id] || added[id] || (before != 0 && order[id] >= order[before]) {
				continue
			}
			added[id] = true
			switch id {
			case secType:
				emit(id, ins.appendType(binary.AppendUvarint(nil, 0)))
			case secImport:
				emit(id, ins.appendImport(binary.AppendUvarint(nil, 0), importModule, importName))
			case secGlobal:
				emit(id, ins.appendGlobal(binary.AppendUvarint(nil, 0)))
			}
		}
	}
	for _, s := range sections {
		if s.id != secCustom {
			addMissing(s.id)
		}
		p, err := ins.rewrite(s.id, s.payload, importModule, importName)
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", s.id, err)
		}
		if p != nil {
			emit(s.id, p)
		}
	}
	addMissing(0)
	return out, nil
}

type instrumenter struct {
	types, globals                 uint32 // defined in the module
	importedFuncs, importedGlobals uint32
	pollFunc, pollType, fuelGlobal uint32
}

func count(payload []byte) (uint32, error) {
	r := &reader{b: payload}
	n := r.u32()
	return n, r.err
}

func (ins *instrumenter) countImports(payload []byte) error {
	r := &reader{b: payload}
	for range r.u32() {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0: // function: type index
			r.u32()
			ins.importedFuncs++
		case 1: // table: reftype, limits
			r.byte()
			r.limits()
		case 2: // memory: limits
			r.limits()
		case 3: // global: valtype, mutability
			r.byte()
			r.byte()
			ins.importedGlobals++
		case 4: // tag: attribute, type index
			r.byte()
			r.u32()
		default:
			return fmt.Errorf("import of unknown kind %d", kind)
		}
		if r.err != nil {
			return r.err
		}
	}
	return r.err
}

// fn maps a function index of the original module to the rewritten one.
func (ins *instrumenter) fn(i uint32) uint32 {
	if i >= ins.importedFuncs {
		return i + 1
	}
	return i
}

// appendType appends () -> () to a type section's entries (the count in
// payload is incremented).
func (ins *instrumenter) appendType(payload []byte) []byte {
	return appendVecItem(payload, []byte{0x60, 0, 0})
}

func (ins *instrumenter) appendImport(payload []byte, module, name string) []byte {
	var item []byte
	item = appendName(item, module)
	item = appendName(item, name)
	item = append(item, 0)
	item = binary.AppendUvarint(item, uint64(ins.pollType))
	return appendVecItem(payload, item)
}

// appendGlobal appends the budget: a mutable i32 initialised to Budget.
func (ins *instrumenter) appendGlobal(payload []byte) []byte {
	item := []byte{0x7f, 1, opI32Const}
	item = appendSLEB(item, Budget)
	item = append(item, opEnd)
	return appendVecItem(payload, item)
}

// appendVecItem adds an item to a vector (count, items...).
func appendVecItem(vec []byte, item []byte) []byte {
	r := &reader{b: vec}
	n := r.u32()
	out := binary.AppendUvarint(nil, uint64(n)+1)
	out = append(out, vec[r.p:]...)
	return append(out, item...)
}

func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// rewrite returns a section's new payload, or nil to drop it.
func (ins *instrumenter) rewrite(id byte, payload []byte, module, name string) ([]byte, error) {
	switch id {
	case secType:
		return ins.appendType(payload), nil
	case secImport:
		return ins.appendImport(payload, module, name), nil
	case secGlobal:
		return ins.rewriteGlobals(payload)
	case secExport:
		return ins.rewriteExports(payload)
	case secStart:
		r := &reader{b: payload}
		f := r.u32()
		return binary.AppendUvarint(nil, uint64(ins.fn(f))), r.err
	case secElement:
		return ins.rewriteElements(payload)
	case secCode:
		return ins.rewriteCode(payload)
	case secCustom:
		r := &reader{b: payload}
		if r.name() == "name" && r.err == nil {
			return ins.rewriteNames(payload, r.p)
		}
	}
	return payload, nil
}

func (ins *instrumenter) rewriteGlobals(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := binary.AppendUvarint(nil, uint64(n))
	for range n {
		out = append(out, r.byte(), r.byte()) // valtype, mutability
		var err error
		if out, err = ins.expr(r, out, false); err != nil {
			return nil, fmt.Errorf("global initialiser: %w", err)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return ins.appendGlobal(out), nil
}

func (ins *instrumenter) rewriteExports(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := binary.AppendUvarint(nil, uint64(n))
	for range n {
		out = appendName(out, r.name())
		kind := r.byte()
		idx := r.u32()
		if kind == 0 {
			idx = ins.fn(idx)
		}
		out = append(out, kind)
		out = binary.AppendUvarint(out, uint64(idx))
	}
	return out, r.err
}

func (ins *instrumenter) rewriteElements(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := binary.AppendUvarint(nil, uint64(n))
	var err error
	for range n {
		flags := r.u32()
		out = binary.AppendUvarint(out, uint64(flags))
		if flags > 7 {
			return nil, fmt.Errorf("element segment with flags %d", flags)
		}
		if flags&2 != 0 && flags&1 == 0 { // explicit table index
			out = binary.AppendUvarint(out, uint64(r.u32()))
		}
		if flags&1 == 0 { // active: offset expression
			if out, err = ins.expr(r, out, false); err != nil {
				return nil, err
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			out = append(out, r.byte())
		}
		items := r.u32()
		out = binary.AppendUvarint(out, uint64(items))
		for range items {
			if flags&4 == 0 { // function indices
				out = binary.AppendUvarint(out, uint64(ins.fn(r.u32())))
			} else if out, err = ins.expr(r, out, false); err != nil {
				return nil, err
			}
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	return out, r.err
}

func (ins *instrumenter) rewriteCode(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := binary.AppendUvarint(nil, uint64(n))
	var body []byte
	for k := range n {
		size := r.u32()
		fr := &reader{b: r.bytes(int(size))}
		if r.err != nil {
			return nil, r.err
		}
		body = body[:0]
		groups := fr.u32() // locals: (count, valtype) groups
		body = binary.AppendUvarint(body, uint64(groups))
		for range groups {
			body = binary.AppendUvarint(body, uint64(fr.u32()))
			body = append(body, fr.byte())
		}
		var err error
		if body, err = ins.expr(fr, body, true); err != nil {
			return nil, fmt.Errorf("function %d: %w", ins.importedFuncs+k, err)
		}
		if fr.p != len(fr.b) {
			return nil, fmt.Errorf("function %d: %d bytes after the end of its body", ins.importedFuncs+k, len(fr.b)-fr.p)
		}
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out, r.err
}

// rewriteNames remaps the function indices of the name section's function
// names (subsection 1) and local names (2); label names (3), keyed by
// function too, are dropped; the others are kept.
func (ins *instrumenter) rewriteNames(payload []byte, start int) ([]byte, error) {
	out := append([]byte(nil), payload[:start]...)
	r := &reader{b: payload, p: start}
	for r.p < len(r.b) && r.err == nil {
		id := r.byte()
		sub := &reader{b: r.bytes(int(r.u32()))}
		var p []byte
		switch id {
		case 1:
			n := sub.u32()
			p = binary.AppendUvarint(p, uint64(n))
			for range n {
				p = binary.AppendUvarint(p, uint64(ins.fn(sub.u32())))
				p = appendName(p, sub.name())
			}
		case 2:
			n := sub.u32()
			p = binary.AppendUvarint(p, uint64(n))
			for range n {
				p = binary.AppendUvarint(p, uint64(ins.fn(sub.u32())))
				m := sub.u32()
				p = binary.AppendUvarint(p, uint64(m))
				for range m {
					p = binary.AppendUvarint(p, uint64(sub.u32()))
					p = appendName(p, sub.name())
				}
			}
		case 3:
			continue
		default:
			p = sub.b
		}
		if sub.err != nil {
			return nil, fmt.Errorf("name subsection %d: %w", id, sub.err)
		}
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	return out, r.err
}

// Opcodes the rewrite reads or writes.
const (
	opLoop      = 0x03
	opIf        = 0x04
	opEnd       = 0x0b
	opCall      = 0x10
	opGlobalGet = 0x23
	opGlobalSet = 0x24
	opI32Const  = 0x41
	opI32Eqz    = 0x45
	opI32Sub    = 0x6b
	opRefFunc   = 0xd2
)

// expr copies an expression (up to and including its final end) from r to
// out, remapping function indices and, if loops, inserting the countdown
// after every loop header.
func (ins *instrumenter) expr(r *reader, out []byte, loops bool) ([]byte, error) {
	depth := 1
	for depth > 0 {
		if r.err != nil {
			return nil, r.err
		}
		if r.p >= len(r.b) {
			return nil, errors.New("expression without end")
		}
		at := r.p
		op := r.byte()
		switch {
		case op == 0x02 || op == opLoop || op == opIf: // blocktype
			r.s64()
			depth++
		case op == opEnd:
			depth--
		case op == opCall || op == 0x12 || op == opRefFunc: // call, return_call, ref.func
			out = append(out, op)
			out = binary.AppendUvarint(out, uint64(ins.fn(r.u32())))
			continue
		case op == 0x0c || op == 0x0d || (op >= 0x20 && op <= 0x26) || op == 0x3f || op == 0x40 || op == 0xd0:
			// br, br_if, local.*, global.*, table.get/set, memory.size/grow, ref.null
			r.u32()
		case op == 0x0e: // br_table
			for range r.u32() + 1 {
				r.u32()
			}
		case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
			r.u32()
			r.u32()
		case op == 0x1c: // select t*
			r.bytes(int(r.u32()))
		case op >= 0x28 && op <= 0x3e: // loads and stores: memarg
			r.u32()
			r.u32()
		case op == opI32Const || op == 0x42:
			r.s64()
		case op == 0x43:
			r.bytes(4)
		case op == 0x44:
			r.bytes(8)
		case op <= 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b || (op >= 0x45 && op <= 0xc4) || op == 0xd1:
			// no immediates
		case op == 0xfc:
			sub := r.u32()
			switch {
			case sub <= 7:
			case sub == 8 || sub == 10 || sub == 12 || sub == 14:
				r.u32()
				r.u32()
			case sub <= 17:
				r.u32()
			default:
				return nil, fmt.Errorf("unknown instruction 0xfc %d at offset %d", sub, at)
			}
		case op == 0xfd:
			sub := r.u32()
			switch {
			case sub <= 11 || sub == 92 || sub == 93: // v128 loads and stores
				r.u32()
				r.u32()
			case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
				r.bytes(16)
			case sub >= 21 && sub <= 34: // lane extract and replace
				r.byte()
			case sub >= 84 && sub <= 91: // lane loads and stores
				r.u32()
				r.u32()
				r.byte()
			}
		case op == 0xfe: // atomics
			if r.u32() == 3 { // atomic.fence
				r.byte()
			} else {
				r.u32()
				r.u32()
			}
		default:
			return nil, fmt.Errorf("unsupported instruction 0x%02x at offset %d", op, at)
		}
		if r.err != nil {
			return nil, r.err
		}
		out = append(out, r.b[at:r.p]...)
		if op == opLoop && loops {
			out = ins.appendCountdown(out)
		}
	}
	return out, nil
}

// appendCountdown appends, at a loop header:
//
//	global.get $budget; i32.const 1; i32.sub; global.set $budget
//	global.get $budget; i32.eqz
//	if; call $poll; i32.const Budget; global.set $budget; end
//
// wazero keeps a global's value within a block once loaded or stored, so
// the second global.get costs nothing; the first is a load, the set a store.
func (ins *instrumenter) appendCountdown(out []byte) []byte {
	g := binary.AppendUvarint(nil, uint64(ins.fuelGlobal))
	out = append(append(out, opGlobalGet), g...)
	out = append(out, opI32Const, 1, opI32Sub, opGlobalSet)
	out = append(out, g...)
	out = append(append(out, opGlobalGet), g...)
	out = append(out, opI32Eqz, opIf, 0x40, opCall)
	out = binary.AppendUvarint(out, uint64(ins.pollFunc))
	out = append(out, opI32Const)
	out = appendSLEB(out, Budget)
	out = append(append(out, opGlobalSet), g...)
	return append(out, opEnd)
}

// appendSLEB appends v in signed LEB128 (what i32.const takes; not Go's
// zigzag varint).
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// reader decodes the binary format; the first error sticks.
type reader struct {
	b   []byte
	p   int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated or malformed %s at offset %d", what, r.p)
	}
	r.p = len(r.b)
}

func (r *reader) byte() byte {
	if r.p >= len(r.b) {
		r.fail("byte")
		return 0
	}
	r.p++
	return r.b[r.p-1]
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || len(r.b)-r.p < n {
		r.fail("bytes")
		return nil
	}
	r.p += n
	return r.b[r.p-n : r.p]
}

func (r *reader) u32() uint32 {
	v, n := binary.Uvarint(r.b[min(r.p, len(r.b)):])
	if n <= 0 || v > 1<<32-1 {
		r.fail("unsigned integer")
		return 0
	}
	r.p += n
	return uint32(v)
}

// s64 skips a signed LEB128 (block types, i32 and i64 constants).
func (r *reader) s64() {
	for k := 0; ; k++ {
		if k == 10 {
			r.fail("signed integer")
			return
		}
		if r.byte()&0x80 == 0 || r.err != nil {
			return
		}
	}
}

func (r *reader) name() string {
	return string(r.bytes(int(r.u32())))
}

func (r *reader) limits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}
