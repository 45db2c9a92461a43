package host

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// topicSet is a Plan's internal topics with their partition counts.
type topicSet struct {
	appID       string
	replication int
	partitions  map[string]int32 // by Topic.Name
	byName      map[string]*translate.Topic
	consumer    map[string]*translate.SubTopology // topic name → sub-topology reading it
	producers   map[string]int                    // topic name → number of producing tasks
	fullNames   map[string]string                 // topic name → Kafka name (full), precomputed
	// changelogs are the changelog topic names by sub-topology id; a
	// changelog has one partition per task (partition of the input).
	changelogs map[int]string
}

func newTopicSet(plan *translate.Plan, opts Options) *topicSet {
	t := &topicSet{
		appID:       opts.ApplicationID,
		replication: opts.TopicReplicationFactor,
		partitions:  map[string]int32{},
		byName:      map[string]*translate.Topic{},
		consumer:    map[string]*translate.SubTopology{},
		producers:   map[string]int{},
		fullNames:   map[string]string{},
		changelogs:  map[int]string{},
	}
	for _, tp := range plan.Topics {
		t.fullNames[tp.Name] = shuffle.TopicName(t.appID, tp.Name)
		t.byName[tp.Name] = tp
		if tp.Kind == translate.TopicImpulse || tp.Kind == translate.TopicSideInput {
			t.partitions[tp.Name] = 1
		} else {
			t.partitions[tp.Name] = int32(opts.InternalParallelism)
		}
	}
	for _, st := range plan.SubTopologies {
		t.consumer[st.Input] = st
		name := changelogTopic(st.ID)
		t.changelogs[st.ID] = name
		t.fullNames[name] = shuffle.TopicName(t.appID, name)
	}
	// A producing task reports once per topic it writes, whichever of its
	// PCollections it writes there.
	for _, st := range plan.SubTopologies {
		seen := map[string]bool{}
		for _, s := range st.Sinks {
			if !seen[s.Topic] {
				seen[s.Topic] = true
				t.producers[s.Topic] += int(t.partitions[st.Input])
			}
		}
	}
	return t
}

// full is the Kafka name of an internal topic. Data records name their topic
// with it, so the plan's topics are looked up rather than built each time.
func (t *topicSet) full(name string) string {
	if f, ok := t.fullNames[name]; ok {
		return f
	}
	return shuffle.TopicName(t.appID, name)
}

// taskCount is the number of tasks of the whole plan.
func (t *topicSet) taskCount() int {
	n := 0
	for name := range t.consumer {
		n += int(t.partitions[name])
	}
	return n
}

func newAdmin(brokers string) (*kadm.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", brokers, err)
	}
	return kadm.NewClient(cl), nil
}

// create creates every internal topic; topics that already exist (a restarted
// application) are kept if their partition count matches.
func (t *topicSet) create(ctx context.Context, adm *kadm.Client) error {
	create := func(name string, partitions int32, configs map[string]*string) error {
		full := t.full(name)
		resp, err := adm.CreateTopic(ctx, partitions, int16(t.replication), configs, full)
		if err == nil {
			err = resp.Err
		}
		if errors.Is(err, kerr.TopicAlreadyExists) {
			details, derr := adm.ListTopics(ctx, full)
			if derr != nil {
				return fmt.Errorf("topic %s: %w", full, derr)
			}
			if got := len(details[full].Partitions); got != int(partitions) {
				return fmt.Errorf("topic %s exists with %d partitions, the plan needs %d (internal_parallelism changed? use a new application_id)", full, got, partitions)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating topic %s: %w", full, err)
		}
		return nil
	}
	for name, p := range t.partitions {
		if err := create(name, p, nil); err != nil {
			return err
		}
	}
	compact := "compact"
	for id, name := range t.changelogs {
		if err := create(name, t.changelogPartitions(id), map[string]*string{"cleanup.policy": &compact}); err != nil {
			return err
		}
	}
	return create(shuffle.StatusTopic, 1, map[string]*string{"cleanup.policy": &compact})
}

// changelogPartitions is the partition count of a sub-topology's changelog:
// that of its input topic.
func (t *topicSet) changelogPartitions(sub int) int32 {
	for name, st := range t.consumer {
		if st.ID == sub {
			return t.partitions[name]
		}
	}
	return 1
}

func (t *topicSet) delete(ctx context.Context, adm *kadm.Client) error {
	names := []string{t.full(shuffle.StatusTopic)}
	for name := range t.partitions {
		names = append(names, t.full(name))
	}
	for _, name := range t.changelogs {
		names = append(names, t.full(name))
	}
	resps, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return err
	}
	return resps.Error()
}

// writeImpulses writes the impulse record of every impulse topic that is
// still empty, so a restarted application does not replay its impulses.
func (t *topicSet) writeImpulses(ctx context.Context, brokers string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.RecordPartitioner(shuffle.Partitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for name, tp := range t.byName {
		if tp.Kind != translate.TopicImpulse {
			continue
		}
		full := t.full(name)
		ends, err := adm.ListEndOffsets(ctx, full)
		if err != nil {
			return fmt.Errorf("topic %s: end offsets: %w", full, err)
		}
		if o, ok := ends.Lookup(full, 0); ok && o.Err == nil && o.Offset > 0 {
			continue
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: full, Partition: 0, Value: []byte{shuffle.KindData}}).FirstErr(); err != nil {
			return fmt.Errorf("topic %s: writing the impulse: %w", full, err)
		}
	}
	return nil
}
