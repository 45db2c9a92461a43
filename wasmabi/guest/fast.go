package guest

import (
	"unsafe"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// Map and FlatMap are the DoFns most modules are made of, so they have a
// fast path: bound to a transform at setup, they run a whole batch in one
// call (no call per element into the runtime), decode the common case of the
// string and bytes coders inline (no interface calls), and emit through a
// func specialised to the route and coder of the main output, which writes
// the output record in place. A Go guest pays for every call (each is a
// resumable state machine in Go's wasm port, arguments passed through
// memory), so what counts is calls per element and per output.

// fastPath is the specialised form of a Map or FlatMap DoFn.
type fastPath struct {
	// process identifies the Process func the DoFn was made with: a
	// caller who replaces Process gets the generic path, running theirs.
	process unsafe.Pointer
	// bind returns the per-element and per-batch funcs of one transform.
	bind func(e *Emitter) (one func(elem []byte) error, batch func(n int) error)
}

// Coder kinds with an inline fast path.
const (
	kindOther     = iota
	kindString    // String: decoding copies
	kindStringRef // StringRef: decoding aliases the element
	kindBytes     // Bytes: decoding aliases the element
)

func kindOf[T any](c Coder[T]) int {
	switch any(c).(type) {
	case stringCoder:
		return kindString
	case stringRefCoder:
		return kindStringRef
	case bytesCoder:
		return kindBytes
	}
	return kindOther
}

// decode decodes elem, which must hold exactly one value, with c of kind k.
// For the string and bytes coders, a length under 128 (a 1-byte varint) is
// decoded here; anything else goes through c. A kind other than kindOther
// implies T is string (kindString, kindStringRef) or []byte (kindBytes).
func decode[T any](k int, c Coder[T], elem []byte) (T, error) {
	if k != kindOther && len(elem) > 0 && elem[0] < 0x80 && int(elem[0]) == len(elem)-1 {
		b := elem[1:]
		switch k {
		case kindStringRef:
			s := stringOf(b)
			return *(*T)(unsafe.Pointer(&s)), nil
		case kindString:
			s := string(b)
			return *(*T)(unsafe.Pointer(&s)), nil
		case kindBytes:
			b = b[:len(b):len(b)]
			return *(*T)(unsafe.Pointer(&b)), nil
		}
	}
	return DecodeAll(c, elem)
}

// directOutput reports whether e's main output goes only to the host with
// c a string or bytes coder, and if so its stage output index: then an
// output o is written with outString(w, src, *(*string)(unsafe.Pointer(&o))),
// reading a string or []byte by its first two words, the data pointer and
// the length.
func directOutput[O any](e *Emitter, c Coder[O]) (w uint32, ok bool) {
	if len(e.t.routes) == 0 {
		return 0, false
	}
	r := e.t.routes[0]
	if k := kindOf(c); r.stageOutput < 0 || len(r.consumers) != 0 || (k != kindString && k != kindStringRef && k != kindBytes) {
		return 0, false
	}
	return uint32(r.stageOutput), true
}

// emitFunc returns the func that emits to e's main output with c: when only
// the host consumes that output, one that writes the record in place
// (inline for the string and bytes coders), else Emit.
func emitFunc[O any](e *Emitter, c Coder[O]) func(O) {
	if w, ok := directOutput(e, c); ok {
		return func(o O) {
			// A string of at most 16 bytes from the input buffer (a
			// DoFn emitting parts of its input) that fits in the output
			// buffer, the usual case, is written here, without a call
			// (it is too big for the compiler to inline): in Go's wasm
			// port every instruction of this is paid per output, so it
			// is laid out to run straight through, with one range check
			// per buffer, no bounds checks and two fixed-size copies
			// (the bytes after s in the input come along and are
			// overwritten by the next record). The stores are in
			// WebAssembly's byte order; elsewhere outString does it.
			s := *(*string)(unsafe.Pointer(&o))
			p, in := rt.outN, unsafe.Pointer(unsafe.StringData(s))
			if !littleEndian || len(s) > 16 || p >= rt.outShortEnd || uintptr(in)-rt.inBase >= rt.inShortEnd { // below the buffer, the offset wraps around
				outString(w, rt.src, s)
				return
			}
			r := unsafe.Add(rt.outBase, p)
			*(*uint64)(r) = uint64(w) | uint64(rt.src)<<32                       // RecordOutput, RecordSource
			*(*uint64)(unsafe.Add(r, 8)) = uint64(1+len(s)) | uint64(len(s))<<32 // RecordLen, then the length byte
			a, b := *(*uint64)(in), *(*uint64)(unsafe.Add(in, 8))
			*(*uint64)(unsafe.Add(r, abi.RecordHeaderSize+1)) = a
			*(*uint64)(unsafe.Add(r, abi.RecordHeaderSize+9)) = b
			rt.outN = p + abi.RecordHeaderSize + 1 + len(s)
		}
	}
	if len(e.t.routes) > 0 {
		if r := e.t.routes[0]; r.stageOutput >= 0 && len(r.consumers) == 0 {
			w := uint32(r.stageOutput)
			return func(o O) { outValue(w, rt.src, c, o) }
		}
	}
	return func(o O) { Emit(e, 0, c, o) }
}

// decodeRef decodes elem inline if k is kindStringRef or kindBytes and its
// length fits a 1-byte varint, the common case: then v (a string or []byte)
// aliases elem.
func decodeRef[T any](k int, elem []byte) (v T, ok bool) {
	if (k == kindStringRef || k == kindBytes) && len(elem) > 0 && elem[0] < 0x80 && int(elem[0]) == len(elem)-1 {
		b := elem[1:len(elem):len(elem)] // read as a string, its first two words
		return *(*T)(unsafe.Pointer(&b)), true
	}
	return v, false
}

// Map returns a DoFn emitting fn(v) for every element v.
func Map[I, O any](name string, in Coder[I], out Coder[O], fn func(I) (O, error)) DoFn {
	process := func(elem []byte, e *Emitter) error {
		v, err := DecodeAll(in, elem)
		if err != nil {
			return err
		}
		o, err := fn(v)
		if err != nil {
			return err
		}
		Emit(e, 0, out, o)
		return nil
	}
	inKind := kindOf(in)
	bind := func(e *Emitter) (func([]byte) error, func(int) error) {
		emit := emitFunc(e, out)
		one := func(elem []byte) error {
			v, err := decode(inKind, in, elem)
			if err != nil {
				return err
			}
			o, err := fn(v)
			if err != nil {
				return err
			}
			emit(o)
			return nil
		}
		w, direct := directOutput(e, out)
		batch := func(n int) error {
			for i := range n {
				rt.src = uint32(i)
				elem := element(i)
				v, ok := decodeRef[I](inKind, elem)
				if !ok {
					var err error
					if v, err = decode(inKind, in, elem); err != nil {
						return err
					}
				}
				o, err := fn(v)
				if err != nil {
					return err
				}
				if direct { // no call of emit
					outString(w, uint32(i), *(*string)(unsafe.Pointer(&o)))
				} else {
					emit(o)
				}
				if rt.failed != nil {
					return errFailed
				}
			}
			return nil
		}
		return one, batch
	}
	return DoFn{Name: name, Process: process, fast: &fastPath{process: funcID(process), bind: bind}}
}

// FlatMap returns a DoFn calling fn for every element with an emit func for
// the main output.
func FlatMap[I, O any](name string, in Coder[I], out Coder[O], fn func(I, func(O)) error) DoFn {
	var (
		last *Emitter
		emit func(O)
	)
	process := func(elem []byte, e *Emitter) error {
		v, err := DecodeAll(in, elem)
		if err != nil {
			return err
		}
		if e != last { // one closure per transform, not per element
			last = e
			emit = func(o O) { Emit(e, 0, out, o) }
		}
		return fn(v, emit)
	}
	inKind := kindOf(in)
	bind := func(e *Emitter) (func([]byte) error, func(int) error) {
		emit := emitFunc(e, out)
		one := func(elem []byte) error {
			v, err := decode(inKind, in, elem)
			if err != nil {
				return err
			}
			return fn(v, emit)
		}
		ref := inKind == kindStringRef || inKind == kindBytes
		strFn, _ := any(fn).(func(string, func(string)) error) // nil unless I and O are string
		strEmit, _ := any(emit).(func(string))
		if inKind != kindStringRef || strEmit == nil {
			strFn = nil
		}
		batch := func(n int) error {
			for i := 0; i < n; i++ {
				if ref {
					// Runs of elements decoded inline, in a loop of
					// their own: falling through, no merge with the
					// general decoding below.
					if strFn != nil {
						var err error
						if i, err = flatMapStrings(strFn, strEmit, i, n); err != nil || i == n {
							return err
						}
					} else {
						for ; i < n; i++ {
							rt.src = uint32(i)
							elem := element(i)
							if len(elem) == 0 || elem[0] >= 0x80 || int(elem[0]) != len(elem)-1 {
								break
							}
							b := elem[1:len(elem):len(elem)] // read as a string, its first two words
							if err := fn(*(*I)(unsafe.Pointer(&b)), emit); err != nil {
								return err
							}
							if rt.failed != nil {
								return errFailed
							}
						}
						if i == n {
							return nil
						}
					}
				}
				rt.src = uint32(i)
				v, err := decode(inKind, in, element(i))
				if err != nil {
					return err
				}
				if err := fn(v, emit); err != nil {
					return err
				}
				if rt.failed != nil {
					return errFailed
				}
			}
			return nil
		}
		return one, batch
	}
	return DoFn{Name: name, Process: process, fast: &fastPath{process: funcID(process), bind: bind}}
}

// flatMapStrings runs fn, a FlatMap of strings, on the elements of the
// batch from i on, up to n or the first that is not a string under 128
// bytes, and returns where it stopped. It is FlatMap's batch loop for the
// most common DoFn of all, string to strings, as a small function that is
// not generic: Go compiles a generic function with a dictionary argument,
// and in its wasm port the size of a function and the values live in it
// cost every iteration (each jump goes through the function's dispatch
// table). Measured with wordfns.Split: 5% fewer instructions per element.
func flatMapStrings(fn func(string, func(string)) error, emit func(string), i, n int) (int, error) {
	descs, in, inLen := unsafe.Pointer(unsafe.SliceData(rt.descs)), unsafe.Pointer(unsafe.SliceData(rt.in)), uint32(len(rt.in))
	for ; i < n; i++ {
		d := unsafe.Add(descs, i*abi.DescSize)
		lo, hi := load32((*[4]byte)(unsafe.Add(d, abi.DescElement))), load32((*[4]byte)(unsafe.Add(d, abi.DescEnd)))
		if lo >= hi || hi > inLen {
			break
		}
		p := unsafe.Add(in, lo)
		if l := *(*byte)(p); l >= 0x80 || uint32(l) != hi-lo-1 {
			break
		}
		rt.src = uint32(i)
		if err := fn(unsafe.String((*byte)(unsafe.Add(p, 1)), hi-lo-1), emit); err != nil {
			return i, err
		}
		if rt.failed != nil {
			return i, errFailed
		}
	}
	return i, nil
}
