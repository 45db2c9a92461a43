package shuffle

import (
	"math/rand/v2"
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

var foobarHash int32 = -790332482 // Kafka's murmur2("foobar")

// KeyPartition picks what Partitioner picks for the same key, so a key's
// packed and unpacked values meet in one partition.
func TestKeyPartitionMatchesPartitioner(t *testing.T) {
	tp := Partitioner().ForTopic("t")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		key := make([]byte, rng.IntN(40))
		for j := range key {
			key[j] = byte(rng.Uint32())
		}
		for _, n := range []int32{1, 3, 4, 16} {
			if got, want := KeyPartition(key, n), int32(tp.Partition(&kgo.Record{Key: key}, int(n))); got != want {
				t.Fatalf("key %x, %d partitions: KeyPartition %d, Partitioner %d", key, n, got, want)
			}
		}
	}
	if got, want := KeyPartition([]byte("foobar"), 7), int32(uint32(foobarHash)&0x7fffffff)%7; got != want {
		t.Errorf("KeyPartition(foobar, 7) = %d, want %d (Kafka's vector)", got, want)
	}
}
