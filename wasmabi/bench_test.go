package wasmabi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/examples/wasm/wordfns"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/wasmabi/guest"
)

const (
	benchElements = 1_000_000
	benchChunk    = 4096 // elements per Process call, like a batch of Kafka records
)

// benchInput is 1M short strings (1-4 words, ~20 bytes) as windowed values in
// the global window, in chunks of benchChunk.
func benchInput(b testing.TB) [][]byte {
	r := rand.New(rand.NewPCG(3, 4))
	vocab := strings.Fields("the quick brown fox jumps over a lazy dog and runs far away into deep woods")
	var chunks [][]byte
	lines := make([]string, 0, benchChunk)
	for n := 0; n < benchElements; n++ {
		var sb strings.Builder
		for w := range 1 + r.IntN(4) {
			if w > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(vocab[r.IntN(len(vocab))])
		}
		lines = append(lines, sb.String())
		if len(lines) == benchChunk || n == benchElements-1 {
			chunks = append(chunks, encodeStrings(b, lines...))
			lines = lines[:0]
		}
	}
	return chunks
}

// BenchmarkMap maps 1M short strings through Split (into words) and Upper:
// the WASM executor with the Go guest, the same with Interruptible, and the
// same functions as plain Go over the same encoded chunks (scan the windowed
// values, decode, apply, re-encode as windowed values). elems/s counts input
// elements.
func BenchmarkMap(b *testing.B) {
	benchMap(b, []string{"Split", "Upper"})
}

// BenchmarkSDK measures the guest SDK's fixed costs: Null ignores elements,
// Echo emits them unchanged, Decode decodes strings.
func BenchmarkSDK(b *testing.B) {
	benchMap(b, []string{"Null", "Echo", "Decode"})
}

func benchMap(b *testing.B, fns []string) {
	chunks := benchInput(b)
	wasm := guestModule(b)
	sink := func(string, []byte) error { return nil }
	for _, fn := range fns {
		for _, interruptible := range []bool{false, true} {
			name := fn + "/wasm"
			if interruptible {
				name += "-interruptible"
			}
			b.Run(name, func(b *testing.B) {
				m := compile(b, wasm, Config{Interruptible: interruptible})
				i := instantiate(b, m, stage(fn))
				cpu := startCPU()
				for b.Loop() {
					bun, err := i.StartBundle(context.Background(), sink)
					if err != nil {
						b.Fatal(err)
					}
					for _, c := range chunks {
						if err := bun.Process(c); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := bun.Finish(); err != nil {
						b.Fatal(err)
					}
				}
				cpu.report(b)
			})
		}
		b.Run(fn+"/go", func(b *testing.B) {
			s, err := shuffle.NewElementCodec(testCoders(), "wv")
			if err != nil {
				b.Fatal(err)
			}
			var out []byte
			cpu := startCPU()
			for b.Loop() {
				for _, c := range chunks {
					out = plainGo(b, s, fn, c, out[:0])
					if err := sink("out", out); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu.report(b)
		})
	}
}

// cpuClock measures the process's CPU time, a steadier figure than wall
// time on a shared machine: the work is single-threaded (the guest runs on
// the calling goroutine), so elements per CPU-second is its throughput on
// an idle core (slightly pessimistic: GC threads count too).
type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{processCPU()} }

// report reports elements per wall-clock second and per CPU second.
func (c cpuClock) report(b *testing.B) {
	n := float64(benchElements) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "elems/s")
	if cpu := processCPU() - c.start; cpu > 0 {
		b.ReportMetric(n/cpu.Seconds(), "elems/cpu-s")
	}
}

// plainGo is the native baseline: what an in-process Go executor would do
// with the same functions and coders the guest uses.
func plainGo(b *testing.B, s *shuffle.ElementCodec, fn string, data, out []byte) []byte {
	for off := 0; off < len(data); {
		v, err := nextValue(s, data, off)
		if err != nil {
			b.Fatal(err)
		}
		line, err := guest.DecodeAll(guest.StringRef, data[v.Elem:v.End])
		if err != nil {
			b.Fatal(err)
		}
		hdr := data[v.Start:v.Elem]
		switch fn {
		case "Split":
			wordfns.Split(line, func(w string) {
				out = guest.String.Append(append(out, hdr...), w)
			})
		case "Upper":
			out = guest.String.Append(append(out, hdr...), wordfns.Upper(line))
		case "Echo":
			out = append(out, data[v.Start:v.End]...)
		case "Null", "Decode": // scan (and decode) only
		default:
			b.Fatalf("no plain Go version of %s", fn)
		}
		off = v.End
	}
	return out
}

// nextValue locates the windowed value starting at data[off:]; the input is
// whole values only, so a short one is an error.
func nextValue(c *shuffle.ElementCodec, data []byte, off int) (shuffle.Location, error) {
	wv, err := c.Next(data[off:])
	if err != nil {
		return shuffle.Location{}, fmt.Errorf("value at offset %d: %w", off, err)
	}
	end := off + len(wv.Raw)
	elem := end - len(wv.Elem)
	return shuffle.Location{Timestamp: wv.Timestamp, Start: off, Pane: elem - len(wv.Pane), Elem: elem, End: end}, nil
}
