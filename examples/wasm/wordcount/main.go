// Command wordcount is the wordcount of examples/wordcount with its split
// and format steps run as WASM DoFns (module ./guest) by ksrunner's WASM
// executor. The pipeline is the same Go SDK pipeline (package wc); only the
// stage_wasm pipeline option differs. Build the module, then run:
//
//	GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext go build -buildmode=c-shared -o /tmp/wordcount.wasm ./examples/wasm/wordcount/guest
//	go run ./examples/wasm/wordcount --module=/tmp/wordcount.wasm
//
// which is short for
//
//	go run ./examples/wasm/wordcount \
//	  --stage_wasm='CountWords/wc.extractWords=/tmp/wordcount.wasm#ExtractWords' \
//	  --stage_wasm='CountWords/wc.formatCount=/tmp/wordcount.wasm#FormatCount'
//
// With no --endpoint it starts a ksrunner job server and an embedded broker
// in this process; with --endpoint=HOST:PORT it submits to a running
// `ksrunner jobserver` (which must be able to read the module file).
//
// The --stage_wasm flag is the runner package's (host/kafkastreams defines
// a flag per ksrunner job option; a Go SDK pipeline sends the flags it sets
// as pipeline options). A pipeline may also set the option in code before
// running:
//
//	beam.PipelineOptions.Set("stage_wasm", "Split*=/path/split.wasm,Format*=/path/format.wasm")
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/ksrunner/ksrunner/examples/wordcount/wc"
)

var (
	module = flag.String("module", "", "the wordcount WASM module (./guest built for wasip1): maps the split and format steps to it unless --stage_wasm is given")
	input  = flag.String("input", "", "text file to count (default: a built-in text)")
	output = flag.String("output", "", "where to write the counts (default: a temporary file, printed)")
)

// StageWASM returns the stage_wasm entries mapping the wordcount's split
// and format steps to the DoFns of the module at path.
func StageWASM(path string) []string {
	return []string{
		"CountWords/wc.extractWords=" + path + "#ExtractWords",
		"CountWords/wc.formatCount=" + path + "#FormatCount",
	}
}

func main() {
	flag.Parse()
	// The runner's repeatable flag: its value is the entries joined by
	// commas, which ksrunner splits again.
	stages := flag.Lookup("stage_wasm").Value
	if stages.String() == "" && *module != "" {
		abs, err := filepath.Abs(*module)
		if err != nil {
			log.Fatal(err)
		}
		for _, s := range StageWASM(abs) {
			flag.Set("stage_wasm", s)
		}
	}
	if stages.String() == "" {
		log.Fatal("no WASM stages: give --module=wordcount.wasm or --stage_wasm entries")
	}
	beam.Init()
	if err := wc.Run(context.Background(), *input, *output, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
