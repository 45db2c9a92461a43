package shuffle

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Record kinds: the first byte of every internal record's value.
const (
	// KindData: the rest is one windowed value in the PCollection's wire coder.
	KindData byte = 1
	// KindWatermark: the rest is a watermark report (see EncodeWatermark).
	KindWatermark byte = 2
	// KindProcessingTime: the rest is a processing-time report, encoded like
	// a watermark report (see EncodeProcessingTime). Only pipelines driven by
	// a TestStream carry them: the TestStream's synthetic processing-time
	// clock travels with the data, so every task sees a clock advance after
	// the elements that precede it.
	KindProcessingTime byte = 3
	// KindDataPacked: the rest is whole windowed values for one partition,
	// counted and concatenated (see Pack).
	KindDataPacked byte = 4
)

// A watermark report: varint length + producer id, then the producer's output
// watermark in milliseconds as 8 bytes big-endian.
//
// Producer ids are "<sub-topology id>/<partition>": one per producing task, so
// a consumer can tell how many distinct producers it has heard from.

// EncodeWatermark returns a record value reporting producer's watermark.
func EncodeWatermark(producer string, watermark int64) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(producer)+8)
	b = append(b, KindWatermark)
	b = binary.AppendUvarint(b, uint64(len(producer)))
	b = append(b, producer...)
	return binary.BigEndian.AppendUint64(b, uint64(watermark))
}

// DecodeWatermark parses the value of a KindWatermark record.
func DecodeWatermark(value []byte) (producer string, watermark int64, err error) {
	if len(value) == 0 || value[0] != KindWatermark {
		return "", 0, errors.New("not a watermark record")
	}
	b := value[1:]
	n, l := binary.Uvarint(b)
	if l <= 0 || uint64(len(b)-l) < n+8 {
		return "", 0, fmt.Errorf("watermark record: truncated (%d bytes)", len(value))
	}
	producer = string(b[l : l+int(n)])
	watermark = int64(binary.BigEndian.Uint64(b[l+int(n):]))
	return producer, watermark, nil
}

// EncodeProcessingTime returns a record value reporting producer's
// processing time (milliseconds).
func EncodeProcessingTime(producer string, ms int64) []byte {
	b := EncodeWatermark(producer, ms)
	b[0] = KindProcessingTime
	return b
}

// DecodeProcessingTime parses the value of a KindProcessingTime record.
func DecodeProcessingTime(value []byte) (producer string, ms int64, err error) {
	if len(value) == 0 || value[0] != KindProcessingTime {
		return "", 0, errors.New("not a processing-time record")
	}
	w := append([]byte{KindWatermark}, value[1:]...)
	return DecodeWatermark(w)
}

// ProducerID names a producing task.
func ProducerID(subTopology int, partition int32) string {
	return fmt.Sprintf("%d/%d", subTopology, partition)
}

// TopicName is the Kafka name of the internal topic name of application appID.
func TopicName(appID, name string) string { return "__beam_" + appID + "_" + name }

// StatusTopic is the name (within the application) of the status topic.
const StatusTopic = "status"

// PipelineTopic is the name (within the application) of the pipeline topic:
// the translated job, for every process of the application.
const PipelineTopic = "pipeline"
