package topics

import (
	"slices"
	"testing"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Written lists what the application's tasks produce to: internal topics
// but impulses, changelogs, the status topic, the user topics Kafka writes
// name, and the dead-letter topic; never a topic it only reads.
func TestWritten(t *testing.T) {
	plan := kafkaPlan("in", "out")
	plan.Topics = append(plan.Topics,
		&translate.Topic{Name: "imp", Kind: translate.TopicImpulse},
		&translate.Topic{Name: "gbk", Kind: translate.TopicRepartition},
		&translate.Topic{Name: "side", Kind: translate.TopicSideInput},
	)
	plan.SubTopologies = append(plan.SubTopologies, &translate.SubTopology{ID: 1, Input: "gbk", Root: translate.Root{Kind: translate.RootGroupByKey, TransformID: "g"}})
	s := New(plan, "app", 1, 2)
	s.Discovered(map[string]int32{"in": 2, "out": 3})
	s.SetDeadLetter("app-dead", false)
	want := []string{
		"app-dead",
		shuffle.TopicName("app", "gbk"),
		shuffle.TopicName("app", "side"),
		shuffle.TopicName("app", shuffle.StatusTopic),
		shuffle.TopicName("app", ChangelogTopic(0)),
		shuffle.TopicName("app", ChangelogTopic(1)),
		"out",
	}
	slices.Sort(want)
	if got := s.Written(); !slices.Equal(got, want) {
		t.Errorf("Written() = %q, want %q", got, want)
	}
}
