package host

import (
	"context"
	"sync"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
)

// event is a state change (state set) or a message (text set).
type event struct {
	state      jobpb.JobState_Enum
	text       string
	importance jobpb.JobMessage_MessageImportance
	seq        int
	at         time.Time
}

// eventLog keeps every event of a job so that a stream opened late still sees
// the whole history, and wakes followers on each new one.
type eventLog struct {
	mu      sync.Mutex
	events  []event
	changed chan struct{} // closed and replaced on every append
	state   jobpb.JobState_Enum
}

func newEventLog() *eventLog {
	return &eventLog{changed: make(chan struct{}), state: jobpb.JobState_STOPPED}
}

func isTerminal(s jobpb.JobState_Enum) bool {
	switch s {
	case jobpb.JobState_DONE, jobpb.JobState_FAILED, jobpb.JobState_CANCELLED, jobpb.JobState_DRAINED, jobpb.JobState_UPDATED:
		return true
	}
	return false
}

func (l *eventLog) append(e event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.state != jobpb.JobState_UNSPECIFIED {
		if isTerminal(l.state) || e.state == l.state {
			return // a terminal state is final; repeats are noise
		}
		l.state = e.state
	}
	e.seq, e.at = len(l.events), time.Now()
	l.events = append(l.events, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *eventLog) setState(s jobpb.JobState_Enum) { l.append(event{state: s}) }

func (l *eventLog) message(importance jobpb.JobMessage_MessageImportance, text string) {
	l.append(event{text: text, importance: importance})
}

// snapshot copies the events so far.
func (l *eventLog) snapshot() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.events...)
}

func (l *eventLog) current() jobpb.JobState_Enum {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// follow calls fn for every event, past and future, until the job reaches a
// terminal state (after which fn has seen it), ctx ends or fn fails.
func (l *eventLog) follow(ctx context.Context, fn func(event) error) error {
	next := 0
	for {
		l.mu.Lock()
		pending := l.events[next:]
		next = len(l.events)
		terminal := isTerminal(l.state)
		changed := l.changed
		l.mu.Unlock()
		for _, e := range pending {
			if err := fn(e); err != nil {
				return err
			}
		}
		if terminal {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
