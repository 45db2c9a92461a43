package shuffle

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Partitioner routes internal records: a record with a non-nil Key goes to the
// partition Kafka's default partitioner would pick (murmur2 of the key), so any
// instance, in any language, routes a key to the same partition; a record with
// a nil Key goes to the partition already set on it (watermark reports, which
// go to every partition, and unkeyed data spread by the producer), as does
// a record given its partition by SetPartition.
func Partitioner() kgo.Partitioner {
	return partitioner{hashed: kgo.StickyKeyPartitioner(nil)}
}

type partitioner struct{ hashed kgo.Partitioner }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{hashed: p.hashed.ForTopic(topic)}
}

type topicPartitioner struct{ hashed kgo.TopicPartitioner }

func (topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }
func (topicPartitioner) OnNewBatch()                          {}

// explicitPartition is the Context of a record given its partition by
// SetPartition: a sentinel, so marking a record allocates nothing.
var explicitPartition = context.WithValue(context.Background(), explicitPartitionKey{}, true)

type explicitPartitionKey struct{}

// SetPartition gives r its partition whatever its key (a Kafka write row's
// partition): the partitioner keeps it. It sets r.Context, which the
// producer leaves as set.
func SetPartition(r *kgo.Record, partition int32) {
	r.Partition = partition
	r.Context = explicitPartition
}

func (p topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Key != nil && r.Context != explicitPartition {
		return p.hashed.Partition(r, n)
	}
	return int(r.Partition)
}
