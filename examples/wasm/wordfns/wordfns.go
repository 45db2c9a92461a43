// Package wordfns holds the plain Go functions of the word-processing WASM
// example. They know nothing about WASM: the example module (package words)
// wraps them as DoFns with the guest SDK, and the wasmabi benchmarks run the
// very same functions natively to compare.
package wordfns

// Split emits the words of line: maximal runs of bytes other than ASCII
// space, tab, newline and carriage return. The emitted strings alias line.
// It never fails; the error result gives it the signature of a DoFn (a Go
// SDK DoFn, and guest.FlatMap's function), so that it is the DoFn itself
// rather than called from one: in a Go WASM guest each call costs about as
// much as splitting a short word.
func Split(line string, emit func(string)) error {
	start := -1
	for i := 0; i < len(line); i++ {
		if separator[line[i]] {
			if start >= 0 {
				emit(line[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		emit(line[start:])
	}
	return nil
}

// separator marks the bytes Split splits at (a table: one load per byte,
// which is also what runs fastest in a Go WASM guest).
var separator = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// Upper returns s with ASCII letters upper-cased.
func Upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}
