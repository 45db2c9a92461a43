package topics

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// TestDeleteWaitsForMetadata: Delete returns only once the metadata no
// longer has the deleted topics. The cluster here answers the first
// metadata requests after the deletion as a broker that has not applied
// it yet does: with the old topic and its leader. A job's DONE comes after
// Delete, and the application's next job creates topics of the same names.
func TestDeleteWaitsForMetadata(t *testing.T) {
	c, adm := fakeAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plan := &translate.Plan{
		Bounded: true,
		Topics:  []*translate.Topic{{Name: "gbk-repartition", Kind: translate.TopicRepartition}},
		SubTopologies: []*translate.SubTopology{
			{ID: 0, Input: "gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey}},
		},
	}
	ts := New(plan, "deleted", 1, 2)
	if err := ts.Create(ctx, adm); err != nil {
		t.Fatal(err)
	}
	pipeline := ts.Full(shuffle.PipelineTopic)

	const staleAnswers = 3
	var deleted atomic.Bool
	var stale, after atomic.Int32
	c.ControlKey(int16(kmsg.DeleteTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		deleted.Store(true)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !deleted.Load() {
			return nil, nil, false
		}
		after.Add(1)
		if stale.Add(1) > staleAnswers {
			return nil, nil, false
		}
		// The broker has not applied the deletion: it answers with the
		// old pipeline topic, led by itself.
		mreq := req.(*kmsg.MetadataRequest)
		resp := mreq.ResponseKind().(*kmsg.MetadataResponse)
		host, port, _ := net.SplitHostPort(c.ListenAddrs()[0])
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host = 0, host
		if n, err := strconv.Atoi(port); err == nil {
			b.Port = int32(n)
		}
		resp.Brokers = append(resp.Brokers, b)
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr(pipeline)
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Leader = 0
		rt.Partitions = append(rt.Partitions, p)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	if err := ts.Delete(ctx, adm); err != nil {
		t.Fatal(err)
	}
	if n := after.Load(); n <= staleAnswers {
		t.Fatalf("Delete returned after %d metadata requests, while the first %d still showed %s", n, staleAnswers, pipeline)
	}
}

// TestDeleteOnAutoCreatingBroker: on a broker that creates topics a
// Metadata request asks for (auto.create.topics.enable, Kafka's default),
// Delete's wait for the deletion must not ask for them that way: it would
// create them again, and wait for their deletion until it times out.
func TestDeleteOnAutoCreatingBroker(t *testing.T) {
	_, adm := fakeAdmin(t, kfake.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := New(&translate.Plan{Bounded: true}, "autocreate", 1, 1)
	if err := ts.Create(ctx, adm); err != nil {
		t.Fatal(err)
	}
	if err := ts.Delete(ctx, adm); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := listed.Names(); len(names) != 0 {
		t.Errorf("topics after Delete: %v, want none", names)
	}
}

// fakeAdmin is a one-broker kfake cluster with opts and an admin client of
// it, both closed when the test ends.
func fakeAdmin(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, *Admin) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	adm := AdminOf(cl)
	t.Cleanup(adm.Close)
	return c, adm
}
