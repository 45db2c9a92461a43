package status

import (
	"fmt"
	"strings"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Topology is a job's graph: its sub-topologies and the user's Kafka
// topics it reads and writes, joined by the topics between them.
type Topology struct {
	Nodes []Node `json:"nodes"`
	Edges []Edge `json:"edges"`
}

// Node is a sub-topology (Kind "subtopology") or a user's topic ("kafka").
type Node struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Label       string `json:"label"`
	SubTopology int    `json:"sub_topology"`
	// Root says how a sub-topology takes its input (impulse,
	// group-by-key, ...); Transforms are its transforms' unique names.
	Root       string   `json:"root,omitempty"`
	Transforms []string `json:"transforms,omitempty"`
}

// Edge is a topic from a producing node to a consuming one; Side marks a
// side input (read whole by every instance).
type Edge struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Topic string `json:"topic"`
	Side  bool   `json:"side,omitempty"`
}

func subNode(id int) string         { return fmt.Sprintf("st-%d", id) }
func kafkaNode(topic string) string { return "kafka-" + topic }

// RootName names a root kind as the page shows it.
func RootName(k translate.RootKind) string {
	switch k {
	case translate.RootImpulse:
		return "impulse"
	case translate.RootGroupByKey:
		return "group-by-key"
	case translate.RootPassthrough:
		return "passthrough"
	case translate.RootTestStream:
		return "test-stream"
	case translate.RootKafkaSource:
		return "kafka-read"
	}
	return fmt.Sprintf("root-%d", k)
}

// TopologyOf is the graph of plan.
func TopologyOf(plan *translate.Plan) *Topology {
	trs := plan.Pipeline.GetComponents().GetTransforms()
	name := func(id string) string {
		if n := trs[id].GetUniqueName(); n != "" {
			return n
		}
		return id
	}
	top := &Topology{}
	readers := map[string][]int{} // topic name → sub-topologies reading it
	kafka := map[string]bool{}
	addKafka := func(topic string) {
		if !kafka[topic] {
			kafka[topic] = true
			top.Nodes = append(top.Nodes, Node{ID: kafkaNode(topic), Kind: "kafka", Label: "Kafka topic " + topic})
		}
	}
	kinds := map[string]translate.TopicKind{}
	for _, t := range plan.Topics {
		kinds[t.Name] = t.Kind
	}
	for _, st := range plan.SubTopologies {
		n := Node{ID: subNode(st.ID), Kind: "subtopology", SubTopology: st.ID, Root: RootName(st.Root.Kind)}
		if st.Root.TransformID != "" {
			n.Transforms = append(n.Transforms, name(st.Root.TransformID))
		}
		for _, s := range st.Stages {
			for _, id := range s.Transforms {
				n.Transforms = append(n.Transforms, name(id))
			}
		}
		short := n.Transforms
		if len(short) > 4 {
			short = append(short[:3:3], fmt.Sprintf("… %d more", len(n.Transforms)-3))
		}
		n.Label = fmt.Sprintf("%d: %s\n%s", st.ID, n.Root, strings.Join(short, "\n"))
		top.Nodes = append(top.Nodes, n)
		readers[st.Input] = append(readers[st.Input], st.ID)
		if kinds[st.Input] == translate.TopicKafka {
			addKafka(st.Input)
			top.Edges = append(top.Edges, Edge{From: kafkaNode(st.Input), To: subNode(st.ID), Topic: st.Input})
		}
	}
	side := map[string][]int{} // side input topic → sub-topologies reading it
	for _, st := range plan.SubTopologies {
		for _, s := range st.Stages {
			for _, si := range s.SideInputs {
				side[si.Topic] = append(side[si.Topic], st.ID)
			}
		}
	}
	for _, st := range plan.SubTopologies {
		seen := map[string]bool{}
		for _, sk := range st.Sinks {
			if seen[sk.Topic] {
				continue
			}
			seen[sk.Topic] = true
			if sk.KafkaWrite != nil {
				addKafka(sk.Topic)
				top.Edges = append(top.Edges, Edge{From: subNode(st.ID), To: kafkaNode(sk.Topic), Topic: sk.Topic})
				continue
			}
			for _, r := range readers[sk.Topic] {
				top.Edges = append(top.Edges, Edge{From: subNode(st.ID), To: subNode(r), Topic: sk.Topic})
			}
			for _, r := range side[sk.Topic] {
				top.Edges = append(top.Edges, Edge{From: subNode(st.ID), To: subNode(r), Topic: sk.Topic, Side: true})
			}
		}
	}
	return top
}

// InputTopics are the Kafka names of the plan's sub-topologies' input
// topics (the application's internal ones under appID), by sub-topology id;
// source says which are the user's topics.
func InputTopics(plan *translate.Plan, appID string) (full map[int]string, source map[int]bool) {
	kinds := map[string]translate.TopicKind{}
	for _, t := range plan.Topics {
		kinds[t.Name] = t.Kind
	}
	full, source = map[int]string{}, map[int]bool{}
	for _, st := range plan.SubTopologies {
		if kinds[st.Input] == translate.TopicKafka {
			full[st.ID], source[st.ID] = st.Input, true
			continue
		}
		full[st.ID] = shuffle.TopicName(appID, st.Input)
	}
	return full, source
}
