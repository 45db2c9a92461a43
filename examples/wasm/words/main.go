// Command words is an example WASM module for ksrunner: the DoFns "Split"
// (a line into words) and "Upper" (ASCII upper-case), both over UTF-8
// strings. Build it with
//
//	GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext go build -buildmode=c-shared -o words.wasm ./examples/wasm/words
//
// and map transforms to it with ksrunner's --stage_wasm option.
package main

import (
	"github.com/ksrunner/ksrunner/examples/wasm/wordfns"
	"github.com/ksrunner/ksrunner/wasmabi/guest"
)

func init() {
	// Split is exactly the DoFn `ksrunner-bench wasm` runs on the Fn API
	// harness and in plain Go. (The WASM wordcount's module shows metrics.)
	guest.Register(guest.FlatMap("Split", guest.StringRef, guest.String, wordfns.Split))
	guest.Register(guest.Map("Upper", guest.StringRef, guest.String, func(s string) (string, error) {
		return wordfns.Upper(s), nil
	}))
}

// main is required by the toolchain; a reactor module's main never runs.
func main() {}
