package application

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// Reset deletes the application's internal topics and its group's offsets
// of them, keeping the dead-letter topic, another application's topics
// whose id extends this one's, and the offsets of the user's topics; it
// refuses while the group has members, and a job that has not ended on
// purpose unless forced.
func TestReset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "rs")
	src := kafkatest.UniqueName(t, "src")
	name := func(a, n string) string { return shuffle.TopicName(a, n) }
	mine := []string{name(app, shuffle.StatusTopic), name(app, "subtopology-0-changelog"), name(app, "Sum-repartition")}
	kept := []string{name(app, "dead-letter"), name(app+"_v2", shuffle.PipelineTopic), name(app+"_v2", shuffle.StatusTopic), src}
	for _, n := range append(slices.Clone(mine), kept...) {
		kafkatest.CreateTopic(t, bootstrap, n, 2)
	}
	tp := openTopic(ctx, t, bootstrap, app) // the pipeline topic
	mine = append(mine, tp.Name())
	spec := &Spec{JobID: "sum-1", JobName: "sum", Pipeline: testPipeline("Sum", "localhost:1"), RawOptions: &structpb.Struct{}, Topology: "p=2"}
	if _, _, err := tp.Publish(ctx, spec); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: src, Partition: 0, At: 5, LeaderEpoch: -1})
	offsets.Add(kadm.Offset{Topic: src, Partition: 1, At: 7, LeaderEpoch: -1})
	offsets.Add(kadm.Offset{Topic: name(app, "Sum-repartition"), Partition: 1, At: 3, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, app, offsets); err != nil {
		t.Fatal(err)
	}
	cfg := ResetConfig{ApplicationID: app, BootstrapServers: bootstrap}

	stop := joinGroup(ctx, t, bootstrap, app, src)
	if _, err := Reset(ctx, cfg); err == nil || !strings.Contains(err.Error(), "processes still run the application") {
		t.Fatalf("Reset with a live group: %v, want a refusal", err)
	}
	stop()
	// The job runs as its pipeline topic says (its processes are gone):
	// refused unless forced.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := Reset(ctx, cfg)
		if err != nil && strings.Contains(err.Error(), `its job sum-1 ("sum") has not ended`) && strings.Contains(err.Error(), "--force") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Reset of a running job: %v, want the refusal naming it", err)
		}
	}
	if err := tp.SetState(ctx, fingerprint(t, spec), Drained); err != nil {
		t.Fatal(err)
	}
	rep, err := Reset(ctx, cfg)
	if err != nil {
		t.Fatalf("Reset of a drained application: %v", err)
	}
	slices.Sort(mine)
	if !slices.Equal(rep.Topics, mine) || rep.Job == nil || rep.Job.State != Drained || !slices.Equal(rep.KeptOffsets, []string{src}) {
		t.Errorf("report: topics %q (want %q), job %+v, kept offsets %q (want %q)", rep.Topics, mine, rep.Job, rep.KeptOffsets, src)
	}
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range mine {
		if listed.Has(n) {
			t.Errorf("topic %s still exists", n)
		}
	}
	for _, n := range kept {
		if !listed.Has(n) {
			t.Errorf("topic %s was deleted", n)
		}
	}
	got, err := adm.FetchOffsets(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := got.Lookup(src, 1); !ok || o.At != 7 {
		t.Errorf("offset of %s/1: %+v (found %v), want 7 kept", src, o, ok)
	}
	if o, ok := got.Lookup(name(app, "Sum-repartition"), 1); ok && o.At >= 0 {
		t.Errorf("offset of the repartition topic: %+v, want it deleted", o)
	}

	// Again, deleting the group: nothing internal is left, and the group
	// goes.
	if rep, err = Reset(ctx, ResetConfig{ApplicationID: app, BootstrapServers: bootstrap, DeleteSourceOffsets: true}); err != nil || !rep.DeletedGroup || len(rep.Topics) != 0 {
		t.Fatalf("second Reset: %+v, %v; want the group deleted and no topics", rep, err)
	}
	if got, err := adm.FetchOffsets(ctx, app); err == nil {
		if o, ok := got.Lookup(src, 1); ok && o.At >= 0 {
			t.Errorf("offset of %s/1 after the group's deletion: %+v", src, o)
		}
	}
}
