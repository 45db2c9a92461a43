package runtime

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
)

// pollSize turns a cycle's bound in elements (read_max_elements_per_poll)
// into the number of records a poll may take.
//
// Why: a DATA_PACKED record holds up to record_pack_bytes of elements, two
// to four thousand small ones, and Kafka's client counts records. Counted
// as one, a pack let a cycle take a whole fetch response of them (64 MiB,
// millions of elements), and a GroupByKey keeps the groups a cycle's input
// completes in memory until the cycle fires them: a windowed input that
// closes its windows as it goes peaked at 460-580 MiB. Counting each
// pack's elements after the poll bounds what a cycle holds by the option,
// not by the fetch size.
//
// Invariants:
//   - A poll takes at least one record, so a cycle always makes progress.
//   - records(limit) assumes the next records are as dense as the last
//     poll's (at least one element each): in steady state a cycle takes
//     about limit elements. A jump in density overshoots it for one poll,
//     and the intake cuts that cycle back to limit (intake.cycle).
//   - Before any poll has brought records the density assumed is the
//     densest a pack of record_pack_bytes plausibly gets (minPackedElement
//     bytes each), so an instance that starts with a backlog of packs
//     starts with a small cycle, not a fetch response of them.
type pollSize struct {
	density float64 // elements per record: the last poll's, or the initial guess
}

// minPackedElement is the smallest a packed windowed element plausibly
// is: a short key and value, a timestamp, the window and the pane.
const minPackedElement = 16

func newPollSize(recordPackBytes int) pollSize {
	return pollSize{density: max(1, float64(recordPackBytes)/minPackedElement)}
}

// records is how many records a poll may take to bring about elements
// more elements (at least one).
func (s *pollSize) records(elements int) int {
	return max(1, int(float64(elements)/s.density))
}

// observe learns the density of a poll's records; a poll of none teaches
// nothing.
func (s *pollSize) observe(elements, records int) {
	if records > 0 {
		s.density = max(1, float64(elements)/float64(records))
	}
}

// elementsIn counts the elements of the polled records: a record of an
// internal topic that is a DATA_PACKED record counts its values, any other
// record one. internal says whether a topic is internal (a Kafka source's
// records are the user's, whatever their first byte).
func elementsIn(fetches kgo.Fetches, internal func(topic string) bool) int {
	n := 0
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if !internal(p.Topic) {
			n += len(p.Records)
			return
		}
		for _, r := range p.Records {
			n += packedCount(r.Value)
		}
	})
	return n
}

// packedCount is how many elements an internal record holds: a pack's
// count, else one (a record that is not a well-formed pack is left to the
// task, which refuses it by its offset).
func packedCount(value []byte) int {
	if len(value) == 0 || value[0] != shuffle.KindDataPacked {
		return 1
	}
	n, _, err := shuffle.DecodePacked(value)
	if err != nil {
		return 1
	}
	return n
}

// overshoot: a cycle whose intake passes its bound by at most 1/overshoot
// of it takes the intake whole (intake.cycle): cutting it would leave a
// few packs to a cycle of their own.
const overshoot = 4
