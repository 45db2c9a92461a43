// Command guest is the WASM module of the WASM wordcount example: the DoFns
// "ExtractWords" and "FormatCount", the WASM versions of the wordcount's
// extractWords and formatCount (package examples/wordcount/wc) with exactly
// their output. Build it with
//
//	GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext go build -buildmode=c-shared -o wordcount.wasm ./examples/wasm/wordcount/guest
package main

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/ksrunner/ksrunner/wasmabi/guest"
)

var words = guest.NewCounter("wordcount", "words")

func init() {
	// ExtractWords: string -> its words, the maximal runs of [a-zA-Z'] (the
	// harness version's regexp, without the regexp).
	guest.Register(guest.FlatMap("ExtractWords", guest.StringRef, guest.String, func(line string, emit func(string)) error {
		start := -1
		for i := 0; i < len(line); i++ {
			if wordByte[line[i]] {
				if start < 0 {
					start = i
				}
			} else if start >= 0 {
				emit(line[start:i])
				words.Inc(1)
				start = -1
			}
		}
		if start >= 0 {
			emit(line[start:])
			words.Inc(1)
		}
		return nil
	}))
	// FormatCount: KV<string, int> -> "word: count". The Go SDK codes an
	// int with its custom varint (zigzag) coder, length-prefixed.
	guest.Register(guest.DoFn{Name: "FormatCount", Process: func(elem []byte, e *guest.Emitter) error {
		kv, err := guest.DecodeAll(guest.KVOf(guest.StringRef, guest.LengthPrefixed[int64](zigzag{})), elem)
		if err != nil {
			return err
		}
		buf = append(append(buf[:0], kv.Key...), ": "...)
		buf = strconv.AppendInt(buf, kv.Value, 10)
		guest.Emit(e, 0, guest.Bytes, buf) // bytes and string_utf8 encode alike
		return nil
	}})
}

var (
	wordByte [256]bool
	buf      []byte
)

func init() {
	for c := 'a'; c <= 'z'; c++ {
		wordByte[c], wordByte[c-'a'+'A'] = true, true
	}
	wordByte['\''] = true
}

// zigzag is the Go SDK's coder of Go ints (binary.Varint).
type zigzag struct{}

func (zigzag) Append(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

func (zigzag) Decode(b []byte) (int64, []byte, error) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, errors.New("bad zigzag varint")
	}
	return v, b[n:], nil
}

// main is required by the toolchain; a reactor module's main never runs.
func main() {}
