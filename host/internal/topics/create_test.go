package topics

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
)

// Instances of one application starting together all create its internal
// topics: whichever loses the race finds the topic being created and waits
// for its partitions rather than failing ("exists with 0 partitions").
func TestCreateRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	plan := &translate.Plan{
		Topics: []*translate.Topic{{Name: "gbk-repartition", Kind: translate.TopicRepartition}},
		SubTopologies: []*translate.SubTopology{
			{ID: 0, Input: "gbk-repartition", Root: translate.Root{Kind: translate.RootGroupByKey}},
		},
	}
	for round := range 5 { // the race is not lost every time
		app := kafkatest.UniqueName(t, "race")
		const instances = 6
		var wg sync.WaitGroup
		errs := make([]error, instances)
		start := make(chan struct{})
		for i := range instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				adm := kadm.NewClient(kafkatest.Client(t, bootstrap))
				ts := New(plan, app, 1, 8)
				<-start
				errs[i] = ts.Create(ctx, adm)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, instance %d: %v", round, i, err)
			}
		}
	}
}
