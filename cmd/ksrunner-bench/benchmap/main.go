// Command benchmap is the WASM module of `ksrunner-bench kafka`: the DoFn
// "UpperValue", the stateless map the bench runs between a Kafka read and a
// Kafka write. Built (by the bench itself) with
//
//	GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext go build -buildmode=c-shared -o benchmap.wasm ./cmd/ksrunner-bench/benchmap
//
// Its input is what kafkaio.Read emits, KV<nullable bytes, nullable bytes>;
// its output is KV<bytes, bytes>, the coder the Go SDK gives the bench's
// harness map (func(k, v []byte) ([]byte, []byte)), which kafkaio.Write
// reads. The bench checks every output value, so a coder mismatch fails it.
package main

import (
	"errors"

	"github.com/ksrunner/ksrunner/wasmabi/guest"
)

func init() {
	var out []byte // reused: Output copies
	guest.Register(guest.DoFn{Name: "UpperValue", Process: func(elem []byte, e *guest.Emitter) error {
		k, rest, err := nullableBytes(elem)
		if err != nil {
			return errors.New("UpperValue: key: " + err.Error())
		}
		v, _, err := nullableBytes(rest)
		if err != nil {
			return errors.New("UpperValue: value: " + err.Error())
		}
		out = guest.AppendVarUint(out[:0], uint64(len(k)))
		out = append(out, k...)
		out = guest.AppendVarUint(out, uint64(len(v)))
		for _, c := range v {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
		}
		e.Output(out)
		return nil
	}})
}

// nullableBytes decodes beam:coder:nullable:v1 of beam:coder:bytes:v1 (a
// presence byte, then a varint length and the bytes); a null is empty.
func nullableBytes(b []byte) (v, rest []byte, err error) {
	if len(b) == 0 {
		return nil, nil, errors.New("truncated nullable")
	}
	if b[0] == 0 {
		return nil, b[1:], nil
	}
	n, rest, err := guest.DecodeVarUint(b[1:])
	if err != nil {
		return nil, nil, err
	}
	if uint64(len(rest)) < n {
		return nil, nil, errors.New("truncated bytes")
	}
	return rest[:n], rest[n:], nil
}

// main is required by the toolchain; a reactor module's main never runs.
func main() {}
