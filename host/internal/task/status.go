package task

import (
	"encoding/binary"
	"fmt"
	"time"
)

// statusRefresh is how often a task whose output watermark does not move
// says its status again.
const statusRefresh = 10 * time.Second

// Status is what a task reports on the status topic after each commit that
// moved its output watermark: the job service ends a bounded job when every
// task reported the maximum.
type Status struct{ Watermark int64 }

// EncodeStatus is the status record's value.
func EncodeStatus(s Status) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(s.Watermark))
}

// DecodeStatus reads what EncodeStatus wrote.
func DecodeStatus(b []byte) (Status, error) {
	if len(b) < 8 {
		return Status{}, fmt.Errorf("status record: %d bytes", len(b))
	}
	return Status{Watermark: int64(binary.BigEndian.Uint64(b))}, nil
}
