package task

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/translate"
)

// The payload rows of the Kafka schema transforms (translate.KafkaPayloadSchema,
// KafkaRead.PayloadRow and KafkaWrite.PayloadRow): a source's element is
// the row of the record's value; a sink's record is the row's one field
// as its value, with a null key.

// newPayload sets the source's payload row encoder.
func (s *kafkaSource) newPayload() error {
	r := s.t.sub.Root
	elem, err := elemCoder(s.t.env.Plan, r.Output)
	if err == nil {
		s.payload, err = kafkaio.NewPayloadEncoder(s.t.env.Plan.Pipeline.GetComponents().GetCoders(), elem, r.KafkaRead.ValueFormat)
	}
	if err != nil {
		return fmt.Errorf("transform %s: output %s: %w", r.TransformID, r.Output, err)
	}
	return nil
}

func newPayloadSink(plan *translate.Plan, s *translate.Sink) (*kafkaSink, error) {
	elem, err := elemCoder(plan, s.PCollection)
	if err != nil {
		return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
	}
	pd, err := kafkaio.NewPayloadDecoder(plan.Pipeline.GetComponents().GetCoders(), elem)
	if err != nil {
		return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
	}
	return &kafkaSink{payload: pd}, nil
}

// sinkPayloadToKafka produces a payload row's value, with a null key,
// round-robin over the topic's partitions (as a null-keyed record of
// sinkToKafka).
func (t *Task) sinkPayloadToKafka(s *translate.Sink, ks *kafkaSink, elem []byte) error {
	v, err := ks.payload(elem)
	if err != nil {
		return fmt.Errorf("transform %s (%s): %w", s.TransformID, t.transformName(s.TransformID), err)
	}
	n := t.env.Topics.Outputs[s.Topic]
	if n <= 0 {
		return fmt.Errorf("transform %s: topic %s: partition count unknown", s.TransformID, s.Topic)
	}
	t.env.Produce(&kgo.Record{Topic: s.Topic, Value: v, Partition: (t.rr.Add(1) & 0x7fffffff) % n})
	return nil
}
