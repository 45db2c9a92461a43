package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Lost brokers and coordinators.
//
// franz-go retries a broker it cannot reach on its own: fetches and produces
// without end, other requests until their retry timeout or their context
// ends. What it cannot do is decide what a commit cycle caught by an outage
// means, nor when to give up. The instance does:
//
//   - reach watches every response and failure of the instance's clients
//     (a kgo hook). A failure to dial, write or read, with no response since,
//     is an outage, unless another broker answers (see down); it is logged
//     and shown as a job message once when it has lasted brokerNotice, again
//     every brokerReminder, and once more when a broker answers again.
//   - A commit cycle (or an instance's start, or a restore) that fails after
//     an outage began in it (reach.troubleSince) is not a job failure: its
//     Kafka calls are bounded (the flush and the transaction's end by
//     transaction_timeout_ms, restores by restoreTimeout), the error comes
//     back to Run, which closes the instance without leaving the group and
//     starts it again in this process (runInstances), with the same
//     identity. The new instance fences the old transactional producer
//     (aborting the cycle's transaction if the broker still had it open),
//     restores its tasks from the changelogs to their committed end and
//     resumes at the group's committed offsets: the aborted cycle is redone,
//     a cycle whose commit did reach the broker before the answer was lost
//     is not. (Resetting the tasks in place would be wrong then: an EndTxn
//     whose answer was lost may have committed.)
//   - No response from any broker for broker_unavailable_timeout_ms fails the
//     job with an error naming the brokers (reach.ctx's cause; Run returns
//     it). Every wait of the instance ends then, the transaction's end
//     included (endContext).
type reach struct {
	brokers string
	timeout time.Duration
	logger  *slog.Logger
	// warn and info tell the job's client (Config.Warning, Progress).
	warn, info func(string)
	// now is the clock; notice and reminder are brokerNotice and
	// brokerReminder (tests shorten them).
	now              func() time.Time
	notice, reminder time.Duration

	lastOK   atomic.Int64 // unix ns of the latest response read from a broker
	lastFail atomic.Int64 // unix ns of the latest failed dial, write or read
	failures atomic.Int64 // failed dials, writes and reads so far
	lastErr  atomic.Pointer[string]
	// byAddr is each broker's latest answer and failure, by address (a
	// seed broker and the node it turns out to be are one).
	byAddrMu sync.RWMutex
	byAddr   map[string]*brokerReach

	// ctx ends, with the error naming the brokers as its cause, once they
	// have been out of reach for timeout.
	ctx  context.Context
	fail context.CancelCauseFunc
}

type brokerReach struct{ ok, fail atomic.Int64 } // unix ns

// answeringWindow is how recent a broker's answer must be for it to count
// as answering (down): longer than the gaps between an instance's requests
// to a broker in good health (fetches wait at most 5 s for data, the
// group heartbeats every 3 s).
const answeringWindow = 10 * time.Second

// brokerNotice is how long an outage lasts before it is reported (a lone
// failed connection that the next attempt heals is not worth a message);
// brokerReminder how often a lasting one is reported again.
const (
	brokerNotice   = 2 * time.Second
	brokerReminder = 30 * time.Second
)

// DefaultBrokerUnavailableTimeout is Config.BrokerUnavailableTimeout when
// unset.
const DefaultBrokerUnavailableTimeout = 3 * time.Minute

func (c Config) brokerUnavailableTimeout() time.Duration {
	if c.BrokerUnavailableTimeout > 0 {
		return c.BrokerUnavailableTimeout
	}
	return DefaultBrokerUnavailableTimeout
}

func newReach(cfg Config) *reach {
	r := &reach{
		brokers: cfg.BootstrapServers,
		timeout: cfg.brokerUnavailableTimeout(),
		logger:  cfg.Logger,
		warn:    cfg.Warning,
		info:    cfg.Progress,
		now:     time.Now,
		byAddr:  map[string]*brokerReach{},

		notice:   brokerNotice,
		reminder: brokerReminder,
	}
	r.lastOK.Store(r.now().UnixNano())
	r.ctx, r.fail = context.WithCancelCause(context.Background())
	return r
}

// A nil reach (an instance built by a test without Run) watches nothing
// and never gives up.

// opts are the client options that let r watch a client.
func (r *reach) opts() []kgo.Opt {
	if r == nil {
		return nil
	}
	return []kgo.Opt{kgo.WithHooks(r)}
}

// OnBrokerConnect counts a failed dial; a connection made is not yet an
// answer (a broker that closes every connection is out of reach too).
func (r *reach) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		r.observe(brokerAddr(meta), err)
	}
}

func (r *reach) OnBrokerWrite(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		r.observe(brokerAddr(meta), err)
	}
}

func (r *reach) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	r.observe(brokerAddr(meta), err)
}

func brokerAddr(meta kgo.BrokerMetadata) string {
	return net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
}

func (r *reach) observe(addr string, err error) {
	now := r.now().UnixNano()
	switch {
	case err == nil:
		r.lastOK.Store(now)
		r.broker(addr).ok.Store(now)
	case errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed):
		// ours: a request given up or a client closing, not the broker
	default:
		msg := err.Error()
		r.lastErr.Store(&msg)
		r.lastFail.Store(now)
		r.failures.Add(1)
		r.broker(addr).fail.Store(now)
	}
}

func (r *reach) broker(addr string) *brokerReach {
	r.byAddrMu.RLock()
	b := r.byAddr[addr]
	r.byAddrMu.RUnlock()
	if b != nil {
		return b
	}
	r.byAddrMu.Lock()
	defer r.byAddrMu.Unlock()
	if b = r.byAddr[addr]; b == nil {
		b = &brokerReach{}
		r.byAddr[addr] = b
	}
	return b
}

// anotherAnswers reports whether some broker answered within
// answeringWindow of now and has not failed since: the brokers that fail
// are not all of them (one of three stopped, a rolling restart), and the
// cluster is in reach, though an idle instance may not have heard from it
// since the latest failure.
func (r *reach) anotherAnswers(now int64) bool {
	r.byAddrMu.RLock()
	defer r.byAddrMu.RUnlock()
	for _, b := range r.byAddr {
		if ok := b.ok.Load(); ok > b.fail.Load() && now-ok < int64(answeringWindow) {
			return true
		}
	}
	return false
}

// mark is the count of failures so far, for troubleSince.
func (r *reach) mark() int64 {
	if r == nil {
		return 0
	}
	return r.failures.Load()
}

// troubleSince reports whether a broker could not be reached since mark.
func (r *reach) troubleSince(mark int64) bool { return r != nil && r.failures.Load() > mark }

// down reports for how long no broker has answered while one failed (0:
// not down). A broker that answered recently and has not failed since
// (anotherAnswers) keeps the cluster up: without it, one broker of several
// out of reach made an idle instance, which hears from the others only
// every few seconds, look cut off from all of them in between.
func (r *reach) down() time.Duration {
	if r == nil {
		return 0
	}
	ok, fail := r.lastOK.Load(), r.lastFail.Load()
	if fail <= ok {
		return 0
	}
	now := r.now().UnixNano()
	if r.anotherAnswers(now) {
		return 0
	}
	return time.Duration(now - ok)
}

// failure is the error that ended r.ctx, nil while the brokers are in
// reach or the timeout has not passed.
func (r *reach) failure() error {
	if r == nil || r.ctx.Err() == nil {
		return nil
	}
	return context.Cause(r.ctx)
}

func (r *reach) lastError() string {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return "none"
}

// watch reports outages and ends r.ctx after timeout without the brokers,
// until ctx ends.
func (r *reach) watch(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var reported time.Duration // the outage's length when last reported; 0: not reported
	var okBefore int64         // the last answer before the reported outage
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		d := r.down()
		switch {
		case d >= r.timeout:
			err := fmt.Errorf("cannot reach the Kafka brokers %s: no broker answered for %v (option broker_unavailable_timeout_ms %d); last error: %s",
				r.brokers, d.Round(time.Second), r.timeout.Milliseconds(), r.lastError())
			r.logger.Error(err.Error())
			r.fail(err)
			return
		case d >= r.notice && (reported == 0 || d-reported >= r.reminder):
			msg := fmt.Sprintf("cannot reach the Kafka brokers %s for %v (last error: %s); retrying with backoff: the job resumes by itself when they are back, and fails if they stay out of reach for %v (option broker_unavailable_timeout_ms)",
				r.brokers, d.Round(100*time.Millisecond), r.lastError(), r.timeout)
			if reported != 0 {
				msg = fmt.Sprintf("still cannot reach the Kafka brokers %s, for %v now (last error: %s); the job fails after %v without them (option broker_unavailable_timeout_ms)",
					r.brokers, d.Round(100*time.Millisecond), r.lastError(), r.timeout)
			}
			if reported == 0 {
				okBefore = r.lastOK.Load()
			}
			reported = d
			r.logger.Warn(msg)
			if r.warn != nil {
				r.warn(msg)
			}
		case d == 0 && reported != 0:
			msg := fmt.Sprintf("the Kafka brokers %s answer again, after %v out of reach", r.brokers, time.Duration(r.lastOK.Load()-okBefore).Round(100*time.Millisecond))
			reported = 0
			r.logger.Info(msg)
			if r.info != nil {
				r.info(msg)
			}
		}
	}
}

// bound returns ctx, also ended (with r's cause) when the brokers are given
// up.
func (r *reach) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if r == nil {
		return context.WithCancel(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(r.ctx, func() { cancel(context.Cause(r.ctx)) })
	return ctx, func() { stop(); cancel(nil) }
}

// outageError is a failure of a commit cycle, an instance's start or a
// restore during which the brokers could not be reached: Run starts the
// instance again rather than fail the job (runInstances).
type outageError struct{ err error }

func (e *outageError) Error() string {
	return "while the Kafka brokers could not be reached: " + e.err.Error()
}
func (e *outageError) Unwrap() error { return e.err }

// rejectedTxnError is a commit cycle's failure because the transaction
// coordinator no longer takes the cycle's transaction: INVALID_TXN_STATE,
// which it answers for an end or an addition that the transaction's state
// does not allow, as when it has aborted the transaction itself (it
// outlived transaction_timeout_ms, or a request of this producer was lost
// between it and the broker). Nothing of the cycle committed. Run starts
// the instance again from the last committed cycle, as after an outage
// (Kafka Streams treats such errors as a task migration): the new
// instance's producer, under the same transactional id, fences whatever
// the broker still holds of it. A run of such restarts without a cycle
// committed between them fails the job (maxTxnRejections).
//
// INVALID_PRODUCER_EPOCH and PRODUCER_FENCED are not among them: another
// producer with this transactional id (two processes given one stable
// identity) makes them too, and restarting would fence that producer in
// turn, each process failing the other's cycles for as long as both run.
type rejectedTxnError struct{ err error }

func (e *rejectedTxnError) Error() string {
	return "the Kafka transaction coordinator rejected the cycle's transaction: " + e.err.Error()
}
func (e *rejectedTxnError) Unwrap() error { return e.err }

// rejectedTxn makes err a rejectedTxnError if it is one of the errors the
// coordinator answers for a transaction it aborted.
func rejectedTxn(err error) error {
	var rejected *rejectedTxnError
	if err == nil || errors.As(err, &rejected) {
		return err
	}
	if errors.Is(err, kerr.InvalidTxnState) {
		return &rejectedTxnError{err}
	}
	return err
}

// maxTxnRejections is how many times in a row Run starts an instance again
// after a rejectedTxnError without a cycle committing in between; the next
// one fails the job. A transaction rejected every time (a bundle that
// always outlives transaction_timeout_ms) is not a passing fault.
const maxTxnRejections = 5

// backoff is the wait before the attempt after failed ones: franz-go's
// schedule, 250 ms doubling to 5 s.
func backoff(failed int) time.Duration {
	d := 250 * time.Millisecond
	for range min(failed, 5) {
		d *= 2
	}
	return min(d, 5*time.Second)
}
