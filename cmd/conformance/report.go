package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// readExpected reads the expected-pass list: one <package>.<Test> per line, '#' comments.
func readExpected(file string) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("expected list: %v", err)
	}
	defer f.Close()
	return parseExpected(f, file)
}

func parseExpected(r io.Reader, name string) (map[string]bool, error) {
	exp := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		pkg, test, ok := strings.Cut(line, ".")
		if !ok || pkg == "" || !testNameRE.MatchString(test) {
			return nil, fmt.Errorf("%s:%d: want <package>.<TestName>, got %q", name, n, line)
		}
		exp[line] = true
	}
	return exp, sc.Err()
}

type report struct {
	results                 []result
	expected                map[string]bool
	passed, failed, skipped int
	missing                 []string // expected, selected, did not pass
}

func evaluate(results []result, expected map[string]bool, pkgs []*testPackage, run, skip *regexp.Regexp) report {
	rep := report{results: results, expected: expected}
	sort.Slice(rep.results, func(i, j int) bool { return rep.results[i].ID() < rep.results[j].ID() })
	byID := map[string]result{}
	for _, r := range rep.results {
		byID[r.ID()] = r
		switch r.Status {
		case "pass":
			rep.passed++
		case "skip":
			rep.skipped++
		default:
			rep.failed++
		}
	}
	shorts := map[string]bool{}
	for _, p := range pkgs {
		shorts[p.short] = true
	}
	for id := range expected {
		pkg, test, _ := strings.Cut(id, ".")
		if !shorts[pkg] || (run != nil && !run.MatchString(test)) {
			continue // not part of this run
		}
		if r, ok := byID[id]; ok && r.Status == "pass" {
			continue
		}
		if r, ok := byID[id]; (!ok || r.Status == "skip") && skip != nil && skip.MatchString(test) {
			rep.missing = append(rep.missing, id+" (expected to pass, but --skip excludes it)")
			continue
		}
		if _, ok := byID[id]; !ok {
			rep.missing = append(rep.missing, id+" (did not run: no such test?)")
			continue
		}
		rep.missing = append(rep.missing, id)
	}
	sort.Strings(rep.missing)
	return rep
}

func (rep report) print(w io.Writer, took time.Duration) {
	fmt.Fprintf(w, "\n%-6s %-8s %-8s %s\n", "RESULT", "TIME", "EXPECTED", "TEST")
	for _, r := range rep.results {
		exp := ""
		if rep.expected[r.ID()] {
			exp = "pass"
		}
		fmt.Fprintf(w, "%-6s %7.1fs %-8s %s%s\n", r.Status, r.Elapsed.Seconds(), exp, r.ID(), noteSuffix(r.Note))
	}
	if len(rep.missing) > 0 {
		fmt.Fprintf(w, "\nexpected to pass but did not (%d):\n", len(rep.missing))
		byID := map[string]result{}
		for _, r := range rep.results {
			byID[r.ID()] = r
		}
		for _, id := range rep.missing {
			fmt.Fprintf(w, "  %s\n", id)
			if r, ok := byID[id]; ok && r.Status != "pass" {
				for _, l := range tail(r.Output, 15) {
					fmt.Fprintf(w, "      %s\n", l)
				}
			}
		}
	} else {
		fmt.Fprintf(w, "\nevery expected test passed (%d in the list)\n", len(rep.expected))
	}
	fmt.Fprintf(w, "took %.1fs\n", took.Seconds())
	fmt.Fprintf(w, "conformance: %d passed, %d failed, %d skipped\n", rep.passed, rep.failed, rep.skipped)
}

func tail(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
