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
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	adm := AdminOf(cl)
	defer adm.Close()
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
