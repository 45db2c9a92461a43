package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestParseExpected(t *testing.T) {
	exp, err := parseExpected(strings.NewReader(`
# header
primitives.TestFlatten   # trailing comment

transforms.TestX_Y
`), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != 2 || !exp["primitives.TestFlatten"] || !exp["transforms.TestX_Y"] {
		t.Fatalf("got %v", exp)
	}
	for _, bad := range []string{"TestFlatten", "primitives.Flatten", ".TestA", "primitives.TestA/sub"} {
		if _, err := parseExpected(strings.NewReader(bad), "f"); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestSelectTests(t *testing.T) {
	lines := strings.Split("TestA\nTestB\n2026/01/01 WARN noise\nTestMain\nTestOomParDo\nTestDrain\nBenchmarkX\nExampleY\n", "\n")
	got := selectTests(lines, nil, regexp.MustCompile(defaultSkip))
	if strings.Join(got, ",") != "TestA,TestB" {
		t.Fatalf("got %v", got)
	}
	got = selectTests(lines, regexp.MustCompile("B$"), nil)
	if strings.Join(got, ",") != "TestB" {
		t.Fatalf("got %v", got)
	}
}

func TestEvaluate(t *testing.T) {
	pkgs := []*testPackage{{short: "primitives"}}
	results := []result{
		{Package: "primitives", Test: "TestA", Status: "pass"},
		{Package: "primitives", Test: "TestB", Status: "fail"},
		{Package: "primitives", Test: "TestC", Status: "skip"},
		{Package: "primitives", Test: "TestD", Status: "fail"},
	}
	exp := map[string]bool{
		"primitives.TestA":    true, // passed
		"primitives.TestB":    true, // failed: missing
		"primitives.TestC":    true, // skipped: missing
		"primitives.TestGone": true, // never ran: missing
		"transforms.TestX":    true, // package not run: ignored
	}
	rep := evaluate(results, exp, pkgs, nil, nil)
	if rep.passed != 1 || rep.failed != 2 || rep.skipped != 1 {
		t.Errorf("counts %d/%d/%d", rep.passed, rep.failed, rep.skipped)
	}
	if got := strings.Join(rep.missing, ","); got != "primitives.TestB,primitives.TestC,primitives.TestGone (did not run: no such test?)" {
		t.Errorf("missing %s", got)
	}
	// --run narrows what is checked
	rep = evaluate(results[:1], exp, pkgs, regexp.MustCompile("TestA"), nil)
	if len(rep.missing) != 0 {
		t.Errorf("missing %v with --run TestA", rep.missing)
	}
	var sb strings.Builder
	rep.print(&sb, 0)
	if !strings.HasSuffix(sb.String(), "conformance: 1 passed, 0 failed, 0 skipped\n") {
		t.Errorf("closing line: %q", sb.String())
	}
}

func TestEndpointLine(t *testing.T) {
	for line, want := range map[string]string{
		"job endpoint: 127.0.0.1:41234":                       "127.0.0.1:41234",
		"2026/01/01 12:00:00 INFO job endpoint: [::1]:8073 x": "[::1]:8073",
		"job endpoint: localhost:0":                           "localhost:0",
		"listening":                                           "",
	} {
		got := ""
		if m := endpointRE.FindStringSubmatch(line); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%q: got %q, want %q", line, got, want)
		}
	}
}
