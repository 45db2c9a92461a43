// Command wordcount counts the words of a text with the Beam Go SDK on
// ksrunner, through the runner of package host/kafkastreams.
//
// With no --endpoint it starts a ksrunner job server and an embedded Kafka
// broker in this process, submits itself to them and prints the counts:
//
//	go run ./examples/wordcount
//
// With --endpoint it submits to a running `ksrunner jobserver`; the flags of
// ksrunner's job options (--internal_parallelism, --application_id, ...)
// go with the job:
//
//	go run ./examples/wordcount --endpoint=localhost:8099 --input=some.txt
package main

import (
	"context"
	"flag"
	"log"
	"os"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/ksrunner/ksrunner/examples/wordcount/wc"
)

var (
	input  = flag.String("input", "", "text file to count (default: a built-in text)")
	output = flag.String("output", "", "where to write the counts (default: a temporary file, printed)")
)

func main() {
	flag.Parse()
	beam.Init()

	if err := wc.Run(context.Background(), *input, *output, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
