package wc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local" // textio on local files
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners" // the --runner flag

	"github.com/ksrunner/ksrunner/host/kafkastreams"
)

// Run counts the words of input (a file; empty: Text) and writes the counts
// to output. With output empty it prints them, sorted, to stdout. It runs
// on the runner of --runner, by default ksrunner's (package
// host/kafkastreams): with no --endpoint flag that starts a ksrunner job
// server and the embedded broker in this process and submits to them
// (LOOPBACK); set KSRUNNER_DEBUG for the server's debug log.
//
// It calls beam.Run rather than beamx.Run: beamx links every runner of the
// SDK (Prism, Dataflow, ...), about 200 packages this program does not
// need. A program that wants them all uses beamx.Run with
// --runner=kafkastreams.
func Run(ctx context.Context, input, output string, stdout io.Writer) error {
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
	runner := *runners.Runner
	if runner == "" {
		runner = kafkastreams.Name
	}
	if _, err := beam.Run(ctx, runner, p); err != nil {
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
