package shuffle

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Keys land where Kafka's default partitioner puts them: murmur2 of the key,
// high bit masked, modulo the partition count (Kafka's UtilsTest vectors).
func TestPartitionerMatchesKafka(t *testing.T) {
	tp := Partitioner().ForTopic("t")
	for _, tc := range []struct {
		key  string
		hash int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"abc", 479470107},
	} {
		for _, n := range []int{1, 4, 7} {
			want := int(uint32(tc.hash)&0x7fffffff) % n
			if got := tp.Partition(&kgo.Record{Key: []byte(tc.key)}, n); got != want {
				t.Errorf("key %q, %d partitions: %d, want %d", tc.key, n, got, want)
			}
		}
	}
	if got := tp.Partition(&kgo.Record{Partition: 3}, 4); got != 3 {
		t.Errorf("a record without key goes to its own partition: got %d, want 3", got)
	}
}

// A keyed record given its partition by SetPartition keeps it.
func TestSetPartition(t *testing.T) {
	tp := Partitioner().ForTopic("t")
	r := &kgo.Record{Key: []byte("abc")} // murmur2: partition 3 of 4
	SetPartition(r, 1)
	if got := tp.Partition(r, 4); got != 1 {
		t.Errorf("a keyed record given partition 1: got %d", got)
	}
}
