// Package topics lays out a Plan's internal topics (names, partition
// counts, producers per topic, changelogs) and creates, fills (impulses) and
// deletes them.
package topics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Set is a Plan's internal topics with their partition counts, and the
// user's topics it reads (TopicKafka) and writes (Kafka writes). It is not
// changed after Discover, which Run calls before anything uses it.
type Set struct {
	appID       string
	replication int
	// Partitions are the partition counts by Topic.Name; a TopicKafka's
	// once Discover found it.
	Partitions map[string]int32
	// Outputs are the partition counts of the user topics Kafka writes
	// produce to, by topic name (Discover fills them).
	Outputs map[string]int32
	// writers names a transform writing each output topic, for messages.
	writers map[string]string
	ByName  map[string]*translate.Topic
	// Consumer is the sub-topology reading each topic, by name.
	Consumer map[string]*translate.SubTopology
	// Producers is the number of producing tasks of each topic, by name.
	Producers map[string]int
	fullNames map[string]string // topic name → Kafka name (full), precomputed
	plan      *translate.Plan
	// Changelogs are the changelog topic names by sub-topology id; a
	// changelog has one partition per task (partition of the input).
	Changelogs map[int]string
	// MaxMessageBytes are the max.message.bytes of the user topics Kafka
	// writes produce to and of the dead-letter topic, as Discover found
	// them, and of the internal topics, as Create made or found them, by
	// Kafka name (absent: unknown).
	MaxMessageBytes map[string]int32
	// internalMaxBytes is the max.message.bytes Create gives the topics it
	// creates (0: the broker's default).
	internalMaxBytes int32

	// DeadLetter is the Kafka name of the dead-letter topic ("": none,
	// the bad-record policy is not dead_letter); DeadLetterPartitions its
	// partition count once Discover or Create found it.
	DeadLetter           string
	DeadLetterPartitions int32
	createDeadLetter     bool // the application's own: Create makes it
}

// DeadLetterName is the name (within the application) of the dead-letter
// topic ksrunner creates when none is named.
const DeadLetterName = "dead-letter"

// SetDeadLetter makes name (a Kafka name) the dead-letter topic: Create
// creates it (one partition) when create is set, otherwise Discover
// requires it to exist. Run calls it before Discover; a plan without
// Kafka IO has no bad records and gets no dead-letter topic.
func (t *Set) SetDeadLetter(name string, create bool) {
	hasKafka := len(t.writers) > 0
	for _, tp := range t.ByName {
		hasKafka = hasKafka || tp.Kind == translate.TopicKafka
	}
	if !hasKafka {
		return
	}
	t.DeadLetter, t.createDeadLetter = name, create
}

// SetInternalMaxMessageBytes makes Create give the topics it creates this
// max.message.bytes (internal_max_message_bytes): the largest element or
// stored value that can cross an internal topic. Run calls it before
// Create.
func (t *Set) SetInternalMaxMessageBytes(n int32) { t.internalMaxBytes = n }

// DefaultRecordLimit is the largest record assumed to fit a topic whose
// max.message.bytes is unknown: Kafka's default (message.max.bytes,
// 1048588) less franz-go's margin, franz-go's own default batch limit.
const DefaultRecordLimit = 1_000_012

// RecordLimit is the largest record batch (so the largest record) topic,
// a Kafka name, takes: its max.message.bytes if known, else
// DefaultRecordLimit.
func (t *Set) RecordLimit(topic string) int32 {
	if m, ok := t.MaxMessageBytes[topic]; ok {
		return min(m, MaxRecordLimit)
	}
	return DefaultRecordLimit
}

// MaxRecordLimit bounds RecordLimit whatever a topic's max.message.bytes
// says: the producer's batches stay within franz-go's request limits
// (BrokerMaxWriteBytes and BrokerMaxReadBytes, 100 MiB).
const MaxRecordLimit = 64 << 20

// InternalNames are the Kafka names of the topics Create creates, sorted.
func (t *Set) InternalNames() []string {
	var names []string
	for name := range t.Partitions {
		if t.ByName[name].Kind != translate.TopicKafka {
			names = append(names, t.Full(name))
		}
	}
	for _, name := range t.Changelogs {
		names = append(names, t.Full(name))
	}
	names = append(names, t.Full(shuffle.StatusTopic))
	slices.Sort(names)
	return names
}

// Writer is the transform writing user topic topic, for messages ("":
// none).
func (t *Set) Writer(topic string) string { return t.writers[topic] }

// New lays out the topics of plan for application appID: impulse and side
// input topics have one partition, every other internal topic parallelism.
func New(plan *translate.Plan, appID string, replication, parallelism int) *Set {
	t := &Set{
		appID:       appID,
		replication: replication,
		Partitions:  map[string]int32{},
		ByName:      map[string]*translate.Topic{},
		Consumer:    map[string]*translate.SubTopology{},
		Producers:   map[string]int{},
		fullNames:   map[string]string{},
		Changelogs:  map[int]string{},
		Outputs:     map[string]int32{},
		writers:     map[string]string{},

		MaxMessageBytes: map[string]int32{},
	}
	for _, tp := range plan.Topics {
		t.fullNames[tp.Name] = shuffle.TopicName(t.appID, tp.Name)
		t.ByName[tp.Name] = tp
		if tp.Kind == translate.TopicKafka {
			t.fullNames[tp.Name] = tp.Name // the user's topic: not prefixed, partitions discovered
			continue
		}
		if tp.Kind == translate.TopicImpulse || tp.Kind == translate.TopicSideInput {
			t.Partitions[tp.Name] = 1
		} else {
			t.Partitions[tp.Name] = int32(parallelism)
		}
	}
	for _, st := range plan.SubTopologies {
		t.Consumer[st.Input] = st
		name := ChangelogTopic(st.ID)
		t.Changelogs[st.ID] = name
		t.fullNames[name] = shuffle.TopicName(t.appID, name)
		for _, s := range st.Sinks {
			if s.KafkaWrite != nil {
				t.writers[s.Topic] = s.TransformID
			}
		}
	}
	t.plan = plan
	t.countProducers()
	return t
}

// countProducers counts the producing tasks of every internal topic: a
// producing task reports once per topic it writes, whichever of its
// PCollections it writes there. Kafka writes have no watermark reports.
func (t *Set) countProducers() {
	clear(t.Producers)
	for _, st := range t.plan.SubTopologies {
		seen := map[string]bool{}
		for _, s := range st.Sinks {
			if !seen[s.Topic] && s.KafkaWrite == nil {
				seen[s.Topic] = true
				t.Producers[s.Topic] += int(t.Partitions[st.Input])
			}
		}
	}
}

// Discover finds the partition counts of the user's topics: those Kafka
// reads read (one task per partition) and those Kafka writes produce to.
// ksrunner never creates them: a missing one fails, naming it and its
// transform (DESIGN.md §3).
func (t *Set) Discover(ctx context.Context, adm *kadm.Client) error {
	want := map[string]string{} // topic → transform
	for name, tp := range t.ByName {
		if tp.Kind == translate.TopicKafka {
			want[name] = t.Consumer[name].Root.TransformID
		}
	}
	for name, tr := range t.writers {
		want[name] = tr
	}
	if t.DeadLetter != "" && !t.createDeadLetter {
		want[t.DeadLetter] = "dead_letter_topic"
	}
	if len(want) == 0 {
		return nil
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("listing the pipeline's Kafka topics %v: %w", names, err)
	}
	found := map[string]int32{}
	for _, name := range names {
		d, ok := details[name]
		missing := !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || (d.Err == nil && len(d.Partitions) == 0)
		if missing && name == t.DeadLetter && !t.createDeadLetter {
			return fmt.Errorf("option dead_letter_topic: Kafka topic %q does not exist (ksrunner creates only its own dead-letter topic, when dead_letter_topic is not set)", name)
		}
		if missing {
			return fmt.Errorf("transform %s: Kafka topic %q does not exist (ksrunner does not create the topics a pipeline reads or writes)", want[name], name)
		}
		if d.Err != nil {
			return fmt.Errorf("transform %s: Kafka topic %q: %w", want[name], name, d.Err)
		}
		found[name] = int32(len(d.Partitions))
	}
	t.Discovered(found)
	var limited []string // the topics produced to
	for name := range t.writers {
		limited = append(limited, name)
	}
	if t.DeadLetter != "" && !t.createDeadLetter {
		limited = append(limited, t.DeadLetter)
	}
	return t.discoverMaxMessageBytes(ctx, adm, limited...)
}

// discoverMaxMessageBytes records the max.message.bytes of topics, so that
// a record too large for its topic fails (or is dead-lettered) where it is
// made, naming its transform, rather than in the producer, which would
// abort the whole cycle.
func (t *Set) discoverMaxMessageBytes(ctx context.Context, adm *kadm.Client, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return fmt.Errorf("describing the configs of topics %v: %w", names, err)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue // unknown: the producer's limit still applies
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			if n, err := strconv.ParseInt(*c.Value, 10, 32); err == nil && n > 0 {
				t.MaxMessageBytes[rc.Name] = int32(n)
			}
		}
	}
	return nil
}

// Discovered records the partition counts of the user's topics (Discover
// found them; tests know them).
func (t *Set) Discovered(partitions map[string]int32) {
	for name, n := range partitions {
		if tp := t.ByName[name]; tp != nil && tp.Kind == translate.TopicKafka {
			t.Partitions[name] = n
		}
		if _, ok := t.writers[name]; ok {
			t.Outputs[name] = n
		}
		if name == t.DeadLetter {
			t.DeadLetterPartitions = n
		}
	}
	t.countProducers()
}

// Full is the Kafka name of an internal topic. Data records name their topic
// with it, so the plan's topics are looked up rather than built each time.
func (t *Set) Full(name string) string {
	if f, ok := t.fullNames[name]; ok {
		return f
	}
	return shuffle.TopicName(t.appID, name)
}

// Written lists the Kafka names of the topics the application's tasks
// produce to: its internal topics but the impulses (the job server writes
// those), its changelogs and status topic, the user topics Kafka writes
// name in the plan (a write may also take its topic from the row), and
// the dead-letter topic.
func (t *Set) Written() []string {
	var l []string
	for name, tp := range t.ByName {
		if tp.Kind != translate.TopicKafka && tp.Kind != translate.TopicImpulse {
			l = append(l, t.Full(name))
		}
	}
	for _, name := range t.Changelogs {
		l = append(l, t.Full(name))
	}
	l = append(l, t.Full(shuffle.StatusTopic))
	for name := range t.Outputs {
		l = append(l, name)
	}
	if t.DeadLetter != "" {
		l = append(l, t.DeadLetter)
	}
	slices.Sort(l)
	return slices.Compact(l)
}

// TaskCount is the number of tasks of the whole plan.
func (t *Set) TaskCount() int {
	n := 0
	for name := range t.Consumer {
		n += int(t.Partitions[name])
	}
	return n
}

// Admin is an admin client: kadm's, and the client under it for the
// requests kadm makes only in other shapes (one CreateTopics of topics with
// different partition counts and configs).
type Admin struct {
	*kadm.Client
	raw *kgo.Client
}

// AdminOf is the admin client over cl; closing it closes cl.
func AdminOf(cl *kgo.Client) *Admin { return &Admin{kadm.NewClient(cl), cl} }

// NewAdmin is an admin client of brokers (a comma-separated list),
// connecting per sec (nil: PLAINTEXT), with opts besides.
func NewAdmin(brokers string, sec *kafkaconn.Security, opts ...kgo.Opt) (*Admin, error) {
	cl, err := kafkaconn.NewClient(brokers, sec, opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", brokers, err)
	}
	return AdminOf(cl), nil
}

// Create creates every internal topic; topics that already exist (a restarted
// application) are kept if their partition count matches.
//
// All of them go in one CreateTopics request: a KRaft controller handles
// such requests one after another and answers each once its records are
// committed (28 ms apiece on a local broker, measured, however many topics
// a request holds), and a job has five internal topics or more, which one
// request each made a third of a small job's run on a real broker.
func (t *Set) Create(ctx context.Context, adm *Admin) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = int32(createTimeout.Milliseconds())
	add := func(name string, n int32, compact bool) {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = t.Full(name)
		rt.NumPartitions = n
		rt.ReplicationFactor = int16(t.replication)
		if t.internalMaxBytes > 0 {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name = "max.message.bytes"
			c.Value = kmsg.StringPtr(strconv.Itoa(int(t.internalMaxBytes)))
			rt.Configs = append(rt.Configs, c)
		}
		if compact {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name = "cleanup.policy"
			c.Value = kmsg.StringPtr("compact")
			rt.Configs = append(rt.Configs, c)
		}
		req.Topics = append(req.Topics, rt)
	}
	for name, p := range t.Partitions {
		if t.ByName[name].Kind == translate.TopicKafka {
			continue // the user's
		}
		add(name, p, false)
	}
	for id, name := range t.Changelogs {
		add(name, t.changelogPartitions(id), true)
	}
	add(shuffle.StatusTopic, 1, true)
	// In name order, so that a failure names the same topic every time.
	slices.SortFunc(req.Topics, func(a, b kmsg.CreateTopicsRequestTopic) int { return strings.Compare(a.Topic, b.Topic) })

	resp, err := req.RequestWith(ctx, adm.raw)
	if err != nil {
		return fmt.Errorf("creating topics %s: %w", t.Full("*"), err)
	}
	answered := map[string]error{}
	for _, rt := range resp.Topics {
		err := kerr.ErrorForCode(rt.ErrorCode)
		if err != nil && rt.ErrorMessage != nil && *rt.ErrorMessage != "" {
			err = fmt.Errorf("%w: %s", err, *rt.ErrorMessage)
		}
		answered[rt.Topic] = err
	}
	var names []string
	var existing []kmsg.CreateTopicsRequestTopic
	created := map[string]bool{}
	for _, rt := range req.Topics {
		full := rt.Topic
		err, ok := answered[full]
		switch {
		case !ok:
			return fmt.Errorf("creating topic %s: the broker's answer does not name it", full)
		case errors.Is(err, kerr.TopicAlreadyExists):
			existing = append(existing, rt)
		case err != nil && t.internalMaxBytes > 0 && (errors.Is(err, kerr.PolicyViolation) || errors.Is(err, kerr.InvalidConfig)):
			// A cluster's policy may cap max.message.bytes: name the
			// option that set it.
			return fmt.Errorf("creating topic %s with max.message.bytes=%d (internal_max_message_bytes): %w", full, t.internalMaxBytes, err)
		case err != nil:
			return fmt.Errorf("creating topic %s: %w", full, err)
		default:
			created[full] = true
		}
		names = append(names, full)
	}
	// Until a new topic's partitions have leaders, producing to it or
	// listing its offsets meets retriable errors that franz-go backs off
	// from for hundreds of milliseconds; and a topic that already existed
	// may be another instance's, being created right now (two job servers
	// starting one application at once), whose metadata shows no
	// partitions until then.
	partitionCounts, err := WaitForLeaders(ctx, adm.raw, names...)
	if err != nil {
		return err
	}
	for _, rt := range existing {
		got := partitionCounts[rt.Topic]
		if got < rt.NumPartitions && t.sourceChangelog(rt.Topic) {
			// Partitions were added to the topic the sub-topology
			// reads since the application last ran: its tasks'
			// changelog grows with it.
			if err := growTopic(ctx, adm.raw, rt.Topic, rt.NumPartitions); err != nil {
				return err
			}
			continue
		}
		if got != rt.NumPartitions {
			return fmt.Errorf("topic %s exists with %d partitions, the plan needs %d (internal_parallelism changed? use a new application_id)", rt.Topic, got, rt.NumPartitions)
		}
	}
	if err := t.internalLimits(ctx, adm.Client, names, created); err != nil {
		return err
	}
	return t.createDeadLetterTopic(ctx, adm)
}

// internalLimits records the max.message.bytes of the internal topics
// names: what the broker describes, else what Create gave the topics it
// created. A topic that existed (made by an earlier run, maybe with
// another internal_max_message_bytes, or changed by an operator) keeps its
// own: the producer builds batches up to it, and a larger batch would fail
// the whole cycle. One that cannot be described stays unknown
// (RecordLimit: Kafka's default).
func (t *Set) internalLimits(ctx context.Context, adm *kadm.Client, names []string, created map[string]bool) error {
	var existing []string
	for _, name := range names {
		switch {
		case !created[name]:
			existing = append(existing, name)
		case t.internalMaxBytes > 0:
			t.MaxMessageBytes[name] = t.internalMaxBytes
		}
	}
	return t.discoverMaxMessageBytes(ctx, adm, existing...)
}

// BelowInternalLimit lists the internal topics whose max.message.bytes is
// below the one SetInternalMaxMessageBytes asked for, or unknown, with
// their limits (RecordLimit): topics an earlier run created.
func (t *Set) BelowInternalLimit() map[string]int32 {
	below := map[string]int32{}
	if t.internalMaxBytes <= 0 {
		return below
	}
	for _, name := range t.InternalNames() {
		if m := t.RecordLimit(name); m < t.internalMaxBytes {
			below[name] = m
		}
	}
	return below
}

// sourceChangelog says whether the topic (a Kafka name) is the changelog
// of a sub-topology that reads a user's topic: one partition per partition
// of that topic.
func (t *Set) sourceChangelog(full string) bool {
	for id, name := range t.Changelogs {
		if t.Full(name) != full {
			continue
		}
		for input, st := range t.Consumer {
			if st.ID == id {
				return t.ByName[input] != nil && t.ByName[input].Kind == translate.TopicKafka
			}
		}
	}
	return false
}

// GrowChangelog makes the changelog of sub-topology sub, which reads a
// user's topic, have at least n partitions: partition p of the topic is
// task p, whose state is changelog partition p, and partitions added to
// the topic while the job runs need theirs. Instances that grow it at
// once agree: the first wins, the others find it grown.
func (t *Set) GrowChangelog(ctx context.Context, cl *kgo.Client, sub int, n int32) error {
	name, ok := t.Changelogs[sub]
	if !ok {
		return fmt.Errorf("sub-topology %d has no changelog", sub)
	}
	return growTopic(ctx, cl, t.Full(name), n)
}

// growTopic raises topic's partition count to n unless it has as many
// already, and waits for the new partitions' leaders.
func growTopic(ctx context.Context, cl *kgo.Client, topic string, n int32) error {
	counts, err := WaitForLeaders(ctx, cl, topic)
	if err != nil {
		return err
	}
	if counts[topic] >= n {
		return nil
	}
	resp, err := kadm.NewClient(cl).UpdatePartitions(ctx, int(n), topic)
	if err == nil {
		err = resp.Error()
	}
	// Another instance may have grown it since: the metadata tells.
	if err != nil && !errors.Is(err, kerr.InvalidPartitions) {
		return fmt.Errorf("adding partitions to topic %s (to %d, for the partitions added to the topic its sub-topology reads): %w", topic, n, err)
	}
	// The brokers' metadata shows the new partitions a moment later.
	deadline := time.Now().Add(topicReadyTimeout)
	for {
		if counts, err = WaitForLeaders(ctx, cl, topic); err != nil {
			return err
		}
		if counts[topic] >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s has %d partitions %v after growing it to %d", topic, counts[topic], topicReadyTimeout, n)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// createTimeout is how long the controller may take to create the topics
// (kadm's default).
const createTimeout = 15 * time.Second

// createDeadLetterTopic creates the application's own dead-letter topic:
// one partition (bad records of every task, in the order they were met);
// an existing one is kept, whatever its partition count. It is never
// deleted with the other internal topics: dead letters are the user's.
func (t *Set) createDeadLetterTopic(ctx context.Context, adm *Admin) error {
	if t.DeadLetter == "" || !t.createDeadLetter {
		return nil
	}
	resp, err := adm.CreateTopic(ctx, 1, int16(t.replication), nil, t.DeadLetter)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating the dead-letter topic %s: %w", t.DeadLetter, err)
	}
	// A real cluster answers UNKNOWN_TOPIC_OR_PARTITION for a while after
	// CreateTopics, and the producer gives up on a record after a few such
	// answers: wait until every partition has a leader.
	partitions, err := WaitForLeaders(ctx, adm.raw, t.DeadLetter)
	if err != nil {
		return fmt.Errorf("the dead-letter topic: %w", err)
	}
	t.DeadLetterPartitions = partitions[t.DeadLetter]
	return t.discoverMaxMessageBytes(ctx, adm.Client, t.DeadLetter)
}

// WaitForLeaders waits until every one of topics, created, has partitions
// that all have a leader, for at most topicReadyTimeout, and returns their
// partition counts.
func WaitForLeaders(ctx context.Context, cl *kgo.Client, topics ...string) (map[string]int32, error) {
	var partitions map[string]int32
	notReady, err := untilMetadata(ctx, cl, topics, func(resp *kmsg.MetadataResponse) (notReady string, err error) {
		partitions, notReady, err = readiness(resp, topics)
		return notReady, err
	})
	switch {
	case errors.Is(err, errMetadataTimeout) && notReady == "":
		return nil, fmt.Errorf("topics %s: no metadata %v after they were created: %w", strings.Join(topics, ", "), topicReadyTimeout, err)
	case errors.Is(err, errMetadataTimeout):
		return nil, fmt.Errorf("topic %s: its partitions have no leader %v after it was created (%v)", notReady, topicReadyTimeout, err)
	case err != nil:
		return nil, err
	}
	return partitions, nil
}

// errMetadataTimeout: untilMetadata's wait took topicReadyTimeout.
var errMetadataTimeout = errors.New("timed out")

// untilMetadata asks for the metadata of topics until check finds the
// answer it waits for (no topic at fault and no error), for at most
// topicReadyTimeout; at the deadline it returns check's last topic at fault
// and its error (or the request's) wrapped in errMetadataTimeout. It asks
// again soon at first (leaders come, and deleted topics go, within
// milliseconds), then every 100 ms. Each ask is a Metadata request of its
// own: kadm's ListTopics answers from franz-go's metadata cache, which
// keeps a topic seen without leaders for MetadataMinAge (5 s).
func untilMetadata(ctx context.Context, cl *kgo.Client, topics []string, check func(*kmsg.MetadataResponse) (fault string, err error)) (string, error) {
	req := kmsg.NewPtrMetadataRequest()
	// Never: on a broker with auto.create.topics.enable (Kafka's default)
	// asking for a deleted topic would create it again.
	req.AllowAutoTopicCreation = false
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	deadline := time.Now().Add(topicReadyTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		fault := ""
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			fault, err = check(resp)
		}
		if fault == "" && err == nil {
			return "", nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				return fault, errMetadataTimeout
			}
			return fault, fmt.Errorf("%w: %w", errMetadataTimeout, err)
		}
		select {
		case <-ctx.Done():
			return fault, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// readiness reports the partition counts of topics in resp, or the first
// topic of them whose partitions are not all led yet, with its error if it
// has one.
func readiness(resp *kmsg.MetadataResponse, topics []string) (map[string]int32, string, error) {
	byName := make(map[string]kmsg.MetadataResponseTopic, len(resp.Topics))
	for _, rt := range resp.Topics {
		if rt.Topic != nil {
			byName[*rt.Topic] = rt
		}
	}
	partitions := make(map[string]int32, len(topics))
	for _, name := range topics {
		rt := byName[name]
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil || len(rt.Partitions) == 0 {
			return nil, name, err
		}
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return nil, name, kerr.ErrorForCode(p.ErrorCode)
			}
		}
		partitions[name] = int32(len(rt.Partitions))
	}
	return partitions, "", nil
}

// topicReadyTimeout bounds waiting for a created topic's leaders.
const topicReadyTimeout = 30 * time.Second

// changelogPartitions is the partition count of a sub-topology's changelog:
// that of its input topic.
func (t *Set) changelogPartitions(sub int) int32 {
	for name, st := range t.Consumer {
		if st.ID == sub {
			return t.Partitions[name]
		}
	}
	return 1
}

// Delete deletes every internal topic, the pipeline topic among them; one
// already deleted (by another instance of the application) is no error. It
// returns once the brokers' metadata no longer has them (waiting at most
// topicReadyTimeout).
//
// Why wait: a bounded job's end reports DONE after Delete, and the next job
// of the application creates topics of the same names. The controller
// answers DeleteTopics once the deletion is committed; a broker applies it
// a moment later. Meanwhile it answers for the old topics: the next job's
// wait for its new topics' leaders may pass on the old ones, a client's
// first metadata may hold the old topic ID (franz-go never adopts a new ID
// for a name it holds: the topic then fails with UNKNOWN_TOPIC_ID), and an
// end offset listed there is out of reach of a read of the new topic.
func (t *Set) Delete(ctx context.Context, adm *Admin) error {
	names := []string{t.Full(shuffle.StatusTopic), t.Full(shuffle.PipelineTopic)}
	for name := range t.Partitions {
		if t.ByName[name].Kind != translate.TopicKafka {
			names = append(names, t.Full(name))
		}
	}
	for _, name := range t.Changelogs {
		names = append(names, t.Full(name))
	}
	resps, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return err
	}
	for _, r := range resps {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("deleting topic %s: %w", r.Topic, r.Err)
		}
	}
	return WaitForDeletion(ctx, adm.raw, names...)
}

// WaitForDeletion waits until the metadata of every one of topics answers
// UNKNOWN_TOPIC_OR_PARTITION, for at most topicReadyTimeout.
func WaitForDeletion(ctx context.Context, cl *kgo.Client, topics ...string) error {
	left, err := untilMetadata(ctx, cl, topics, func(resp *kmsg.MetadataResponse) (string, error) {
		for _, rt := range resp.Topics {
			if rt.Topic != nil && !errors.Is(kerr.ErrorForCode(rt.ErrorCode), kerr.UnknownTopicOrPartition) {
				return *rt.Topic, nil
			}
		}
		return "", nil
	})
	switch {
	case errors.Is(err, errMetadataTimeout) && left != "":
		return fmt.Errorf("topic %s: still in the brokers' metadata %v after its deletion", left, topicReadyTimeout)
	case errors.Is(err, errMetadataTimeout):
		return fmt.Errorf("topics %s: no metadata %v after their deletion: %w", strings.Join(topics, ", "), topicReadyTimeout, err)
	}
	return err
}

// WriteImpulses writes the impulse record of every impulse topic that is
// still empty, so a restarted application does not replay its impulses;
// it connects per sec (nil: PLAINTEXT), with opts besides.
func (t *Set) WriteImpulses(ctx context.Context, brokers string, sec *kafkaconn.Security, opts ...kgo.Opt) error {
	// Partitions created a moment ago may have leaders in the metadata
	// before their broker serves them: the first ListOffsets or Produce
	// can meet a retriable error, which franz-go's default backoff (250 ms
	// at least) would make most of a small job's start.
	backoff := kgo.RetryBackoffFn(func(fails int) time.Duration {
		return min(5*time.Millisecond<<min(fails, 6), 250*time.Millisecond)
	})
	// One record, waited for: franz-go's default linger (10 ms) would
	// only delay it, a sixth of a small job's run on the embedded broker.
	cl, err := kafkaconn.NewClient(brokers, sec, append([]kgo.Opt{kgo.RecordPartitioner(shuffle.Partitioner()), backoff, kgo.ProducerLinger(0)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for name, tp := range t.ByName {
		if tp.Kind != translate.TopicImpulse {
			continue
		}
		full := t.Full(name)
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

// ChangelogSuffix ends every changelog topic's name.
const ChangelogSuffix = "-changelog"

// ChangelogTopic is the changelog topic of a sub-topology (within the
// application).
func ChangelogTopic(sub int) string { return fmt.Sprintf("subtopology-%d%s", sub, ChangelogSuffix) }
