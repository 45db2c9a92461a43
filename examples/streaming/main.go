// Command streaming runs an unbounded Beam Go pipeline on ksrunner (the
// runner of package host/kafkastreams) that
// reads and writes Kafka through the Go SDK's KafkaIO
// (io/xlang/kafkaio), which ksrunner expands in-process (imported as
// github.com/ksrunner/ksrunner/host/kafkaio: no expansion service, no Java)
// and runs natively: one task per input partition, exactly once.
//
// It creates the topics words (4 partitions) and counts (1 partition) if
// they are missing, fills words with a generated stream (--records records
// over 20 keys, String key, Long value 1, event timestamps spread over three
// minutes in the recent past), and runs the job (application_id
// streaming-example) that reads words, counts per key in 10-second fixed
// windows and writes one "key,windowStart,count" line per key and window
// (the record value, as Kafka's StringSerializer writes it) to counts. It
// reads counts (read_committed) until every window it expects has arrived,
// prints a summary, cancels the job and exits 0; it exits 1 if a count is
// wrong or the windows do not all arrive by --deadline.
//
// With no flags it starts an embedded (in-memory) Kafka broker and a
// ksrunner job server in this process and submits itself to them
// (LOOPBACK):
//
//	go run ./examples/streaming
//
// With --bootstrap_servers it uses that Kafka cluster instead of the
// embedded broker, and with --endpoint it submits to a running `ksrunner
// jobserver` (which must use the same cluster):
//
//	go run ./cmd/ksrunner jobserver --bootstrap_servers=localhost:9092
//	go run ./examples/streaming --bootstrap_servers=localhost:9092 --endpoint=localhost:8099
//
// On a real cluster a second run appends to words and resumes the
// application streaming-example from its committed offsets; the example
// only awaits the windows of the records it produced itself (it reads
// counts from where it ended before the job started). Give a new
// --application_id to start over from the beginning of words.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// --bootstrap_servers and --application_id are the runner package's flags
// (host/kafkastreams defines one per ksrunner job option): by default an
// embedded in-memory broker in this process, and the application
// streaming-example.
var (
	records  = flag.Int("records", 10000, "records to generate into topic words")
	deadline = flag.Duration("deadline", 3*time.Minute, "how long to wait for every window to arrive in topic counts")
)

func main() {
	flag.Parse()
	beam.Init()

	appID := flag.Lookup("application_id").Value.String()
	if appID == "" {
		appID = "streaming-example"
	}
	cfg := Config{
		Bootstrap:     flag.Lookup("bootstrap_servers").Value.String(),
		WordsTopic:    "words",
		CountsTopic:   "counts",
		ApplicationID: appID,
		Records:       *records,
		Keys:          20,
		Deadline:      *deadline,
	}
	if _, err := Run(context.Background(), cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
