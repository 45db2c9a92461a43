package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/host/internal/application"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

func layoutPair(w string) (string, int) { return w, 1 }

func layoutJoin(k string, vs func(*int) bool, side []string, emit func(string)) {
	emit(k)
}

// groupReaderPipeline has a ParDo with a side input that is the only
// reader of a GroupByKey's groups: a plan of translate.LayoutGroupReaders.
func groupReaderPipeline(t *testing.T) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, layoutPair, beam.Create(s, "a", "b"))
	beam.ParDo(s, layoutJoin, beam.GroupByKey(s, kvs), beam.SideInput{Input: beam.Create(s, "x")})
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	env, err := graphx.CreateEnvironment(context.Background(), "beam:env:external:v1", func(context.Context) string { return "localhost:1" })
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	return pipe
}

// A job read from its pipeline topic (a worker's, a resumed one) that this
// ksrunner lays out otherwise than the one that published it is refused
// before it touches the application's topics, naming both layouts; a
// submission is Publish's to check (host/internal/application).
func TestCheckLayout(t *testing.T) {
	pipe := groupReaderPipeline(t)
	plan, err := translate.Translate(pipe, translate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Layout != translate.LayoutGroupReaders {
		t.Fatalf("plan layout %d, want %d", plan.Layout, translate.LayoutGroupReaders)
	}
	first := &translate.Plan{Layout: translate.LayoutFirst}
	for _, tc := range []struct {
		name      string
		origin    jobOrigin
		published int
		plan      *translate.Plan
		refused   bool
	}{
		{"submitted", originSubmitted, 0, plan, false},
		{"worker, published before layout versions, first layout", originWorker, 0, first, false},
		{"worker, published before layout versions, later layout", originWorker, 0, plan, true},
		{"resumed, published at layout 1", originResumed, 1, plan, true},
		{"resumed, same later layout", originResumed, 2, plan, false},
		{"worker, later layout published, first here", originWorker, 2, first, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkLayout(jobSpec{ID: "j1", Origin: tc.origin, Layout: tc.published, Options: Options{ApplicationID: "app"}}, tc.plan)
			if (err != nil) != tc.refused {
				t.Fatalf("checkLayout: %v, want refused %v", err, tc.refused)
			}
		})
	}

	// startJob refuses such a job before it starts anything.
	opts := DefaultOptions()
	opts.ApplicationID = "layout-app"
	opts.BootstrapServers = "127.0.0.1:1"
	_, err = startJob(context.Background(), jobSpec{ID: "local-3", PublishedAs: "j2", Name: "grouped", Pipeline: pipe, RawOptions: nil, Options: opts, Origin: originResumed, StageDir: t.TempDir()},
		slog.New(slog.NewTextHandler(io.Discard, nil)), &serverConfig{})
	var le *application.LayoutError
	if !errors.As(err, &le) || le.Have != translate.LayoutFirst || le.Want != translate.LayoutGroupReaders {
		t.Fatalf("startJob of a resumed layout-1 job laid out at layout 2: %v, want a LayoutError 1 -> 2", err)
	}
	for _, want := range []string{`application_id "layout-app"`, "job j2", "(layout 1)", "(layout 2: a ParDo with side inputs or user state", "ksrunner reset --application_id layout-app"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}

// A program marshalled twice may list its roots (and a composite's parts)
// in another order. canonicalOrder, applied at submission, makes both
// lists one: the same fingerprint, and the same plan, each sub-topology
// under the same number, which a resubmission joining the application
// must share with it. Without it the plans differ.
func TestCanonicalOrder(t *testing.T) {
	pipe := groupReaderPipeline(t)
	numbering := func(p *pipepb.Pipeline) []string {
		plan, err := translate.Translate(proto.Clone(p).(*pipepb.Pipeline), translate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var roots []string
		for _, st := range plan.SubTopologies {
			roots = append(roots, fmt.Sprintf("%d:%s:%s", st.ID, st.Input, st.Root.TransformID))
		}
		return roots
	}
	// Another order of the same lists that numbers the plan otherwise (some
	// orders, the reverse among them at times, number it alike).
	var other *pipepb.Pipeline
	for seed := range uint64(50) {
		o := proto.Clone(pipe).(*pipepb.Pipeline)
		r := rand.New(rand.NewPCG(seed, 0))
		shuffle := func(ids []string) { r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] }) }
		shuffle(o.RootTransformIds)
		for _, id := range slices.Sorted(maps.Keys(o.GetComponents().GetTransforms())) {
			shuffle(o.GetComponents().GetTransforms()[id].Subtransforms)
		}
		if !slices.Equal(numbering(pipe), numbering(o)) {
			other = o
			break
		}
	}
	if other == nil {
		t.Fatalf("50 orders of the roots and parts give the same plan (%q): the test needs a pipeline whose numbering depends on the order", numbering(pipe))
	}
	canonicalOrder(pipe)
	canonicalOrder(other)
	if a, b := numbering(pipe), numbering(other); !slices.Equal(a, b) {
		t.Errorf("after canonicalOrder: sub-topologies read %q and %q", a, b)
	}
	fp := func(p *pipepb.Pipeline) string {
		f, err := (&application.Spec{Pipeline: p, Topology: "t"}).Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if fp(pipe) != fp(other) {
		t.Errorf("after canonicalOrder: fingerprints %s and %s", fp(pipe), fp(other))
	}
}

// A submission of a pipeline whose application stored it in another order
// (submitted to a ksrunner before canonicalOrder) takes the stored order,
// so that its fingerprint and plan are the stored job's; a submission of
// another pipeline keeps its own.
func TestKeepStoredOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "order")
	stored := groupReaderPipeline(t)
	canonicalOrder(stored)
	slices.Reverse(stored.RootTransformIds)
	tp, err := application.Open(ctx, bootstrap, nil, app, -1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if _, _, err := tp.Publish(ctx, &application.Spec{JobID: "old-1", JobName: "old", Pipeline: stored, RawOptions: &structpb.Struct{}, Topology: "t"}); err != nil {
		t.Fatal(err)
	}
	s := &JobServer{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	opts := Options{ApplicationID: app, BootstrapServers: bootstrap}

	same := groupReaderPipeline(t)
	canonicalOrder(same)
	s.keepStoredOrder(ctx, jobSpec{ID: "j1", Pipeline: same, Options: opts})
	if !slices.Equal(same.RootTransformIds, stored.RootTransformIds) {
		t.Errorf("the same pipeline: roots %q, want the stored %q", same.RootTransformIds, stored.RootTransformIds)
	}

	p, sc := beam.NewPipelineWithRoot()
	beam.ParDo(sc, layoutPair, beam.Create(sc, "a"))
	beam.ParDo(sc, layoutPair, beam.Create(sc, "b"))
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	other, err := graphx.Marshal(edges, &graphx.Options{Environment: stored.GetComponents().GetEnvironments()[same.GetComponents().GetTransforms()[same.GetRootTransformIds()[0]].GetEnvironmentId()]})
	if err != nil {
		t.Fatal(err)
	}
	canonicalOrder(other)
	want := slices.Clone(other.RootTransformIds)
	s.keepStoredOrder(ctx, jobSpec{ID: "j2", Pipeline: other, Options: opts})
	if !slices.Equal(other.RootTransformIds, want) {
		t.Errorf("another pipeline: roots %q, want its own %q", other.RootTransformIds, want)
	}
}
