package state

import (
	"encoding/binary"
	"fmt"
)

// Kind is the byte after a task's prefix that says which store a key
// belongs to. Every kind is declared here and nowhere else.
type Kind byte

// The store kinds. The layout after the kind byte is written next to the
// code that owns the store.
const (
	// Task (host/internal/task/task.go).
	Watermark  Kind = 'W' // producer → latest watermark report (8 bytes)
	Impulse    Kind = 'I' // the impulse was processed
	Buffer     Kind = 'B' // a run of buffered GroupByKey values (fast path)
	Timer      Kind = 'T' // a window's end-of-window timer (fast path)
	Gate       Kind = 'G' // input parked for side inputs or time sorting
	GateHold   Kind = 'H' // index of input parked for side inputs, by smallest timestamp
	GatePages  Kind = 'P' // the values of a group parked for side inputs (gatepages.go, pieces.go)
	Pieces     Kind = 'F' // per producer, the group it sends in pieces (pieces.go)
	SortedUpTo Kind = 'S' // per stage: time-sorted input was released before this time
	// SourceCount: a bounded Kafka read's task, the run and how many
	// records it emitted (host/internal/task/kafkabound.go).
	SourceCount Kind = 'K'
	// Residual: a splittable DoFn's self-checkpoint waiting to resume
	// (host/internal/task/residuals.go).
	Residual Kind = 'r'

	// Changelog position of the task's store (runtime/changelog.go).
	Changelog Kind = 'C'

	// Event time (host/internal/task/eventtime.go).
	WindowState    Kind = 'g' // windowed GroupByKey: window state
	Value          Kind = 'v' // windowed GroupByKey: a buffered value
	EventTimer     Kind = 'e' // windowed GroupByKey: an event-time timer
	ProcTimer      Kind = 'p' // windowed GroupByKey: a processing-time timer
	Hold           Kind = 'h' // windowed GroupByKey: an output watermark hold
	ProcTime       Kind = 'q' // latest processing-time report per producer
	TestStreamDone Kind = 'z' // the TestStream ran

	// User state and timers (user.go).
	Bag        Kind = 'U' // bag user state values
	Multimap   Kind = 'V' // multimap user state values
	Seq        Kind = 'Q' // the user store's next sequence number
	UserTimers Kind = 'E' // user timers, indexed by domain and firing time
	TimerRefs  Kind = 'R' // user timer id → its index entry
	Ordered    Kind = 'O' // ordered list user state
	// StateExpiry indexes user state by the time its window expires
	// (expiry.go).
	StateExpiry Kind = 'X'
)

// kinds lists every Kind, for the registry test and for Kinds.
var kinds = []Kind{
	Watermark, Impulse, Buffer, Timer, Gate, GateHold, GatePages, Pieces, SortedUpTo, SourceCount, Residual, Changelog,
	WindowState, Value, EventTimer, ProcTimer, Hold, ProcTime, TestStreamDone,
	Bag, Multimap, Seq, UserTimers, TimerRefs, Ordered, StateExpiry,
}

// Kinds returns every declared store kind.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// TaskPrefixLen is the length of every task's key prefix.
const TaskPrefixLen = 8

// TaskPrefix is the prefix of every store key of the task of (sub-topology,
// partition).
func TaskPrefix(sub int, partition int32) []byte {
	p := binary.BigEndian.AppendUint32(make([]byte, 0, TaskPrefixLen), uint32(sub))
	return binary.BigEndian.AppendUint32(p, uint32(partition))
}

// SidePrefix starts every side input key. It is out of the range of task
// prefixes, whose first byte is the high byte of a small sub-topology id
// (CheckSubTopology keeps it so).
var SidePrefix = []byte{0xFF}

// CheckSubTopology fails for a sub-topology id whose task prefix could
// collide with SidePrefix.
func CheckSubTopology(id int) error {
	if id < 0 || id >= 0xFF<<24 {
		return fmt.Errorf("sub-topology id %d out of the store's range", id)
	}
	return nil
}

// Key is prefix | kind | parts..., in a new slice.
func Key(prefix []byte, kind Kind, parts ...[]byte) []byte {
	n := len(prefix) + 1
	for _, p := range parts {
		n += len(p)
	}
	k := make([]byte, 0, n)
	k = append(append(k, prefix...), byte(kind))
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

// PrefixEnd is the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// AppendLP appends p with a uvarint length prefix.
func AppendLP(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// ReadLP reads what AppendLP wrote.
func ReadLP(b []byte) (p, rest []byte, err error) {
	n, l := binary.Uvarint(b)
	if l <= 0 || uint64(len(b)-l) < n {
		return nil, nil, fmt.Errorf("corrupt state key")
	}
	return b[l : l+int(n)], b[l+int(n):], nil
}

// LP is the concatenation of parts, each length-prefixed.
func LP(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = AppendLP(b, p)
	}
	return b
}

// EventTimeBits maps a millisecond timestamp to an unsigned integer of the
// same order, so big-endian keys sort by time.
func EventTimeBits(ms int64) uint64 { return uint64(ms) ^ (1 << 63) }
