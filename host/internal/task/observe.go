package task

// ReportedWatermark is the task's last reported output watermark; ok is
// false before its first report. Only the instance's loop calls it (as it
// calls PrepareCommit), for the status page's per-task figures.
func (t *Task) ReportedWatermark() (wm int64, ok bool) {
	return t.reportedWM, t.reportedWM > minWatermark
}
