package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Coder converts between Go values and Beam's encoding of a standard coder in
// the nested context (the context of elements in windowed values).
type Coder[T any] interface {
	// Append appends the encoding of v to dst.
	Append(dst []byte, v T) []byte
	// Decode decodes one value from the start of b and returns the rest.
	Decode(b []byte) (v T, rest []byte, err error)
}

// DecodeAll decodes b, which must hold exactly one value.
func DecodeAll[T any](c Coder[T], b []byte) (T, error) {
	v, rest, err := c.Decode(b)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes after the value", len(rest))
	}
	return v, err
}

var errShort = errors.New("encoded value truncated")

// Standard coders.
var (
	// Bytes is beam:coder:bytes:v1. Decoded slices alias the input.
	Bytes Coder[[]byte] = bytesCoder{}
	// String is beam:coder:string_utf8:v1. Decoded strings are copies.
	String Coder[string] = stringCoder{}
	// StringRef is String decoding without a copy: a decoded string aliases
	// the element and is valid only during the Process call that received
	// it; retaining it (in a map, across elements) reads garbage later. It
	// saves an allocation per element, which is costly in a Go guest, for
	// DoFns that consume or emit the string before returning.
	StringRef Coder[string] = stringRefCoder{}
	// VarInt is beam:coder:varint:v1.
	VarInt Coder[int64] = varIntCoder{}
	// Double is beam:coder:double:v1.
	Double Coder[float64] = doubleCoder{}
	// Bool is beam:coder:bool:v1.
	Bool Coder[bool] = boolCoder{}
)

// KV is a key-value pair, the value of a KVOf coder.
type KV[K, V any] struct {
	Key   K
	Value V
}

// KVOf returns beam:coder:kv:v1 of the given key and value coders.
func KVOf[K, V any](k Coder[K], v Coder[V]) Coder[KV[K, V]] { return kvCoder[K, V]{k, v} }

// IterableOf returns beam:coder:iterable:v1 of the given element coder.
// Decoding accepts both the counted and the block (state-backed, -1 count)
// encodings.
func IterableOf[T any](elem Coder[T]) Coder[[]T] { return iterableCoder[T]{elem} }

// LengthPrefixed returns beam:coder:length_prefix:v1 around c.
func LengthPrefixed[T any](c Coder[T]) Coder[T] { return lpCoder[T]{c} }

// AppendVarUint appends Beam's varint encoding of v (LEB128).
func AppendVarUint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

// DecodeVarUint decodes a Beam varint from the start of b.
func DecodeVarUint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, b, errors.New("malformed varint")
	}
	return v, b[n:], nil
}

func decodeLen(b []byte) (int, []byte, error) {
	n, rest, err := DecodeVarUint(b)
	if err != nil {
		return 0, b, err
	}
	if n > uint64(len(rest)) {
		return 0, b, errShort
	}
	return int(n), rest, nil
}

type bytesCoder struct{}

func (bytesCoder) Append(dst, v []byte) []byte {
	return append(AppendVarUint(dst, uint64(len(v))), v...)
}

func (bytesCoder) Decode(b []byte) ([]byte, []byte, error) {
	n, rest, err := decodeLen(b)
	if err != nil {
		return nil, b, err
	}
	return rest[:n:n], rest[n:], nil
}

type stringCoder struct{}

func (stringCoder) Append(dst []byte, v string) []byte {
	return append(AppendVarUint(dst, uint64(len(v))), v...)
}

func (stringCoder) Decode(b []byte) (string, []byte, error) {
	n, rest, err := decodeLen(b)
	if err != nil {
		return "", b, err
	}
	return string(rest[:n]), rest[n:], nil
}

type stringRefCoder struct{ stringCoder }

func (stringRefCoder) Decode(b []byte) (string, []byte, error) {
	n, rest, err := decodeLen(b)
	if err != nil {
		return "", b, err
	}
	return unsafe.String(unsafe.SliceData(rest), n), rest[n:], nil
}

type varIntCoder struct{}

func (varIntCoder) Append(dst []byte, v int64) []byte { return AppendVarUint(dst, uint64(v)) }

func (varIntCoder) Decode(b []byte) (int64, []byte, error) {
	v, rest, err := DecodeVarUint(b)
	return int64(v), rest, err
}

type doubleCoder struct{}

func (doubleCoder) Append(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v))
}

func (doubleCoder) Decode(b []byte) (float64, []byte, error) {
	if len(b) < 8 {
		return 0, b, errShort
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), b[8:], nil
}

type boolCoder struct{}

func (boolCoder) Append(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func (boolCoder) Decode(b []byte) (bool, []byte, error) {
	if len(b) < 1 {
		return false, b, errShort
	}
	switch b[0] {
	case 0:
		return false, b[1:], nil
	case 1:
		return true, b[1:], nil
	}
	return false, b, fmt.Errorf("bool byte %d", b[0])
}

type kvCoder[K, V any] struct {
	k Coder[K]
	v Coder[V]
}

func (c kvCoder[K, V]) Append(dst []byte, v KV[K, V]) []byte {
	return c.v.Append(c.k.Append(dst, v.Key), v.Value)
}

func (c kvCoder[K, V]) Decode(b []byte) (KV[K, V], []byte, error) {
	var kv KV[K, V]
	var err error
	rest := b
	if kv.Key, rest, err = c.k.Decode(rest); err != nil {
		return kv, b, fmt.Errorf("kv key: %w", err)
	}
	if kv.Value, rest, err = c.v.Decode(rest); err != nil {
		return kv, b, fmt.Errorf("kv value: %w", err)
	}
	return kv, rest, nil
}

type iterableCoder[T any] struct{ elem Coder[T] }

func (c iterableCoder[T]) Append(dst []byte, vs []T) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(vs)))
	for _, v := range vs {
		dst = c.elem.Append(dst, v)
	}
	return dst
}

func (c iterableCoder[T]) Decode(b []byte) ([]T, []byte, error) {
	if len(b) < 4 {
		return nil, b, errShort
	}
	n := int32(binary.BigEndian.Uint32(b))
	rest := b[4:]
	var vs []T
	appendN := func(n uint64) error {
		for ; n > 0; n-- {
			v, r, err := c.elem.Decode(rest)
			if err != nil {
				return fmt.Errorf("iterable element %d: %w", len(vs), err)
			}
			vs, rest = append(vs, v), r
		}
		return nil
	}
	switch {
	case n >= 0:
		vs = make([]T, 0, min(int(n), len(rest))) // a corrupt count must not allocate wildly
		if err := appendN(uint64(n)); err != nil {
			return nil, b, err
		}
	case n == -1:
		for {
			m, r, err := DecodeVarUint(rest)
			if err != nil {
				return nil, b, fmt.Errorf("iterable block: %w", err)
			}
			rest = r
			if m == 0 {
				break
			}
			if err := appendN(m); err != nil {
				return nil, b, err
			}
		}
	default:
		return nil, b, fmt.Errorf("iterable count %d", n)
	}
	return vs, rest, nil
}

type lpCoder[T any] struct{ c Coder[T] }

func (c lpCoder[T]) Append(dst []byte, v T) []byte {
	// Encode after a 1-byte length placeholder, then fix the length up.
	start := len(dst)
	dst = append(dst, 0)
	dst = c.c.Append(dst, v)
	n := len(dst) - start - 1
	var hdr [binary.MaxVarintLen64]byte
	h := binary.PutUvarint(hdr[:], uint64(n))
	if h == 1 {
		dst[start] = hdr[0]
		return dst
	}
	dst = append(dst, hdr[:h-1]...) // room for the longer prefix
	copy(dst[start+h:], dst[start+1:start+1+n])
	copy(dst[start:], hdr[:h])
	return dst
}

func (c lpCoder[T]) Decode(b []byte) (T, []byte, error) {
	var zero T
	n, rest, err := decodeLen(b)
	if err != nil {
		return zero, b, err
	}
	v, err := DecodeAll(c.c, rest[:n])
	if err != nil {
		return zero, b, fmt.Errorf("length-prefixed value: %w", err)
	}
	return v, rest[n:], nil
}
