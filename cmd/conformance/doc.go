// Command conformance runs Apache Beam's own Go integration suites against a Beam job
// endpoint (ksrunner's job server, or any portable runner such as Prism) and checks the
// results against the list of tests expected to pass.
//
//	go run ./cmd/conformance                          # builds and starts ./cmd/ksrunner jobserver
//	go run ./cmd/conformance --endpoint 127.0.0.1:8073 # an already running job server
//	go run ./cmd/conformance --prism                   # builds and starts Beam's Prism (reference)
//
// For every package (--packages, comma-separated import paths) it compiles the test binary
// once (go test -c), lists its tests (--run selects; --skip excludes, reporting them as
// skipped: by default TestDrain, whose pipeline ends only when drained from outside;
// TestOomParDo, which needs the SDK in a container, is left out), and runs each test in its
// own process through go tool test2json:
//
//	<pkg>.test -test.run '^TestX$' -test.timeout T --runner=universal \
//	    --endpoint=HOST:PORT --environment_type=LOOPBACK
//
// so a test that hangs is killed after --timeout and counted as failed without stopping the
// rest. Tests run one at a time by default (--parallel). With --runner=universal Beam
// applies no per-runner skip filters. The JSON events give each test's result: a table
// test -> pass/fail/skip, then a closing line "conformance: N passed, N failed, N skipped".
//
// The expected list (--expected, default .ci/conformance-expected.txt) names the tests that
// must pass, one per line as <package>.<Test> where <package> is the last element of the
// import path (e.g. primitives.TestFlatten); '#' starts a comment. The command exits 1 when
// an expected test (of a package that was run, matched by --run) did not pass, and 2 on a
// usage or setup error (a package does not build, the job server does not start). Tests not
// in the list may fail. The list only grows: add a test once ksrunner passes it reliably.
//
// Each test's output is kept under --logdir (default: a new temporary directory, printed);
// the binaries built there are deleted at the end.
package main
