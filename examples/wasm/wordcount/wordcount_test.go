package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"

	"github.com/ksrunner/ksrunner/examples/wordcount/wc"
	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/jobtest"
)

var env *jobtest.Env

func TestMain(m *testing.M) { jobtest.Main(m, host.DefaultOptions(), &env) }

// testInput is the sonnet plus lines that exercise the word pattern's edges.
func testInput() []string {
	lines := slices.Clone(wc.Text)
	lines = append(lines,
		"", "   ", "don't stop-believing,hold on to that feeling!!",
		"naïve café façade -- ünïcödé splits words", "'quoted' ''' x'y'z", "tabs\tand\nnewlines\r\nend",
		"123 numbers 4you and you4 ANd YOU")
	for i := range 300 {
		lines = append(lines, fmt.Sprintf("line %d of the generated text, word%d and Word%d", i, i%17, i%5))
	}
	return lines
}

// count runs the wordcount on ksrunner with the given pipeline options and
// returns its sorted output lines and the job id.
func count(ctx context.Context, t *testing.T, opts map[string]string) ([]string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "counts.txt")
	p, s := beam.NewPipelineWithRoot()
	textio.Write(s, out, wc.CountWords(s, beam.CreateList(s, testInput())))
	id, r := env.Run(ctx, t, env.Marshal(t, p), opts)
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	files, _ := filepath.Glob(out + "*")
	var rows []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			rows = append(rows, sc.Text())
		}
		fh.Close()
	}
	slices.Sort(rows)
	return rows, id
}

// TestWASMWordcountMatchesHarness runs the wordcount twice, all in the Go
// SDK harness and with extract and format as WASM DoFns, and compares.
func TestWASMWordcountMatchesHarness(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	module := jobtest.BuildWASM(t, t.TempDir(), "./guest")

	want, _ := count(ctx, t, nil)
	if len(want) < 50 {
		t.Fatalf("harness wordcount gave %d lines", len(want))
	}
	got, id := count(ctx, t, map[string]string{"stage_wasm": strings.Join(StageWASM(module), ",")})
	if !slices.Equal(got, want) {
		t.Errorf("WASM wordcount differs from the harness one:\n got %d lines %q\nwant %d lines %q", len(got), head(got), len(want), head(want))
	}

	// GetPipeline says which executor runs each transform.
	pr, err := env.Client.GetPipeline(ctx, &jobpb.GetJobPipelineRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	execs := map[string]string{}
	for _, tr := range pr.GetPipeline().GetComponents().GetTransforms() {
		if e := tr.GetAnnotations()["ksrunner:executor"]; e != nil {
			execs[tr.GetUniqueName()] = string(e)
		}
	}
	for name, want := range map[string]string{
		"CountWords/wc.extractWords":                "wasm " + module,
		"CountWords/wc.formatCount":                 "wasm " + module,
		"CountWords/stats.Count/stats.keyedCountFn": "harness go",
	} {
		if execs[name] != want {
			t.Errorf("GetPipeline: %s runs in %q, want %q (all: %v)", name, execs[name], want, execs)
		}
	}

	// The guest's counter reaches GetJobMetrics like an SDK's.
	var words int
	for _, row := range want {
		var n int
		fmt.Sscanf(row[strings.LastIndex(row, " ")+1:], "%d", &n)
		words += n
	}
	mr, err := env.Client.GetJobMetrics(ctx, &jobpb.GetJobMetricsRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range append(mr.GetMetrics().GetCommitted(), mr.GetMetrics().GetAttempted()...) {
		if m.GetUrn() == "beam:metric:user:sum_int64:v1" && m.GetLabels()["NAMESPACE"] == "wordcount" && m.GetLabels()["NAME"] == "words" {
			found = true
			if v := decodeVarInt(m.GetPayload()); v != int64(words) {
				t.Errorf("metric wordcount/words = %d, want %d", v, words)
			}
			if m.GetLabels()["PTRANSFORM"] == "" {
				t.Errorf("metric wordcount/words without PTRANSFORM: %v", m.GetLabels())
			}
		}
	}
	if !found {
		t.Errorf("GetJobMetrics has no wordcount/words counter: %v", mr.GetMetrics())
	}
}

func decodeVarInt(b []byte) int64 {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			break
		}
	}
	return int64(v)
}

func head(s []string) []string { return s[:min(len(s), 8)] }
