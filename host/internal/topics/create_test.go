package topics

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

// Instances of one application starting together all create its internal
// topics: whichever loses the race finds the topic being created and waits
// for its partitions rather than failing ("exists with 0 partitions").
func TestCreateRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	plan := &translate.Plan{
		Topics: []*translate.Topic{{Name: "gbk-repartition", Kind: translate.TopicRepartition}},
		SubTopologies: []*translate.SubTopology{
			{ID: 0, Input: "gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey}},
		},
	}
	for round := range 5 { // the race is not lost every time
		app := kafkatest.UniqueName(t, "race")
		const instances = 6
		var wg sync.WaitGroup
		errs := make([]error, instances)
		start := make(chan struct{})
		for i := range instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				adm := AdminOf(kafkatest.Client(t, bootstrap))
				ts := New(plan, app, 1, 8)
				<-start
				errs[i] = ts.Create(ctx, adm)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, instance %d: %v", round, i, err)
			}
		}
	}
}

// Create makes every internal topic in one request with its own partition
// count and cleanup policy (impulses one partition, repartition topics
// internal_parallelism, changelogs their input's, the status topic one; the
// changelogs and the status topic compacted), leaves the user's topics
// alone, keeps them all on a restart, and refuses a plan whose partition
// counts differ from the existing topics', naming the topic.
func TestCreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	adm := AdminOf(kafkatest.Client(t, bootstrap))
	user := kafkatest.UniqueName(t, "user")
	kafkatest.CreateTopic(t, bootstrap, user, 2)
	plan := &translate.Plan{
		Topics: []*translate.Topic{
			{Name: "impulse-0", Kind: translate.TopicImpulse},
			{Name: "gbk-repartition", Kind: translate.TopicRepartition},
			{Name: user, Kind: translate.TopicKafka},
		},
		SubTopologies: []*translate.SubTopology{
			{ID: 0, Input: "impulse-0", Root: translate.Root{Kind: translate.RootImpulse}},
			{ID: 1, Input: "gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey}},
			{ID: 2, Input: user, Root: translate.Root{Kind: translate.RootKafkaSource, TransformID: "read"}},
		},
	}
	app := kafkatest.UniqueName(t, "create")
	full := func(name string) string { return shuffle.TopicName(app, name) }
	want := map[string]struct {
		partitions int
		compact    bool
	}{
		full("impulse-0"):         {1, false},
		full("gbk-repartition"):   {3, false},
		full(ChangelogTopic(0)):   {1, true},
		full(ChangelogTopic(1)):   {3, true},
		full(ChangelogTopic(2)):   {2, true}, // the user topic's count, as Discover found it
		full(shuffle.StatusTopic): {1, true},
	}
	const made = 4 << 20 // the first run's internal_max_message_bytes
	for run := range 2 { // the second keeps what the first made
		ts := New(plan, app, 1, 3)
		ts.SetInternalMaxMessageBytes(int32(made * (1 + run))) // the second asks for more
		if err := ts.Discover(ctx, adm.Client); err != nil {
			t.Fatal(err)
		}
		if err := ts.Create(ctx, adm); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		details, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for name := range want {
			names = append(names, name)
		}
		configs, err := adm.DescribeTopicConfigs(ctx, names...)
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range want {
			if got := len(details[name].Partitions); got != w.partitions {
				t.Errorf("run %d: %s has %d partitions, want %d", run, name, got, w.partitions)
			}
			rc, err := configs.On(name, nil)
			if err != nil {
				t.Fatalf("run %d: configs of %s: %v", run, name, err)
			}
			policy, maxBytes := "", ""
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil {
					policy = *c.Value
				}
				if c.Key == "max.message.bytes" && c.Value != nil {
					maxBytes = *c.Value
				}
			}
			if maxBytes != strconv.Itoa(made) {
				t.Errorf("run %d: %s has max.message.bytes %q, want %d (internal_max_message_bytes when first made)", run, name, maxBytes, made)
			}
			if got := ts.RecordLimit(name); got != made {
				t.Errorf("run %d: %s: record limit %d, want %d (the topic's own)", run, name, got, made)
			}
			if compact := policy == "compact"; compact != w.compact {
				t.Errorf("run %d: %s has cleanup.policy %q, want compacted: %v", run, name, policy, w.compact)
			}
		}
		below := ts.BelowInternalLimit()
		if run == 0 && len(below) != 0 {
			t.Errorf("run 0: topics below internal_max_message_bytes: %v, want none", below)
		}
		if run == 1 && len(below) != len(want) {
			t.Errorf("run 1: topics below the larger internal_max_message_bytes: %v, want the %d made by run 0", below, len(want))
		}
		if got := len(details[user].Partitions); got != 2 {
			t.Errorf("run %d: the user's topic %s has %d partitions, want its own 2", run, user, got)
		}
	}

	ts := New(plan, app, 1, 5) // internal_parallelism changed
	if err := ts.Discover(ctx, adm.Client); err != nil {
		t.Fatal(err)
	}
	err := ts.Create(ctx, adm)
	if err == nil || !strings.Contains(err.Error(), "topic "+full("gbk-repartition")+" exists with 3 partitions, the plan needs 5") {
		t.Fatalf("Create with internal_parallelism changed from 3 to 5: %v, want the repartition topic named with both counts", err)
	}
}

// A cluster whose policy refuses the max.message.bytes Create gives the
// topics (some hosted services cap it) fails Create naming the topic, the
// value and the option that set it.
func TestCreatePolicyRefusesMaxMessageBytes(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		creq := req.(*kmsg.CreateTopicsRequest)
		resp := creq.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range creq.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic = rt.Topic
			for _, cfg := range rt.Configs {
				if cfg.Name == "max.message.bytes" && cfg.Value != nil && *cfg.Value != "1048588" {
					st.ErrorCode = kerr.PolicyViolation.Code
					st.ErrorMessage = kmsg.StringPtr("max.message.bytes above 1048588")
				}
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	plan := &translate.Plan{
		Topics:        []*translate.Topic{{Name: "gbk-repartition", Kind: translate.TopicRepartition}},
		SubTopologies: []*translate.SubTopology{{ID: 0, Input: "gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey}}},
	}
	ts := New(plan, "app", 1, 2)
	ts.SetInternalMaxMessageBytes(8 << 20)
	err = ts.Create(ctx, AdminOf(cl))
	want := "creating topic " + ts.Full("gbk-repartition") + " with max.message.bytes=8388608 (internal_max_message_bytes): POLICY_VIOLATION"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Create: %v, want an error containing %q", err, want)
	}
}
