package harness_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/harness"
)

// TestWorkerDeathFailsBundles kills the SDK worker process mid-bundle: every
// bundle in flight on it fails with an error saying the worker was lost, and
// StartEnvironment starts a replacement.
func TestWorkerDeathFailsBundles(t *testing.T) {
	ctx := context.Background()
	h, err := harness.Start(ctx, harness.Config{JobID: "death", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	env := processEnv(t)
	if err := h.StartEnvironment(ctx, "proc", env); err != nil {
		t.Fatalf("StartEnvironment: %v", err)
	}
	spec := buildStage(t, exitFn, 1)
	stage, err := h.Stage(ctx, "proc", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	// A bundle left open (no Finish yet) while another kills the worker.
	bystander, err := stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := bystander.Process(encodeElements(t, []byte("waiting"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	killer, err := stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	_ = killer.Process(encodeElements(t, []byte("exit")))
	// The bystander's input stays open until the killer has failed, so it
	// cannot complete before the worker dies.
	for _, b := range []*harness.Bundle{killer, bystander} {
		_, err := b.Finish()
		if err == nil || !strings.Contains(err.Error(), "lost") {
			t.Errorf("bundle %s: got %v, want an error saying the worker was lost", b.ID(), err)
		}
	}
	if _, err := stage.StartBundle(ctx, newCollector(t).emit); err == nil {
		t.Errorf("StartBundle on a lost worker succeeded")
	}

	// A replacement worker serves a re-registered stage.
	if err := h.StartEnvironment(ctx, "proc", env); err != nil {
		t.Fatalf("StartEnvironment after loss: %v", err)
	}
	stage, err = h.Stage(ctx, "proc", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage on replacement: %v", err)
	}
	c := newCollector(t)
	b, err := stage.StartBundle(ctx, c.emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := b.Process(encodeElements(t, []byte("again"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := c.elements(spec.order[0]); len(got) != 1 || got[0] != "again" {
		t.Errorf("got %q", got)
	}
}

func TestUnsupportedStateNamesKeyType(t *testing.T) {
	err := harness.UnsupportedState{}.Clear(context.Background(), &fnpb.StateKey{Type: &fnpb.StateKey_BagUserState_{BagUserState: &fnpb.StateKey_BagUserState{}}})
	if err == nil || !strings.Contains(err.Error(), "bag_user_state") || !strings.Contains(err.Error(), "not supported yet") {
		t.Errorf("got %v", err)
	}
	_, _, err = harness.UnsupportedState{}.Get(context.Background(), &fnpb.StateKey{Type: &fnpb.StateKey_IterableSideInput_{IterableSideInput: &fnpb.StateKey_IterableSideInput{}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "iterable_side_input") {
		t.Errorf("got %v", err)
	}
}

func TestProvisionAndArtifacts(t *testing.T) {
	ctx := context.Background()
	opts, _ := structpb.NewStruct(map[string]any{"options": map[string]any{"job_name": "prov"}})
	dir := t.TempDir()
	h, err := harness.Start(ctx, harness.Config{JobID: "prov-1", JobName: "prov", PipelineOptions: opts, Logger: quietLogger(), ArtifactDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	// Declared by the environment, but outside the job's staging
	// directory (what a pipeline that names /etc/shadow without staging
	// it declares): refused.
	outside := filepath.Join(t.TempDir(), "unstaged")
	if err := os.WriteFile(outside, []byte("not staged"), 0o600); err != nil {
		t.Fatal(err)
	}
	escape := filepath.Join(dir, "..", filepath.Base(filepath.Dir(outside)), "unstaged")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	declared := filepath.Join(dir, "worker.bin")
	content := []byte(strings.Repeat("artifact bytes ", 200_000)) // 3MB: several chunks
	if err := os.WriteFile(declared, content, 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("no"), 0o600); err != nil {
		t.Fatal(err)
	}
	fileArt := func(path string) *pipepb.ArtifactInformation {
		p, _ := proto.Marshal(&pipepb.ArtifactFilePayload{Path: path})
		return &pipepb.ArtifactInformation{TypeUrn: harness.URNArtifactFile, TypePayload: p}
	}
	embeddedPayload, _ := proto.Marshal(&pipepb.EmbeddedFilePayload{Data: []byte("embedded!")})
	embedded := &pipepb.ArtifactInformation{TypeUrn: harness.URNArtifactEmbedded, TypePayload: embeddedPayload}

	env := loopbackEnv(t)
	env.Dependencies = []*pipepb.ArtifactInformation{fileArt(declared), embedded, fileArt(outside), fileArt(escape), fileArt(link)}
	if err := h.StartEnvironment(ctx, "go", env); err != nil {
		t.Fatalf("StartEnvironment: %v", err)
	}

	conn, err := grpc.NewClient(h.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	info, err := fnpb.NewProvisionServiceClient(conn).GetProvisionInfo(ctx, &fnpb.GetProvisionInfoRequest{})
	if err != nil {
		t.Fatalf("GetProvisionInfo: %v", err)
	}
	if got := info.GetInfo().GetPipelineOptions().GetFields()["options"].GetStructValue().GetFields()["job_name"].GetStringValue(); got != "prov" {
		t.Errorf("pipeline options not served: %v", info.GetInfo().GetPipelineOptions())
	}
	if info.GetInfo().GetControlEndpoint().GetUrl() != h.Endpoint() || info.GetInfo().GetRetrievalToken() != "prov-1" {
		t.Errorf("provision info: %v", info.GetInfo())
	}

	artifacts := jobpb.NewArtifactRetrievalServiceClient(conn)
	get := func(art *pipepb.ArtifactInformation) ([]byte, error) {
		stream, err := artifacts.GetArtifact(ctx, &jobpb.GetArtifactRequest{Artifact: art})
		if err != nil {
			return nil, err
		}
		var data []byte
		for {
			resp, err := stream.Recv()
			if err != nil {
				if err.Error() == "EOF" {
					return data, nil
				}
				return data, err
			}
			data = append(data, resp.GetData()...)
		}
	}
	if data, err := get(fileArt(declared)); err != nil || string(data) != string(content) {
		t.Errorf("file artifact: %d bytes, %v", len(data), err)
	}
	if data, err := get(embedded); err != nil || string(data) != "embedded!" {
		t.Errorf("embedded artifact: %q, %v", data, err)
	}
	if _, err := get(fileArt(secret)); err == nil || !strings.Contains(err.Error(), "not a dependency") {
		t.Errorf("undeclared file: got %v, want a refusal", err)
	}
	for _, p := range []string{outside, escape, link} {
		if data, err := get(fileArt(p)); err == nil || status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "was not staged for the job") || !strings.Contains(err.Error(), p) {
			t.Errorf("declared file %s outside the staging directory: got %q, %v; want a refusal naming it", p, data, err)
		}
	}
	if _, err := get(&pipepb.ArtifactInformation{TypeUrn: "beam:artifact:type:url:v1"}); err == nil || !strings.Contains(err.Error(), "beam:artifact:type:url:v1") {
		t.Errorf("url artifact: got %v, want an error naming the type", err)
	}
}

// TestIterableSideInput runs a ParDo with a side input on the real SDK: its
// state requests reach the bundle's StateHandler (here the in-memory
// SideInputs, paging one value per response to exercise continuation
// tokens), and without a handler they fail naming the key type.
func TestIterableSideInput(t *testing.T) {
	h := startHarness(t, harness.Config{})
	spec := buildStageFrom(t, func(s beam.Scope, imp beam.PCollection) {
		beam.ParDo(s, sideFn, imp, beam.SideInput{Input: beam.Impulse(s)})
	})
	ctx := context.Background()
	stage, err := h.Stage(ctx, "go", spec.desc, spec.input, spec.outputs)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	var pardoID, sideID string
	for id, tr := range spec.desc.GetTransforms() {
		if tr.GetSpec().GetUrn() == "beam:transform:pardo:v1" {
			pardoID = id
			var payload pipepb.ParDoPayload
			if err := proto.Unmarshal(tr.GetSpec().GetPayload(), &payload); err != nil {
				t.Fatal(err)
			}
			for local := range payload.GetSideInputs() {
				sideID = local
			}
		}
	}
	side := &harness.SideInputs{PageSize: 1}
	var values [][]byte
	for _, v := range []string{"s1", "s2", "s3"} {
		var buf bytes.Buffer
		coder.EncodeBytes([]byte(v), &buf)
		values = append(values, buf.Bytes())
	}
	side.SetIterable(pardoID, sideID, nil, values)

	c := newCollector(t)
	b, err := stage.StartBundle(ctx, c.emit, harness.WithStateHandler(side))
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	if err := b.Process(encodeElements(t, []byte("a"), []byte("b"))); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got, want := c.elements(spec.order[0]), []string{"a|s1|s2|s3", "b|s1|s2|s3"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}

	// Config's default handler refuses, naming the key type.
	b, err = stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	_ = b.Process(encodeElements(t, []byte("a")))
	if _, err := b.Finish(); err == nil || !strings.Contains(err.Error(), "iterable_side_input") || !strings.Contains(err.Error(), "not supported yet") {
		t.Errorf("without a handler: got %v, want an error naming iterable_side_input", err)
	}
}
