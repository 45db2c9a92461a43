package metrics

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Instance is one runtime instance's live figures, per task and in all:
// the runtime's loop writes them (between and inside commit cycles), the
// status server reads them (Snapshot) for the status page and /metrics.
// Every method is safe for concurrent use, and a nil *Instance ignores
// writes, so the runtime calls it unconditionally.
type Instance struct {
	mu        sync.Mutex
	id        string
	commits   int64
	aborts    int64
	lastCycle time.Duration
	cycle     int64 // cycleBound, fireBound: see InstanceSnapshot
	fire      int64
	tasks     map[TaskRef]*taskFigures
}

// TaskRef names a task: its sub-topology and input partition.
type TaskRef struct {
	SubTopology int
	Partition   int32
}

type taskFigures struct {
	TaskFigures
	out atomic.Int64 // records produced, counted on the tasks' goroutines
}

// TaskFigures are one task's figures in one instance. Counters cover the
// task's whole time in this instance (across reassignments).
type TaskFigures struct {
	TaskRef
	// Topic is the task's input topic (its Kafka name).
	Topic string
	// Owned: the instance runs the task now (the group assigned it).
	Owned bool
	// RecordsIn are the records consumed (every poll, committed or not);
	// RecordsOut the data records produced to internal and user topics
	// (a packed record counts once; watermark reports, changelog and status
	// records do not).
	RecordsIn, RecordsOut int64
	// Watermark is the task's last reported output watermark, in Unix
	// milliseconds; HasWatermark is false before its first report.
	Watermark    int64
	HasWatermark bool
	// Lag is how many offsets of its input partition the task had not
	// consumed at its last poll that returned records (the partition's
	// last stable offset less the position); -1: not known yet.
	Lag int64
	// StateBytes is the on-disk size of the task's keys in the store
	// (Pebble's estimate, refreshed every few seconds); -1: not measured.
	StateBytes int64
	// Restores counts the restores of the task's state when it was
	// assigned here; RestoredRecords the changelog records they replayed.
	Restores, RestoredRecords int64
	// AssignedAt is when the instance last took the task.
	AssignedAt time.Time
}

// InstanceSnapshot is a copy of an Instance's figures.
type InstanceSnapshot struct {
	// ID is the instance id (runtime identity), "" before the instance
	// opened its store.
	ID              string
	Commits, Aborts int64
	// LastCycle is how long the last committed cycle took, from its cut
	// to its commit; CycleBound the elements the next cycle takes at most
	// and FireBound the stored groups a GroupByKey task fires in it at
	// most, as the instance sized them by how long cycles took (0: no
	// cycle committed yet).
	LastCycle             time.Duration
	CycleBound, FireBound int64
	// Tasks, by sub-topology and partition: every task the instance ran,
	// owned now or not.
	Tasks []TaskFigures
}

// NewInstance returns empty figures.
func NewInstance() *Instance { return &Instance{tasks: map[TaskRef]*taskFigures{}} }

func (m *Instance) task(ref TaskRef) *taskFigures {
	t := m.tasks[ref]
	if t == nil {
		t = &taskFigures{TaskFigures: TaskFigures{TaskRef: ref, Lag: -1, StateBytes: -1}}
		m.tasks[ref] = t
	}
	return t
}

// SetID records the instance id.
func (m *Instance) SetID(id string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.id = id
	m.mu.Unlock()
}

// Assigned records that the instance took the task, reading topic.
func (m *Instance) Assigned(ref TaskRef, topic string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.task(ref)
	t.Topic, t.Owned, t.AssignedAt = topic, true, time.Now()
}

// Produced returns the counter of the task's produced records, for the
// producing goroutines to add to without a lock; nil when m is nil.
func (m *Instance) Produced(ref TaskRef) *atomic.Int64 {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return &m.task(ref).out
}

// Consumed adds records consumed by the task; lag < 0 leaves the lag as
// it was.
func (m *Instance) Consumed(ref TaskRef, records int, lag int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.task(ref)
	t.RecordsIn += int64(records)
	if lag >= 0 {
		t.Lag = lag
	}
}

// Restored counts a restore of the task's state that replayed records.
func (m *Instance) Restored(ref TaskRef, records int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.task(ref)
	t.Restores++
	t.RestoredRecords += int64(records)
}

// Cycle counts a commit cycle that committed, or aborted.
func (m *Instance) Cycle(committed bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if committed {
		m.commits++
	} else {
		m.aborts++
	}
}

// Bounds records how long a committed cycle took and the bounds the
// instance set for the next one.
func (m *Instance) Bounds(took time.Duration, cycle, fire int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastCycle, m.cycle, m.fire = took, int64(cycle), int64(fire)
}

// Owned sets which tasks the instance runs now and their reported output
// watermarks (present only once reported).
func (m *Instance) Owned(watermarks map[TaskRef]int64, owned map[TaskRef]bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref, t := range m.tasks {
		t.Owned = owned[ref]
	}
	for ref, wm := range watermarks {
		t := m.task(ref)
		t.Watermark, t.HasWatermark = wm, true
	}
}

// StateBytes records the size of the task's state.
func (m *Instance) StateBytes(ref TaskRef, n int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.task(ref).StateBytes = n
	m.mu.Unlock()
}

// Snapshot copies the figures.
func (m *Instance) Snapshot() InstanceSnapshot {
	if m == nil {
		return InstanceSnapshot{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := InstanceSnapshot{ID: m.id, Commits: m.commits, Aborts: m.aborts, LastCycle: m.lastCycle, CycleBound: m.cycle, FireBound: m.fire,
		Tasks: make([]TaskFigures, 0, len(m.tasks))}
	for _, t := range m.tasks {
		f := t.TaskFigures
		f.RecordsOut = t.out.Load()
		s.Tasks = append(s.Tasks, f)
	}
	sort.Slice(s.Tasks, func(i, j int) bool {
		a, b := s.Tasks[i], s.Tasks[j]
		if a.SubTopology != b.SubTopology {
			return a.SubTopology < b.SubTopology
		}
		return a.Partition < b.Partition
	})
	return s
}
