// Package expansiontest holds what the tests of the expansion service and
// of host/kafkaio share: building a Go SDK pipeline to its proto (with its
// cross-language transforms expanded) and reading it.
package expansiontest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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
