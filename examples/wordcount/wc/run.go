package wc

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal" // the runner it submits with
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/ksrunner/ksrunner/host"
)

// Run counts the words of input (a file; empty: Text) and writes the counts
// to output. With output empty it prints them, sorted, to stdout. With no
// --endpoint flag set, it first starts a ksrunner job server and the
// embedded broker in this process and submits to them (LOOPBACK); set
// KSRUNNER_DEBUG for the server's debug log.
func Run(ctx context.Context, input, output string, stdout io.Writer) error {
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
	out := output
	if out == "" {
		dir, err := os.MkdirTemp("", "wordcount-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		out = filepath.Join(dir, "counts.txt")
	}
	lines := Text
	if input != "" {
		b, err := os.ReadFile(input)
		if err != nil {
			return err
		}
		lines = strings.Split(string(b), "\n")
	}
	p, s := beam.NewPipelineWithRoot()
	textio.Write(s, out, CountWords(s, beam.CreateList(s, lines)))
	if _, err := beamx.RunWithMetrics(ctx, p); err != nil {
		return fmt.Errorf("pipeline failed: %w", err)
	}
	if output != "" {
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
	if err := sc.Err(); err != nil {
		return err
	}
	sort.Strings(rows)
	for _, r := range rows {
		fmt.Fprintln(stdout, r)
	}
	return nil
}
