package status

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector turns the Source's jobs into metrics at each scrape: nothing
// is kept between scrapes, so a job or task that is gone is gone.
type collector struct{ src Source }

func newCollector(src Source) *collector { return &collector{src: src} }

var (
	jobLabels  = []string{"job", "application_id"}
	taskLabels = []string{"job", "application_id", "sub_topology", "partition", "topic", "source"}
	userLabels = []string{"job", "application_id", "transform", "namespace", "name", "result"}

	descJobInfo    = prometheus.NewDesc("ksrunner_job_info", "A job of this process: its name, state, process kind and instance id (value 1).", append(jobLabels, "name", "state", "process", "instance"), nil)
	descCommits    = prometheus.NewDesc("ksrunner_job_commits_total", "Commit cycles this process's instance committed.", jobLabels, nil)
	descAborts     = prometheus.NewDesc("ksrunner_job_aborts_total", "Commit cycles this process's instance aborted.", jobLabels, nil)
	descLastCycle  = prometheus.NewDesc("ksrunner_job_last_cycle_seconds", "How long this process's instance's last committed cycle took, from its cut to its commit.", jobLabels, nil)
	descCycleBound = prometheus.NewDesc("ksrunner_job_cycle_bound_elements", "Elements the instance's next cycle takes at most: read_max_elements_per_poll, lower while cycles run long.", jobLabels, nil)
	descFireBound  = prometheus.NewDesc("ksrunner_job_fire_bound_groups", "Stored groups a GroupByKey task fires in the instance's next cycle at most, lower while firing cycles run long.", jobLabels, nil)
	descOwner      = prometheus.NewDesc("ksrunner_task_owner_info", "The instance that owns the task, per the consumer group (value 1; local=\"true\" when it is this process).", append(taskLabels, "owner", "local"), nil)
	descWatermark  = prometheus.NewDesc("ksrunner_task_watermark_seconds", "The task's last reported output watermark (Unix seconds).", taskLabels, nil)
	descLag        = prometheus.NewDesc("ksrunner_task_lag_records", "Offsets of the task's input partition past the group's committed offset (source=\"true\": the source consumer lag on a user's topic).", taskLabels, nil)
	descCommitted  = prometheus.NewDesc("ksrunner_task_committed_offset", "The group's committed offset on the task's input partition.", taskLabels, nil)
	descEnd        = prometheus.NewDesc("ksrunner_task_end_offset", "The end offset of the task's input partition.", taskLabels, nil)
	descRecordsIn  = prometheus.NewDesc("ksrunner_task_records_in_total", "Records this process's instance consumed for the task.", taskLabels, nil)
	descRecordsOut = prometheus.NewDesc("ksrunner_task_records_out_total", "Data records this process's instance produced for the task (a packed record counts once).", taskLabels, nil)
	descStateBytes = prometheus.NewDesc("ksrunner_task_state_bytes", "On-disk size of the task's state in this process's store (estimate).", taskLabels, nil)
	descRestores   = prometheus.NewDesc("ksrunner_task_restores_total", "Restores of the task's state from its changelog in this process.", taskLabels, nil)
	descRestored   = prometheus.NewDesc("ksrunner_task_restored_records_total", "Changelog records those restores replayed.", taskLabels, nil)
	descOwned      = prometheus.NewDesc("ksrunner_task_owned", "1 while this process's instance runs the task, 0 after it moved away.", taskLabels, nil)
	descCounter    = prometheus.NewDesc("ksrunner_user_counter", "A user counter (Beam Metrics), attempted or committed.", userLabels, nil)
	descGauge      = prometheus.NewDesc("ksrunner_user_gauge", "A user gauge (Beam Metrics), attempted or committed.", userLabels, nil)
	descDist       = map[string]*prometheus.Desc{}
)

func init() {
	for _, f := range []string{"count", "sum", "min", "max"} {
		descDist[f] = prometheus.NewDesc("ksrunner_user_distribution_"+f, "A user distribution's "+f+" (Beam Metrics), attempted or committed.", userLabels, nil)
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobInfo, descCommits, descAborts, descLastCycle, descCycleBound, descFireBound, descOwner, descWatermark, descLag, descCommitted, descEnd,
		descRecordsIn, descRecordsOut, descStateBytes, descRestores, descRestored, descOwned, descCounter, descGauge} {
		ch <- d
	}
	for _, d := range descDist {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, j := range c.src.Jobs(ctx) {
		jl := []string{j.ID, j.ApplicationID}
		ch <- prometheus.MustNewConstMetric(descJobInfo, prometheus.GaugeValue, 1, append(jl, j.Name, j.State, j.Process, j.Instance)...)
		ch <- prometheus.MustNewConstMetric(descCommits, prometheus.CounterValue, float64(j.Commits), jl...)
		ch <- prometheus.MustNewConstMetric(descAborts, prometheus.CounterValue, float64(j.Aborts), jl...)
		if j.CycleBound > 0 {
			ch <- prometheus.MustNewConstMetric(descLastCycle, prometheus.GaugeValue, j.LastCycleSeconds, jl...)
			ch <- prometheus.MustNewConstMetric(descCycleBound, prometheus.GaugeValue, float64(j.CycleBound), jl...)
			ch <- prometheus.MustNewConstMetric(descFireBound, prometheus.GaugeValue, float64(j.FireBound), jl...)
		}
		for _, t := range j.Tasks {
			tl := append(append([]string(nil), jl...), strconv.Itoa(t.SubTopology), strconv.Itoa(int(t.Partition)), t.Topic, strconv.FormatBool(t.Source))
			gauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, tl...)
			}
			counter := func(d *prometheus.Desc, v int64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), tl...)
			}
			if t.Owner != "" {
				ch <- prometheus.MustNewConstMetric(descOwner, prometheus.GaugeValue, 1, append(tl, t.Owner, strconv.FormatBool(t.Local))...)
			}
			if t.HasWatermark {
				gauge(descWatermark, float64(t.Watermark)/1000)
			}
			if t.Lag >= 0 {
				gauge(descLag, float64(t.Lag))
			}
			if t.Committed >= 0 {
				gauge(descCommitted, float64(t.Committed))
			}
			if t.End >= 0 {
				gauge(descEnd, float64(t.End))
			}
			if it := t.Instance; it != nil {
				counter(descRecordsIn, it.RecordsIn)
				counter(descRecordsOut, it.RecordsOut)
				counter(descRestores, it.Restores)
				counter(descRestored, it.RestoredRecords)
				if it.StateBytes >= 0 {
					gauge(descStateBytes, float64(it.StateBytes))
				}
				owned := 0.0
				if it.Owned {
					owned = 1
				}
				gauge(descOwned, owned)
			}
		}
		for _, m := range j.Metrics {
			for _, r := range []struct {
				name string
				v    []int64
			}{{"attempted", m.Attempted}, {"committed", m.Committed}} {
				if r.v == nil {
					continue
				}
				ul := append(append([]string(nil), jl...), m.Transform, m.Namespace, m.Name, r.name)
				switch m.Kind {
				case "counter":
					ch <- prometheus.MustNewConstMetric(descCounter, prometheus.CounterValue, float64(r.v[0]), ul...)
				case "gauge":
					ch <- prometheus.MustNewConstMetric(descGauge, prometheus.GaugeValue, float64(r.v[0]), ul...)
				case "distribution":
					for i, f := range []string{"count", "sum", "min", "max"} {
						ch <- prometheus.MustNewConstMetric(descDist[f], prometheus.GaugeValue, float64(r.v[i]), ul...)
					}
				}
			}
		}
	}
}
