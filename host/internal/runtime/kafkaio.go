package runtime

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/translate"
)

// startOffsets is the group's AdjustFetchOffsetsFn: a partition without a
// committed offset starts at the start (the consumer's reset offset), which
// internal topics need; a Kafka read's partition starts per the read's
// auto.offset.reset instead: earliest, or latest (Kafka's default).
//
// Only the first assignment goes through here: an offset out of range
// later (the committed offset deleted by retention) resets to the start.
func (i *instance) startOffsets(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	for topic, ps := range offsets {
		st := i.subByTopic[topic]
		if st == nil || st.Root.Kind != translate.RootKafkaSource || st.Root.KafkaRead.ConsumerConfig["auto.offset.reset"] == "earliest" {
			continue
		}
		for p, o := range ps {
			if o.EpochOffset().Offset == -2 { // no commit: the reset offset, AtStart
				ps[p] = kgo.NewOffset().AtEnd()
			}
		}
	}
	return offsets, nil
}
