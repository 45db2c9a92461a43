package task

import (
	"errors"
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// The payload rows of the Kafka schema transforms (translate.KafkaPayloadSchema,
// KafkaRead.PayloadRow and KafkaWrite.PayloadRow): a source's element is
// the row of the record's value (its bytes or string, or, for a
// structured format, the row parsed from it); a sink's record is the
// row's one field, or the row serialized in its format, as its value,
// with a null key. A read's or write's error output takes what the format
// cannot parse or hold.

// newPayload sets the source's payload row encoder.
func (s *kafkaSource) newPayload() error {
	r := s.t.sub.Root
	elem, err := elemCoder(s.t.env.Plan, r.Output)
	coders := s.t.env.Plan.Pipeline.GetComponents().GetCoders()
	switch {
	case err != nil:
	case r.KafkaRead.RowFormat != "":
		var enc kafkaio.PayloadEncoder
		if url := r.KafkaRead.SchemaRegistryURL; url != "" {
			enc, err = kafkaio.NewRegistryPayloadEncoder(coders, elem, r.KafkaRead.RowSchema, url)
		} else {
			enc, err = kafkaio.NewRowPayloadEncoder(coders, elem, r.KafkaRead)
		}
		if err == nil {
			// A value that is not the schema's JSON, Avro or protobuf is
			// a bad record (the deserialization_error_policy's, or the
			// error output's), as a value a deserializer refuses; a
			// registry that cannot give a schema says nothing about the
			// record, and fails the task.
			s.payload = func(dst []byte, rec *kgo.Record) ([]byte, error) {
				b, err := enc(dst, rec)
				var re *kafkaio.RegistryError
				switch {
				case errors.As(err, &re):
					return nil, fmt.Errorf("topic %s partition %d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
				case err != nil:
					return nil, &decodeError{"value", err}
				}
				return b, nil
			}
		}
	default:
		s.payload, err = kafkaio.NewPayloadEncoder(coders, elem, r.KafkaRead.ValueFormat)
	}
	if err != nil {
		return fmt.Errorf("transform %s: output %s: %w", r.TransformID, r.Output, err)
	}
	if r.ErrorOutput != "" {
		elem, err := elemCoder(s.t.env.Plan, r.ErrorOutput)
		if err == nil {
			s.errorRow, err = kafkaio.NewErrorRowEncoder(coders, elem)
		}
		if err != nil {
			return fmt.Errorf("transform %s: error output %s: %w", r.TransformID, r.ErrorOutput, err)
		}
	}
	return nil
}

// emitError emits the error row of a record the read could not make its
// row of to the read's error output, at the record's timestamp.
func (s *kafkaSource) emitError(rec *kgo.Record, de *decodeError) error {
	ts := s.timestamp(rec)
	b := windowedHeader(s.scratch[:0], ts)
	b = s.errorRow(b, nonNilBytes(rec.Value), de.Error())
	s.scratch = b
	s.maxTs = max(s.maxTs, ts)
	return s.t.route(s.t.sub.Root.ErrorOutput, b)
}

// nonNilBytes is b, or empty for nil: an error row's failed_row is not
// nullable, and a tombstone's value is nil.
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func newPayloadSink(plan *translate.Plan, s *translate.Sink) (*kafkaSink, error) {
	elem, err := elemCoder(plan, s.PCollection)
	if err != nil {
		return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
	}
	pd, err := kafkaio.NewRowPayloadDecoder(plan.Pipeline.GetComponents().GetCoders(), elem, s.KafkaWrite)
	if err != nil {
		return nil, fmt.Errorf("transform %s: input %s: %w", s.TransformID, s.PCollection, err)
	}
	ks := &kafkaSink{payload: pd, structured: s.KafkaWrite.RowFormat != ""}
	if s.ErrorOutput != "" {
		errElem, err := elemCoder(plan, s.ErrorOutput)
		if err == nil {
			ks.errorRow, err = kafkaio.NewWriteErrorRowEncoder(plan.Pipeline.GetComponents().GetCoders(), errElem, elem)
		}
		if err != nil {
			return nil, fmt.Errorf("transform %s: error output %s: %w", s.TransformID, s.ErrorOutput, err)
		}
	}
	return ks, nil
}

// sinkPayloadToKafka produces a payload row's value, with a null key,
// round-robin over the topic's partitions (as a null-keyed record of
// sinkToKafka).
func (t *Task) sinkPayloadToKafka(s *translate.Sink, ks *kafkaSink, wv shuffle.WindowedValue) error {
	v, err := ks.payload(wv.Elem)
	if err != nil && ks.errorRow != nil {
		// The write's error output (error_handling) takes it, in the
		// input element's windows, whatever the policy.
		b := append(ks.scratch[:0], wv.Raw[:len(wv.Raw)-len(wv.Elem)]...)
		if b, err = ks.errorRow(b, wv.Elem, err.Error()); err != nil {
			return fmt.Errorf("transform %s (%s): error output: %w", s.TransformID, t.transformName(s.TransformID), err)
		}
		ks.scratch = b
		t.addMetrics([]*pipepb.MonitoringInfo{hostCounter(s.TransformID, MetricErrorOutput, 1)})
		return t.route(s.ErrorOutput, b)
	}
	if err != nil && ks.structured {
		// A row the format cannot hold (a NaN in JSON) is a bad element,
		// as one a serializer refuses.
		return t.badSinkElement(s, wv, nil, wv.Elem, &kgo.Record{Topic: s.Topic}, false, fmt.Errorf("value: %w", err))
	}
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
