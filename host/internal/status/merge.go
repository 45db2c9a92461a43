package status

import (
	"sort"

	"github.com/ksrunner/ksrunner/host/internal/metrics"
)

// MergeTasks joins the application's tasks as Kafka sees them (cluster,
// from Cluster.Tasks; may be empty) with this process's instance figures
// (local): each task gets its local figures if this instance ran it, and
// a task only the instance knows (the cluster view failed) is added.
func MergeTasks(cluster []Task, local metrics.InstanceSnapshot, inputs map[int]string, source map[int]bool) []Task {
	out := make([]Task, 0, len(cluster))
	idx := map[metrics.TaskRef]int{}
	for _, t := range cluster {
		t.Local = local.ID != "" && t.Owner == local.ID
		idx[metrics.TaskRef{SubTopology: t.SubTopology, Partition: t.Partition}] = len(out)
		out = append(out, t)
	}
	for _, f := range local.Tasks {
		it := &InstanceTask{Owned: f.Owned, RecordsIn: f.RecordsIn, RecordsOut: f.RecordsOut, Lag: f.Lag,
			StateBytes: f.StateBytes, Restores: f.Restores, RestoredRecords: f.RestoredRecords}
		i, ok := idx[f.TaskRef]
		if !ok {
			t := Task{SubTopology: f.SubTopology, Partition: f.Partition, Topic: inputs[f.SubTopology], Source: source[f.SubTopology],
				Committed: -1, End: -1, Lag: -1, RatePerSec: -1}
			if f.Owned {
				t.Owner, t.Local = local.ID, true
			}
			i = len(out)
			out = append(out, t)
		}
		out[i].Instance = it
		// This instance's watermark is fresher than the status topic's
		// (sent after the next commit) while it owns the task.
		if f.Owned && f.HasWatermark {
			out[i].Watermark, out[i].HasWatermark = f.Watermark, true
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].SubTopology != out[j].SubTopology {
			return out[i].SubTopology < out[j].SubTopology
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}
