// Package expansiontest holds what the tests of the expansion service and
// of host/kafkaio share: building a Go SDK pipeline to its proto (with its
// cross-language transforms expanded) and reading it.
package expansiontest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/xlangx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Pipeline builds a Go SDK pipeline (beam.CrossLanguage expands its
// external transforms as build calls them) and marshals it as the
// universal runner does.
func Pipeline(t *testing.T, build func(s beam.Scope)) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	build(s)
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	xlangx.ResolveArtifacts(context.Background(), edges, nil)
	env, err := graphx.CreateEnvironment(context.Background(), "beam:env:loopback:v1", func(context.Context) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	return pipe
}

// Transforms returns the pipeline's transforms of a URN.
func Transforms(pipe *pipepb.Pipeline, urn string) []*pipepb.PTransform {
	var out []*pipepb.PTransform
	for _, tr := range pipe.GetComponents().GetTransforms() {
		if tr.GetSpec().GetUrn() == urn {
			out = append(out, tr)
		}
	}
	return out
}

var coderNames = map[string]string{"beam:coder:kv:v1": "kv", "beam:coder:nullable:v1": "nullable", "beam:coder:bytes:v1": "bytes",
	"beam:coder:string_utf8:v1": "string", "beam:coder:varint:v1": "varint", "beam:coder:row:v1": "row"}

// CoderString names a coder by its URN's short name and its components:
// kv(nullable(bytes),nullable(bytes)).
func CoderString(c *pipepb.Components, id string) string {
	cd := c.GetCoders()[id]
	if cd == nil {
		return "missing(" + id + ")"
	}
	s, ok := coderNames[cd.GetSpec().GetUrn()]
	if !ok {
		s = cd.GetSpec().GetUrn()
	}
	if len(cd.GetComponentCoderIds()) > 0 {
		parts := make([]string, len(cd.GetComponentCoderIds()))
		for i, cid := range cd.GetComponentCoderIds() {
			parts[i] = CoderString(c, cid)
		}
		s += "(" + strings.Join(parts, ",") + ")"
	}
	return s
}

// JSON shows a spec in a test's message (its pointers as values).
func JSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// beamVersion is the apache-beam release of go.mod's Beam version.
const beamVersion = "2.77.0"

// BeamPython returns a python that imports apache_beam: KSRUNNER_PYTHON,
// else the virtual environment host/pythontest uses (the same directory,
// lock and packages: whichever test package comes first installs it, the
// other waits). Without python3 the test skips, unless
// KSRUNNER_REQUIRE_PYTHON is set.
func BeamPython(t *testing.T) string {
	t.Helper()
	if py := os.Getenv("KSRUNNER_PYTHON"); py != "" {
		return py
	}
	sys, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("KSRUNNER_REQUIRE_PYTHON") != "" {
			t.Fatalf("python3 is required (KSRUNNER_REQUIRE_PYTHON is set): %v", err)
		}
		t.Skipf("python3 not found (%v): the Python SDK tests need it", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "ksrunner", "pyvenv-beam-"+beamVersion+"-4")
	py := filepath.Join(dir, "bin", "python")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	ready := filepath.Join(dir, ".ksrunner-ready")
	if _, err := os.Stat(ready); err == nil {
		return py
	}
	os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{sys, "-m", "venv", dir},
		// host/pythontest's packages, so that either package's install
		// serves both.
		// The yaml extra: Beam YAML's expansion (jinja2, pandas, ...).
		// tenacity: Beam's fn_runner_test imports it (the portable-runner
		// suite, host/pythontest TestPythonPortableRunnerSuite).
		{py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "apache-beam[yaml]==" + beamVersion,
			"pytest==9.2.0", "PyHamcrest==2.1.0", "parameterized==0.9.0", "mock==5.2.0", "tenacity==9.2.1"},
	} {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("installing the Beam Python SDK: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return py
}
