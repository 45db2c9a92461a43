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

// KeyPartition is the partition of n that Kafka's default partitioner (and
// Partitioner) gives a record keyed by key: a packed record has no key, so
// its producer picks the partition its values' keys hash to, and a key's
// values meet in one partition whether they travel packed or not.
func KeyPartition(key []byte, n int32) int32 {
	return int32(murmur2(key)&0x7fffffff) % n
}

// murmur2 is Kafka's Utils.murmur2 (seed 0x9747b28c), as kgo's
// StickyKeyPartitioner hashes keys.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
