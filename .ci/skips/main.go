// Command skips reads `go test -json` on stdin and fails on a skipped test
// that the allowlist does not allow.
//
//	go test -race -json ./... | go run ./.ci/skips -allow .ci/skip-allowlist.txt -save out.json
//
// It prints what `go test` prints without -json, so the log stays readable:
// the output of failing tests (and of tests still running when their
// package's binary died: a panic, a timeout), all of a failing package's own
// output, the build errors, and the "ok", "FAIL" and "?" line of each
// package. The output of passing and skipped tests is not printed. Then it
// lists every skipped test with its reason, marked allowed or NOT ALLOWED,
// and closes with "tests: N passed, N failed, N skipped" (subtests
// included; a test that never finished counts as failed).
//
// The allowlist has one entry a line, "PACKAGE TEST # why": the package's
// import path and the test's name (a subtest as TestX/name), where * matches
// any run of characters ("/" included). The "# why" is required. Blank lines
// and lines starting with # are comments.
//
// Exit status: 0 when every skip is allowed, 1 when one is not, 2 on a bad
// allowlist (then no skip is allowed), unreadable input or no go test
// events at all. It does not
// judge failures: the caller keeps go test's own exit status for that.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	allow := flag.String("allow", "", "allowlist file (required)")
	save := flag.String("save", "", "also write the raw JSON stream to this file")
	flag.Parse()
	if *allow == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: go test -json ./... | skips -allow FILE [-save FILE]")
		os.Exit(2)
	}
	os.Exit(run(os.Stdin, os.Stdout, *allow, *save))
}

func run(in io.Reader, out io.Writer, allowFile, saveFile string) int {
	code := 0
	// A bad allowlist or save file still lets the stream through: the log
	// keeps the tests' output, and go test does not die of a closed pipe.
	rules, err := readAllowlist(allowFile)
	if err != nil {
		fmt.Fprintln(out, "skips:", err)
		code = 2
	}
	if saveFile != "" {
		sf, err := os.Create(saveFile)
		if err != nil {
			fmt.Fprintln(out, "skips:", err)
			code = 2
		} else {
			defer sf.Close()
			in = io.TeeReader(in, sf)
		}
	}
	s := newState(out, rules)
	r := bufio.NewReader(in)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			s.line(line)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(out, "skips: reading the go test stream:", err)
			return 2
		}
	}
	return max(code, s.finish(allowFile))
}

func readAllowlist(name string) ([]*rule, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseAllowlist(f, name)
}

// rule is one allowlist entry.
type rule struct {
	pkg, test *regexp.Regexp
	text      string // the entry as written, without the comment
	line      int
	used      int
}

func parseAllowlist(r io.Reader, name string) ([]*rule, error) {
	var rules []*rule
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		entry, why, ok := strings.Cut(l, "#")
		if !ok || strings.TrimSpace(why) == "" {
			return nil, fmt.Errorf("%s:%d: %q says not why the skip is allowed (end the line with # why)", name, n, l)
		}
		fields := strings.Fields(entry)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: %q: want PACKAGE TEST # why", name, n, l)
		}
		rules = append(rules, &rule{pkg: glob(fields[0]), test: glob(fields[1]), text: strings.Join(fields, " "), line: n})
	}
	return rules, sc.Err()
}

// glob makes a pattern in which * matches any run of characters.
func glob(p string) *regexp.Regexp {
	return regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(p), `\*`, ".*") + "$")
}

// event is a test2json event; ImportPath is set on build-output and
// build-fail events.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

type skip struct {
	pkg, test string
	reason    []string
	rule      *rule
}

type pkgState struct {
	own     []string            // the package's own output
	running map[string][]string // output of tests not finished yet
	order   []string            // test names in the order they started
}

type state struct {
	out                      io.Writer
	rules                    []*rule
	pkgs                     map[string]*pkgState
	skips                    []skip
	events                   int
	passed, failed, unfinish int
	pkgFailed, noTests       int
}

func newState(out io.Writer, rules []*rule) *state {
	return &state{out: out, rules: rules, pkgs: map[string]*pkgState{}}
}

func (s *state) pkg(name string) *pkgState {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgState{running: map[string][]string{}}
		s.pkgs[name] = p
	}
	return p
}

func (s *state) print(lines []string) {
	for _, l := range lines {
		io.WriteString(s.out, l)
	}
	// test2json splits very long lines: end a group on a line of its own.
	if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
		io.WriteString(s.out, "\n")
	}
}

func (s *state) line(b []byte) {
	var e event
	if json.Unmarshal(b, &e) != nil || e.Action == "" {
		s.print([]string{string(b)}) // not an event: pass it on
		return
	}
	s.events++
	switch {
	case e.Action == "build-output":
		s.print([]string{e.Output})
	case e.ImportPath != "": // build-fail: its output came before
	case e.Test != "":
		s.testEvent(e)
	default:
		s.pkgEvent(e)
	}
}

func (s *state) testEvent(e event) {
	p := s.pkg(e.Package)
	switch e.Action {
	case "run":
		if _, ok := p.running[e.Test]; !ok {
			p.running[e.Test] = nil
			p.order = append(p.order, e.Test)
		}
	case "output":
		if _, ok := p.running[e.Test]; !ok {
			p.order = append(p.order, e.Test)
		}
		p.running[e.Test] = append(p.running[e.Test], e.Output)
	case "pass":
		s.passed++
		delete(p.running, e.Test)
	case "fail":
		s.failed++
		s.print(p.running[e.Test])
		delete(p.running, e.Test)
	case "skip":
		sk := skip{pkg: e.Package, test: e.Test}
		for _, l := range p.running[e.Test] {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- SKIP: ") {
				sk.reason = append(sk.reason, l)
			}
		}
		for _, r := range s.rules {
			if r.pkg.MatchString(e.Package) && r.test.MatchString(e.Test) {
				r.used++
				sk.rule = r
				break
			}
		}
		s.skips = append(s.skips, sk)
		delete(p.running, e.Test)
	}
}

func (s *state) pkgEvent(e event) {
	p := s.pkg(e.Package)
	switch e.Action {
	case "output":
		p.own = append(p.own, e.Output)
	case "pass":
		for _, l := range p.own {
			if strings.HasPrefix(l, "ok") {
				s.print([]string{l})
			}
		}
		s.flushUnfinished(e.Package, p) // none, normally
		delete(s.pkgs, e.Package)
	case "skip": // no test files
		s.noTests++
		s.print(p.own)
		delete(s.pkgs, e.Package)
	case "fail":
		s.pkgFailed++
		s.flushUnfinished(e.Package, p)
		s.print(p.own)
		delete(s.pkgs, e.Package)
	}
}

// flushUnfinished prints the output of the package's tests that started and
// never ended: its test binary panicked, timed out or exited.
func (s *state) flushUnfinished(name string, p *pkgState) {
	for _, t := range p.order {
		out, ok := p.running[t]
		if !ok {
			continue
		}
		s.unfinish++
		fmt.Fprintf(s.out, "--- %s %s did not finish; its output:\n", name, t)
		s.print(out)
		delete(p.running, t)
	}
}

func (s *state) finish(allowFile string) int {
	for name, p := range s.pkgs { // the stream ended inside a package
		s.flushUnfinished(name, p)
		s.print(p.own)
	}
	if s.events == 0 {
		fmt.Fprintln(s.out, "skips: no go test -json events on stdin")
		return 2
	}
	bad := 0
	fmt.Fprintf(s.out, "\nskipped tests: %d\n", len(s.skips))
	for _, sk := range s.skips {
		mark := "allowed    "
		if sk.rule == nil {
			mark = "NOT ALLOWED"
			bad++
		}
		fmt.Fprintf(s.out, "  %s %s %s\n", mark, sk.pkg, sk.test)
		for _, l := range sk.reason {
			fmt.Fprintf(s.out, "                %s\n", l)
		}
		if sk.rule != nil {
			fmt.Fprintf(s.out, "                (%s:%d: %s)\n", allowFile, sk.rule.line, sk.rule.text)
		}
	}
	for _, r := range s.rules {
		if r.used == 0 {
			fmt.Fprintf(s.out, "  (%s:%d %q matched no skip this run)\n", allowFile, r.line, r.text)
		}
	}
	if s.noTests > 0 {
		fmt.Fprintf(s.out, "packages without test files: %d\n", s.noTests)
	}
	if s.pkgFailed > 0 {
		fmt.Fprintf(s.out, "failed packages: %d\n", s.pkgFailed)
	}
	fmt.Fprintf(s.out, "tests: %d passed, %d failed, %d skipped\n", s.passed, s.failed+s.unfinish, len(s.skips))
	if bad > 0 {
		fmt.Fprintf(s.out, "skips: %d skipped test(s) not in %s: make them run here, or add \"PACKAGE TEST # why\" lines\n", bad, allowFile)
		return 1
	}
	return 0
}
