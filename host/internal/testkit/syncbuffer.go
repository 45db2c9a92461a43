package testkit

import (
	"bytes"
	"sync"
)

// SyncBuffer is a log destination that a test reads while the servers it
// started write to it from their goroutines: a bytes.Buffer behind a lock.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
