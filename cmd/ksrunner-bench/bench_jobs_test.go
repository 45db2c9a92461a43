package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// bench jobs runs its jobs against a job server process of its own and
// prints that process's memory at the start, every --every jobs and at the
// end; a job with a wrong result fails it.
func TestBenchJobs(t *testing.T) {
	t.Setenv(envRunMain, "1") // the job server process runs this binary's main
	var out strings.Builder
	if err := runBenchJobs(context.Background(), []string{"--jobs", "3", "--every", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	var jobs []int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("line %q, want 4 columns:\n%s", line, out.String())
		}
		n, _ := strconv.Atoi(f[0])
		if rss, err := strconv.ParseFloat(f[1], 64); err != nil || rss <= 0 {
			t.Errorf("line %q: rss_mib %q, want a size", line, f[1])
		}
		jobs = append(jobs, n)
	}
	if len(jobs) != 3 || jobs[0] != 0 || jobs[1] != 2 || jobs[2] != 3 {
		t.Errorf("lines for jobs %v, want 0, 2 and 3:\n%s", jobs, out.String())
	}
}
