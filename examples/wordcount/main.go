// Command wordcount counts the words of a text with the Beam Go SDK on
// ksrunner.
//
// With no --endpoint it starts a ksrunner job server and an embedded Kafka
// broker in this process, submits itself to them and prints the counts:
//
//	go run ./examples/wordcount
//
// With --endpoint it submits to a running `ksrunner jobserver`:
//
//	go run ./examples/wordcount --endpoint=localhost:8099 --input=some.txt
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/ksrunner/ksrunner/examples/wordcount/wc"
	"github.com/ksrunner/ksrunner/host"
)

var (
	input  = flag.String("input", "", "text file to count (default: a built-in text)")
	output = flag.String("output", "", "where to write the counts (default: a temporary file, printed)")
)

func main() {
	flag.Parse()
	beam.Init()

	ctx := context.Background()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	if *jobopts.Endpoint == "" {
		level := slog.LevelWarn
		if os.Getenv("KSRUNNER_DEBUG") != "" {
			level = slog.LevelDebug
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		srv, err := host.NewJobServer("localhost:0", host.DefaultOptions(), logger)
		if err != nil {
			return err
		}
		go srv.Serve()
		defer srv.Stop()
		flag.Set("endpoint", srv.Endpoint())
		flag.Set("runner", "universal")
		flag.Set("environment_type", "LOOPBACK")
	}
	out := *output
	if out == "" {
		dir, err := os.MkdirTemp("", "wordcount-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		out = filepath.Join(dir, "counts.txt")
	}
	lines := wc.Text
	if *input != "" {
		b, err := os.ReadFile(*input)
		if err != nil {
			return err
		}
		lines = strings.Split(string(b), "\n")
	}
	p, s := beam.NewPipelineWithRoot()
	counts := wc.CountWords(s, beam.CreateList(s, lines))
	textio.Write(s, out, counts)
	if _, err := beamx.RunWithMetrics(ctx, p); err != nil {
		return fmt.Errorf("pipeline failed: %w", err)
	}
	if *output != "" {
		return nil
	}
	f, err := os.Open(out)
	if err != nil {
		return err
	}
	defer f.Close()
	var rows []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rows = append(rows, sc.Text())
	}
	sort.Strings(rows)
	for _, r := range rows {
		fmt.Println(r)
	}
	return sc.Err()
}
