package application

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func testPipeline(transform string, endpoint string) *pipepb.Pipeline {
	ext, _ := proto.Marshal(&pipepb.ExternalPayload{Endpoint: &pipepb.ApiServiceDescriptor{Url: endpoint}})
	file, _ := proto.Marshal(&pipepb.ArtifactFilePayload{Path: "/staged/" + endpoint})
	return &pipepb.Pipeline{
		Components: &pipepb.Components{
			Transforms: map[string]*pipepb.PTransform{"t1": {UniqueName: transform, EnvironmentId: "go"}},
			Environments: map[string]*pipepb.Environment{"go": {
				Urn: "beam:env:external:v1", Payload: ext,
				Dependencies: []*pipepb.ArtifactInformation{{TypeUrn: urnArtifactFile, TypePayload: file}},
			}},
		},
		RootTransformIds: []string{"t1"},
	}
}

func fingerprint(t *testing.T, s *Spec) string {
	t.Helper()
	fp, err := s.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// The fingerprint is the pipeline's computation, not where its SDK runs.
func TestFingerprint(t *testing.T) {
	base := fingerprint(t, &Spec{Pipeline: testPipeline("Count", "localhost:1111"), Topology: "p=4"})
	for _, tc := range []struct {
		name string
		spec *Spec
		same bool
	}{
		{"another LOOPBACK pool and staging path", &Spec{Pipeline: testPipeline("Count", "localhost:2222"), Topology: "p=4"}, true},
		{"another transform", &Spec{Pipeline: testPipeline("Sum", "localhost:1111"), Topology: "p=4"}, false},
		{"another topology", &Spec{Pipeline: testPipeline("Count", "localhost:1111"), Topology: "p=8"}, false},
		{"the first layout, named", &Spec{Pipeline: testPipeline("Count", "localhost:1111"), Topology: "p=4", Layout: 1}, true},
		{"a later layout", &Spec{Pipeline: testPipeline("Count", "localhost:1111"), Topology: "p=4", Layout: 2}, false},
	} {
		if got := fingerprint(t, tc.spec); (got == base) != tc.same {
			t.Errorf("%s: fingerprint %s vs %s, want same=%v", tc.name, got, base, tc.same)
		}
	}
	// What ksrunners before layout versions computed for this spec: an
	// application of the first layout keeps its fingerprint across the
	// upgrade, so its processes of either version join one another.
	if want := "68edcdc145c3813c79c8b917243f1d3d"; base != want {
		t.Errorf("first-layout fingerprint %s, want %s as before layout versions", base, want)
	}
}

func TestSpecRoundTrip(t *testing.T) {
	big := make([]byte, 3*pieceBytes+17)
	rand.Read(big)
	opts, _ := structpb.NewStruct(map[string]any{"beam:option:application_id:v1": "app"})
	in := &Spec{JobID: "job-1", JobName: "job", Pipeline: testPipeline("Count", "x:1"), RawOptions: opts,
		Options: []byte(`{"InternalParallelism":4}`), Topology: "p=4",
		Modules:   map[string][]byte{"/m/a.wasm": []byte("wasm-a"), "file:///m/b.wasm": {}},
		Artifacts: map[string][]byte{"/staged/x:1": big}}
	b, err := in.encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.JobID != in.JobID || out.JobName != in.JobName || string(out.Options) != string(in.Options) || out.Topology != in.Topology ||
		!proto.Equal(out.Pipeline, in.Pipeline) || !proto.Equal(out.RawOptions, in.RawOptions) ||
		len(out.Modules) != 2 || string(out.Modules["/m/a.wasm"]) != "wasm-a" || !bytes.Equal(out.Artifacts["/staged/x:1"], big) {
		t.Errorf("round trip changed the spec")
	}
	for _, cut := range []int{0, 1, len(b) / 2, len(b) - 1} {
		if _, err := decodeSpec(b[:cut]); err == nil {
			t.Errorf("decoding %d of %d bytes: no error", cut, len(b))
		}
	}
}

// A Spec keeps its layout through the pipeline topic. One of a later
// layout is written in a format that ksrunners from before layout versions
// (which read format 1 only) refuse, rather than run it on their own plan;
// one of the first layout stays readable by them.
func TestSpecLayout(t *testing.T) {
	for _, tc := range []struct {
		layout, format int
	}{{0, 1}, {1, 1}, {2, 2}} {
		in := &Spec{JobID: "job-1", Pipeline: testPipeline("Count", "x:1"), RawOptions: &structpb.Struct{}, Topology: "p=4", Layout: tc.layout}
		b, err := in.encode()
		if err != nil {
			t.Fatal(err)
		}
		n, k := binary.Uvarint(b)
		var h specHeader
		if err := json.Unmarshal(b[k:k+int(n)], &h); err != nil {
			t.Fatal(err)
		}
		if h.Format != tc.format {
			t.Errorf("layout %d: written as format %d, want %d", tc.layout, h.Format, tc.format)
		}
		out, err := decodeSpec(b)
		if err != nil {
			t.Fatalf("layout %d: %v", tc.layout, err)
		}
		if out.Layout != tc.layout {
			t.Errorf("layout %d: read back as %d", tc.layout, out.Layout)
		}
	}
}

func openTopic(ctx context.Context, t *testing.T, bootstrap, app string) *Topic {
	t.Helper()
	tp, err := Open(ctx, bootstrap, nil, app, -1, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tp.Close)
	return tp
}

// joinGroup makes the application's consumer group live: one member,
// stopped by the returned func.
func joinGroup(ctx context.Context, t *testing.T, bootstrap, group, topic string) func() {
	t.Helper()
	cl := kafkatest.Client(t, bootstrap, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		cl.PollRecords(pctx, 1) // joins
		cancel()
		if live, err := GroupLive(ctx, adm, group); err == nil && live {
			return cl.Close
		}
		if time.Now().After(deadline) {
			t.Fatal("the group has no member 30s after a client joined it")
		}
	}
}

// Publish: a new application is written; the same pipeline joins; another
// one is refused while the group is live, naming the application and its
// job, and replaces it once nothing runs it; Load reads back what the
// latest Publish wrote, in pieces; SetState ends it.
func TestPublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "app")
	tp := openTopic(ctx, t, bootstrap, app)

	big := make([]byte, 2*pieceBytes+5) // three pieces
	rand.Read(big)
	first := &Spec{JobID: "count-1", JobName: "count", Pipeline: testPipeline("Count", "localhost:1"), RawOptions: &structpb.Struct{},
		Topology: "p=2", Artifacts: map[string][]byte{"/staged/localhost:1": big}}
	if out, replaced, err := tp.Publish(ctx, first); err != nil || out != Published || replaced != nil {
		t.Fatalf("first Publish: %v %v %v", out, replaced, err)
	}
	again := &Spec{JobID: "count-2", JobName: "count", Pipeline: testPipeline("Count", "localhost:2"), RawOptions: &structpb.Struct{}, Topology: "p=2"}
	if out, _, err := tp.Publish(ctx, again); err != nil || out != Joined {
		t.Fatalf("the same pipeline again: %v %v, want Joined", out, err)
	}
	m, s, err := tp.Load(ctx)
	if err != nil || m == nil || m.Pieces != 3 || m.JobID != "count-1" || m.State != Running || !bytes.Equal(s.Artifacts["/staged/localhost:1"], big) {
		t.Fatalf("Load after the join: %+v, %v (want count-1's spec in 3 pieces)", m, err)
	}

	other := &Spec{JobID: "sum-3", JobName: "sum", Pipeline: testPipeline("Sum", "localhost:3"), RawOptions: &structpb.Struct{}, Topology: "p=2"}
	stop := joinGroup(ctx, t, bootstrap, app, tp.Name())
	_, _, err = tp.Publish(ctx, other)
	if err == nil || !strings.Contains(err.Error(), `application_id "`+app+`" is running another pipeline (job count-1`) {
		t.Fatalf("another pipeline under a live application: %v, want a refusal naming the application and job count-1", err)
	}
	stop()
	// Nothing runs the application any more (its group left): replaced.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, replaced, err := tp.Publish(ctx, other)
		if err == nil {
			if out != Published || replaced == nil || replaced.JobID != "count-1" {
				t.Fatalf("replacing: %v, replaced %+v", out, replaced)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused 60s after the group's last member left: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	m, s, err = tp.Load(ctx)
	if err != nil || m.JobID != "sum-3" || s.Pipeline.GetComponents().GetTransforms()["t1"].GetUniqueName() != "Sum" {
		t.Fatalf("Load after the replacement: %+v, %v", m, err)
	}
	all, err := tp.readAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n := range 3 {
		if v, ok := all[pieceKey(fingerprint(t, first), n)]; !ok || v != nil {
			t.Errorf("piece %d of the replaced pipeline: not tombstoned (%d bytes, present %v)", n, len(v), ok)
		}
	}

	// A job that ends does not overwrite its replacement's manifest.
	if err := tp.SetState(ctx, fingerprint(t, first), Cancelled); err != nil {
		t.Fatal(err)
	}
	if m, _ := tp.Manifest(ctx); m.State != Running || m.JobID != "sum-3" {
		t.Fatalf("SetState of the replaced pipeline changed the manifest: %+v", m)
	}
	if err := tp.SetState(ctx, fingerprint(t, other), Cancelled); err != nil {
		t.Fatal(err)
	}
	if m, _ := tp.Manifest(ctx); m.State != Cancelled {
		t.Fatalf("after SetState(Cancelled): %+v", m)
	}
	// Cancelled: another pipeline may take the application id, live group or not.
	if out, _, err := tp.Publish(ctx, first); err != nil || out != Published {
		t.Fatalf("publishing after a cancel: %v %v", out, err)
	}
}

// The same pipeline laid out by other rules (the application was started
// by another ksrunner version) is refused whatever the application's state,
// with the layouts named; the same layout joins, and another pipeline is
// Publish's usual business.
func TestPublishRefusesAnotherLayout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "layout")
	tp := openTopic(ctx, t, bootstrap, app)

	// As a ksrunner before layout versions wrote it: no layout.
	old := &Spec{JobID: "count-1", JobName: "count", Pipeline: testPipeline("Count", "localhost:1"), RawOptions: &structpb.Struct{}, Topology: "p=2"}
	if out, _, err := tp.Publish(ctx, old); err != nil || out != Published {
		t.Fatalf("first Publish: %v %v", out, err)
	}
	relaid := &Spec{JobID: "count-2", JobName: "count", Pipeline: testPipeline("Count", "localhost:2"), RawOptions: &structpb.Struct{}, Topology: "p=2", Layout: 2}
	refused := func(state State) {
		t.Helper()
		_, _, err := tp.Publish(ctx, relaid)
		var le *LayoutError
		if !errors.As(err, &le) || le.Have != 1 || le.Want != 2 || le.JobID != "count-1" || le.State != state {
			t.Fatalf("the same pipeline at layout 2 over layout 1 (%s): %v, want a LayoutError 1 -> 2 naming job count-1", state, err)
		}
		for _, want := range []string{`application_id "` + app + `"`, "(layout 1)", "(layout 2: a ParDo with side inputs", "ksrunner reset --application_id " + app} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not say %q", err, want)
			}
		}
	}
	// No process runs it (the group has no member), yet it is refused:
	// its state is the earlier layout's.
	refused(Running)
	if err := tp.SetState(ctx, fingerprint(t, old), Cancelled); err != nil {
		t.Fatal(err)
	}
	refused(Cancelled)
	if m, _ := tp.Manifest(ctx); m.JobID != "count-1" {
		t.Fatalf("a refused Publish wrote the manifest: %+v", m)
	}

	// Another pipeline may take the cancelled application, at any layout;
	// then the same pipeline at the same layout joins it.
	other := &Spec{JobID: "sum-3", JobName: "sum", Pipeline: testPipeline("Sum", "localhost:3"), RawOptions: &structpb.Struct{}, Topology: "p=2", Layout: 2}
	if out, _, err := tp.Publish(ctx, other); err != nil || out != Published {
		t.Fatalf("another pipeline at layout 2: %v %v", out, err)
	}
	if m, _ := tp.Manifest(ctx); m.Layout != 2 {
		t.Fatalf("manifest layout %d, want 2", m.Layout)
	}
	again := &Spec{JobID: "sum-4", JobName: "sum", Pipeline: testPipeline("Sum", "localhost:4"), RawOptions: &structpb.Struct{}, Topology: "p=2", Layout: 2}
	if out, _, err := tp.Publish(ctx, again); err != nil || out != Joined {
		t.Fatalf("the same pipeline at the same layout: %v %v, want Joined", out, err)
	}
	// And back: the pipeline at layout 1 over its layout-2 application.
	again.Layout = 1
	var le *LayoutError
	if _, _, err := tp.Publish(ctx, again); !errors.As(err, &le) || le.Have != 2 || le.Want != 1 {
		t.Fatalf("layout 1 over layout 2: %v, want a LayoutError 2 -> 1", err)
	}
}

// A missing topic has no manifest; it is not created by a reader.
func TestMissingTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	tp, err := Open(ctx, bootstrap, nil, kafkatest.UniqueName(t, "none"), -1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if m, s, err := tp.Load(ctx); m != nil || s != nil || err != nil {
		t.Fatalf("Load of a missing topic: %v %v %v", m, s, err)
	}
}

// A pipeline topic that exists with more than one partition (made by
// something else) fails Open, naming the topic and its partition count,
// rather than being read at partition 0 only.
func TestPipelineTopicPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "parts")
	name := shuffle.TopicName(app, shuffle.PipelineTopic)
	kafkatest.CreateTopic(t, bootstrap, name, 3)
	tp, err := Open(ctx, bootstrap, nil, app, -1, true)
	if err == nil {
		tp.Close()
		t.Fatal("Open of a 3-partition pipeline topic succeeded")
	}
	if want := "pipeline topic " + name + " has 3 partitions, want 1"; !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v, want %q", err, want)
	}
}

// A read of the pipeline topic that cannot reach its end (here a
// transaction left open on it holds read_committed readers) fails when its
// context ends, saying where it stopped and where the partition's last
// stable offset is.
func TestStalledReadSaysWhy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "stall")
	tp := openTopic(ctx, t, bootstrap, app)
	txn := kafkatest.Client(t, bootstrap, kgo.TransactionalID(app+"-txn"), kgo.DefaultProduceTopic(tp.Name()))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Key: []byte("open"), Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	_, _, err := tp.Load(short)
	if err == nil {
		t.Fatal("Load read past an open transaction")
	}
	for _, want := range []string{"reading up to offset 1 (at 0; its last stable offset 0;", tp.Name()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Load: %v\nwant it to say %q", err, want)
		}
	}
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// TestReadAfterRecreation: a bounded job's end deletes the pipeline topic
// and the application's next job creates it again; an end offset listed
// from the old topic is out of reach of a read of the new one. The read
// must take the new topic's end, not wait for the old one's until it
// times out (CI saw a read stall at offset 0 for 60 s).
func TestReadAfterRecreation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "recreated")
	old := openTopic(ctx, t, bootstrap, app)
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, &kgo.Record{Topic: old.Name(), Key: []byte(fmt.Sprint("old", i)), Value: []byte("x")})
	}
	if err := old.produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	staleEnd, err := old.endOffset(ctx)
	if err != nil || staleEnd != 5 {
		t.Fatalf("old topic's end offset %d, %v; want 5", staleEnd, err)
	}
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	if _, err := adm.DeleteTopics(ctx, old.Name()); err != nil {
		t.Fatal(err)
	}
	var tp *Topic
	for { // until the broker has removed the old topic's partition
		tp = openTopic(ctx, t, bootstrap, app)
		end, err := tp.endOffset(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if end == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the recreated topic still ends at %d", end)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := tp.produce(ctx, &kgo.Record{Topic: tp.Name(), Key: []byte("new"), Value: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	read, cancelRead := context.WithTimeout(ctx, 10*time.Second)
	defer cancelRead()
	all, err := tp.readTo(read, staleEnd)
	if err != nil {
		t.Fatalf("reading the recreated topic with the old one's end offset %d: %v", staleEnd, err)
	}
	if len(all) != 1 || string(all["new"]) != "y" {
		t.Errorf("read %v, want only new=y", all)
	}
}

// StoredOrder gives a pipeline the order of roots and parts its stored
// self has, and leaves it alone when the orders agree or the pipelines
// differ (where SDKs run aside).
func TestStoredOrder(t *testing.T) {
	twoRoots := func(endpoint string, roots ...string) *pipepb.Pipeline {
		p := testPipeline("Count", endpoint)
		p.Components.Transforms["a"] = &pipepb.PTransform{UniqueName: "A", Subtransforms: []string{"t1", "b"}}
		p.Components.Transforms["b"] = &pipepb.PTransform{UniqueName: "B"}
		if roots[0] == "b" {
			p.Components.Transforms["a"].Subtransforms = []string{"b", "t1"}
		}
		p.RootTransformIds = roots
		return p
	}
	stored := twoRoots("localhost:1", "b", "a")
	p := twoRoots("localhost:2", "a", "b")
	if !StoredOrder(p, stored) || !slices.Equal(p.RootTransformIds, []string{"b", "a"}) || !slices.Equal(p.Components.Transforms["a"].Subtransforms, []string{"b", "t1"}) {
		t.Fatalf("the same pipeline in another order: roots %q, parts %q; want the stored order", p.RootTransformIds, p.Components.Transforms["a"].Subtransforms)
	}
	if fingerprint(t, &Spec{Pipeline: p}) != fingerprint(t, &Spec{Pipeline: stored}) {
		t.Error("after StoredOrder the fingerprints differ")
	}
	if StoredOrder(p, stored) {
		t.Error("StoredOrder of a pipeline in the stored order reported a change")
	}
	other := twoRoots("localhost:2", "a", "b")
	other.Components.Transforms["b"].UniqueName = "C"
	if StoredOrder(other, stored) || !slices.Equal(other.RootTransformIds, []string{"a", "b"}) {
		t.Errorf("another pipeline took the stored order: %q", other.RootTransformIds)
	}
}

// TestPublishWhileDraining: while a drain runs (the manifest says
// draining and the application's group has members), a submission of any
// pipeline, the drained one too, is refused naming the application and
// the job, and the manifest stays; once nothing runs the application, the
// pipeline is published as after a stop.
func TestPublishWhileDraining(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "app")
	tp := openTopic(ctx, t, bootstrap, app)
	first := &Spec{JobID: "count-1", JobName: "count", Pipeline: testPipeline("Count", "localhost:1"), RawOptions: &structpb.Struct{}, Topology: "p=2"}
	if _, _, err := tp.Publish(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := tp.SetState(ctx, fingerprint(t, first), Draining); err != nil {
		t.Fatal(err)
	}
	stop := joinGroup(ctx, t, bootstrap, app, tp.Name())
	same := &Spec{JobID: "count-2", JobName: "count", Pipeline: testPipeline("Count", "localhost:2"), RawOptions: &structpb.Struct{}, Topology: "p=2"}
	other := &Spec{JobID: "sum-3", JobName: "sum", Pipeline: testPipeline("Sum", "localhost:3"), RawOptions: &structpb.Struct{}, Topology: "p=2"}
	for _, s := range []*Spec{same, other} {
		_, _, err := tp.Publish(ctx, s)
		if err == nil || !strings.Contains(err.Error(), `application_id "`+app+`" is draining job count-1 ("count"`) {
			t.Fatalf("%s while the application drains: %v, want a refusal naming the application and job count-1", s.JobID, err)
		}
	}
	if m, _ := tp.Manifest(ctx); m.State != Draining || m.JobID != "count-1" {
		t.Fatalf("manifest after the refusals: %+v, want count-1 draining", m)
	}
	stop()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, replaced, err := tp.Publish(ctx, other)
		if err == nil {
			if out != Published || replaced == nil || replaced.JobID != "count-1" || replaced.State != Draining {
				t.Fatalf("publishing after the drain's process left: %v, replaced %+v", out, replaced)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused 60s after the group's last member left: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
