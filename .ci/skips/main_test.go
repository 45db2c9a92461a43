package main

// The streams in testdata are real `go test -json` output of a scratch
// module: mixed.jsonl has passing, failing and skipped tests and subtests,
// a package without test files and one that does not build; crash.jsonl a
// test whose goroutine panics and one that hits -timeout.
//
// Run with: go test ./.ci/skips (./... does not reach a dot directory).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func check(t *testing.T, stream, allowlist string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	allow := filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(allow, []byte(allowlist), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(filepath.Join("testdata", stream))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out strings.Builder
	save := filepath.Join(dir, "raw.json")
	code := run(in, &out, allow, save)
	if raw, err := os.ReadFile(save); err != nil || len(raw) == 0 {
		t.Errorf("raw stream not saved: %v", err)
	}
	return code, out.String()
}

func contains(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func lacks(t *testing.T, out string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(out, w) {
			t.Errorf("output has %q:\n%s", w, out)
		}
	}
}

const partial = `# comment line

example.com/skipmod/a TestSkipAllowed   # the moon is not here
example.com/*/a TestSub/*  # every case of TestSub
example.com/skipmod/zzz TestGone # stale
`

func TestUnexpectedSkip(t *testing.T) {
	code, out := check(t, "mixed.jsonl", partial)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	contains(t, out,
		"ok  \texample.com/skipmod/a\t",
		"FAIL\texample.com/skipmod/b\t",
		"?   \texample.com/skipmod/c\t[no test files]",
		"FAIL\texample.com/skipmod/d [build failed]",
		"d/d_test.go:5:28: undefined: undefined",
		"b_test.go:5: context\n    b_test.go:5: boom\n--- FAIL: TestFail",
		"skipped tests: 3\n",
		"  allowed     example.com/skipmod/a TestSkipAllowed\n                a_test.go:6: needs the moon\n",
		"  allowed     example.com/skipmod/a TestSub/two\n                a_test.go:9: case two: why\n                second line\n",
		"  NOT ALLOWED example.com/skipmod/b TestUnlisted\n                b_test.go:7: nobody allowed this\n",
		`"example.com/skipmod/zzz TestGone" matched no skip`,
		"packages without test files: 1\n",
		"failed packages: 2\n",
		"\ntests: 4 passed, 1 failed, 3 skipped\n",
		"skips: 1 skipped test(s) not in",
	)
	// Passing and skipped tests' output is not printed, nor the JSON.
	lacks(t, out, "quiet log", "--- PASS", "=== RUN   TestSkipAllowed", `"Action"`, "PASS\n")
}

func TestAllAllowed(t *testing.T) {
	code, out := check(t, "mixed.jsonl", partial+"example.com/skipmod/b TestUnlisted # b's reason\n")
	if code != 0 {
		t.Errorf("exit %d, want 0:\n%s", code, out)
	}
	lacks(t, out, "NOT ALLOWED")
}

func TestCrash(t *testing.T) {
	code, out := check(t, "crash.jsonl", "")
	if code != 0 {
		t.Errorf("exit %d, want 0 (no skips)", code)
	}
	contains(t, out,
		"--- example.com/skipmod/e TestPanic/inner did not finish; its output:\n",
		"panic: boom in goroutine",
		"FAIL\texample.com/skipmod/e\t",
		"--- example.com/skipmod/f TestHang did not finish",
		"f_test.go:5: before hang",
		"panic: test timed out after 3s",
		"FAIL\texample.com/skipmod/f\t",
		"skipped tests: 0\n",
		"tests: 0 passed, 3 failed, 0 skipped\n",
	)
}

func TestBadAllowlist(t *testing.T) {
	for _, a := range []string{
		"example.com/skipmod/b TestUnlisted\n",
		"example.com/skipmod/b TestUnlisted #   \n",
		"example.com/skipmod/b # no test\n",
		"example.com/skipmod/b TestA TestB # three\n",
	} {
		code, out := check(t, "mixed.jsonl", a)
		if code != 2 {
			t.Errorf("allowlist %q: exit %d, want 2:\n%s", a, code, out)
		}
		// The log still has the tests' output; no skip is allowed.
		contains(t, out, "skips: ", "--- FAIL: TestFail", "NOT ALLOWED example.com/skipmod/b TestUnlisted")
	}
}

func TestNoEvents(t *testing.T) {
	dir := t.TempDir()
	allow := filepath.Join(dir, "allow.txt")
	os.WriteFile(allow, nil, 0o644)
	var out strings.Builder
	if code := run(strings.NewReader("ok  \tsomething\t0.1s\n"), &out, allow, ""); code != 2 {
		t.Errorf("exit %d, want 2:\n%s", code, out.String())
	}
	contains(t, out.String(), "ok  \tsomething\t0.1s\n", "no go test -json events")
}
