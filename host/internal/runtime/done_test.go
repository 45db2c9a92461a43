package runtime

import (
	"testing"

	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/translate"
)

// A job is done when every task of the plan as Run found it has reported
// the maximum watermark, and every other task of its sub-topologies that
// reported (an added partition's) has too; reports of sub-topologies not
// in the plan do not count.
func TestDoneTracker(t *testing.T) {
	plan := &translate.Plan{
		Topics: []*translate.Topic{{Name: "in", Kind: translate.TopicKafka}, {Name: "shuffle", Kind: translate.TopicRepartition}},
		SubTopologies: []*translate.SubTopology{
			{ID: 0, Input: "in", Root: translate.Root{Kind: translate.RootKafkaSource}},
			{ID: 1, Input: "shuffle"},
		},
	}
	type report struct {
		task string
		wm   int64
	}
	inf := maxWatermark
	for _, tc := range []struct {
		name    string
		reports []report
		want    bool
		tasks   int // the job's tasks; 0: the plan's 4
	}{
		{name: "none", want: false},
		{name: "all of the plan", want: true,
			reports: []report{{"0/0", inf}, {"0/1", inf}, {"1/0", inf}, {"1/1", inf}}},
		{name: "one not at the maximum", want: false,
			reports: []report{{"0/0", inf}, {"0/1", 5}, {"1/0", inf}, {"1/1", inf}}},
		{name: "an added partition's task done in place of one still reading", want: false, tasks: 5,
			reports: []report{{"0/0", inf}, {"0/2", inf}, {"1/0", inf}, {"1/1", inf}}},
		{name: "an added partition's task still reading", want: false, tasks: 5,
			reports: []report{{"0/0", inf}, {"0/1", inf}, {"0/2", 7}, {"1/0", inf}, {"1/1", inf}}},
		{name: "an added partition's task done too", want: true, tasks: 5,
			reports: []report{{"0/2", 7}, {"0/0", inf}, {"0/1", inf}, {"0/2", inf}, {"1/0", inf}, {"1/1", inf}}},
		{name: "another pipeline's tasks ignored", want: true,
			reports: []report{{"7/0", 3}, {"0/0", inf}, {"0/1", inf}, {"1/0", inf}, {"1/1", inf}, {"bogus", 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := topics.New(plan, "app", 1, 2)
			ts.Discovered(map[string]int32{"in": 2})
			d := newDoneTracker(ts)
			for _, r := range tc.reports {
				d.report(r.task, r.wm)
			}
			if got := d.done(); got != tc.want {
				t.Errorf("done %v, want %v (unfinished %v)", got, tc.want, d.unfinished)
			}
			if want := max(tc.tasks, 4); d.taskCount() != want {
				t.Errorf("%d tasks, want %d", d.taskCount(), want)
			}
		})
	}
}
