// Command guest is the WASM module of the wasmabi tests and benchmarks: a
// DoFn per behaviour under test.
package main

import (
	"errors"
	"strings"
	"time"

	"github.com/ksrunner/ksrunner/examples/wasm/wordfns"
	"github.com/ksrunner/ksrunner/wasmabi/guest"
)

var (
	lines   = guest.NewCounter("test", "lines")
	words   = guest.NewCounter("test", "words")
	wordLen = guest.NewDistribution("test", "word_len")
	hoard   [][]byte
)

func init() {
	guest.Register(guest.FlatMap("Split", guest.StringRef, guest.String, wordfns.Split))
	guest.Register(guest.Map("Upper", guest.StringRef, guest.String, func(s string) (string, error) {
		return wordfns.Upper(s), nil
	}))
	// Null and Echo measure the SDK's fixed costs per element.
	guest.Register(guest.DoFn{Name: "Null", Process: func([]byte, *guest.Emitter) error { return nil }})
	guest.Register(guest.DoFn{Name: "Echo", Process: func(elem []byte, e *guest.Emitter) error {
		e.Output(elem)
		return nil
	}})
	guest.Register(guest.FlatMap("Decode", guest.StringRef, guest.String, func(line string, emit func(string)) error {
		return nil
	}))
	// Route sends words of up to 3 bytes to "short", longer ones to "long".
	guest.Register(guest.DoFn{Name: "Route", Outputs: []string{"short", "long"},
		Process: func(elem []byte, e *guest.Emitter) error {
			w, err := guest.DecodeAll(guest.String, elem)
			if err != nil {
				return err
			}
			if len(w) <= 3 {
				e.EmitTo(0, elem)
			} else {
				e.EmitTo(1, elem)
			}
			return nil
		}})
	// Stamp emits each element with its timestamp plus one second.
	guest.Register(guest.DoFn{Name: "Stamp", Process: func(elem []byte, e *guest.Emitter) error {
		e.EmitAt(0, e.Timestamp()+1000, elem)
		return nil
	}})
	guest.Register(guest.FlatMap("CountWords", guest.String, guest.String, func(line string, emit func(string)) error {
		lines.Inc(1)
		return wordfns.Split(line, func(w string) {
			words.Inc(1)
			wordLen.Update(int64(len(w)))
			emit(w)
		})
	}))
	guest.Register(guest.Map("Fail", guest.String, guest.String, func(s string) (string, error) {
		if s == "bad" {
			return "", errors.New("bad element: " + s)
		}
		return s, nil
	}))
	guest.Register(guest.Map("Panic", guest.String, guest.String, func(s string) (string, error) {
		if s == "bad" {
			panic("boom on " + s)
		}
		return s, nil
	}))
	guest.Register(guest.Map("NilDeref", guest.String, guest.String, func(s string) (string, error) {
		var p *string
		if s == "bad" {
			return *p, nil
		}
		return s, nil
	}))
	// Fatal crashes the Go runtime (an unrecovered panic on another
	// goroutine), which traps.
	guest.Register(guest.Map("Fatal", guest.String, guest.String, func(s string) (string, error) {
		if s == "bad" {
			go func() { panic("fatal on another goroutine") }()
			select {}
		}
		return s, nil
	}))
	// Spin never returns on "bad"; it logs "spinning" first, so
	// that a test knows when guest code is spinning.
	guest.Register(guest.Map("Spin", guest.String, guest.String, func(s string) (string, error) {
		n := 0
		if s == "bad" {
			guest.Log(guest.LogWarn, "spinning")
		}
		for s == "bad" {
			n++
		}
		return s, nil
	}))
	// Sleepy sleeps for the duration the element names (e.g. "1s").
	guest.Register(guest.Map("Sleepy", guest.String, guest.String, func(s string) (string, error) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return "", err
		}
		for end := time.Now().Add(d); time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
		return s, nil
	}))
	// Nap sleeps for the duration the element names in one time.Sleep.
	guest.Register(guest.Map("Nap", guest.String, guest.String, func(s string) (string, error) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return "", err
		}
		time.Sleep(d)
		return s, nil
	}))
	// Hog, on "bad", allocates and keeps 1 MiB at a time until memory runs
	// out. It writes to every page it allocates, so that the memory is
	// really resident in the host (fresh pages are zero: Go would not touch
	// them otherwise).
	guest.Register(guest.Map("Hog", guest.String, guest.String, func(s string) (string, error) {
		for s == "bad" {
			b := make([]byte, 1<<20)
			for k := 0; k < len(b); k += 4096 {
				b[k] = 1
			}
			hoard = append(hoard, b)
		}
		return s, nil
	}))
	// Lifecycle logs and fails in FinishBundle when told to.
	failFinish := false
	guest.Register(guest.DoFn{Name: "Lifecycle",
		StartBundle: func() error { failFinish = false; return nil },
		Process: func(elem []byte, e *guest.Emitter) error {
			s, err := guest.DecodeAll(guest.String, elem)
			if err != nil {
				return err
			}
			guest.Log(guest.LogInfo, "lifecycle got "+strings.ToUpper(s))
			failFinish = failFinish || s == "fail-finish"
			e.Output(elem)
			return nil
		},
		FinishBundle: func() error {
			if failFinish {
				return errors.New("finish failed as asked")
			}
			return nil
		},
	})
}

func main() {}
