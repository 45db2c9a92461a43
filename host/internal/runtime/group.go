package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The instance as a consumer-group member: which protocol it speaks, how
// long its session lasts, and how it leaves.
//
// Membership outlives the process only for a static member (a stable
// identity, identity.go): the group keeps its assignment while it is away,
// so a restart takes its tasks back without a rebalance, and the other
// instances wait up to the session timeout for them. That is right for a
// process that dies or stops to be restarted; it is wrong for a job that
// ends on purpose, whose tasks the other instances should take at once. So
// the intent travels with the cancellation: a cause of Run's context that
// wraps ErrEnded makes the instance leave the group as it closes (for a
// static member franz-go never sends LeaveGroup itself); any other cause
// keeps the membership.

// The values of Config.GroupProtocol.
const (
	// GroupProtocolClassic is the JoinGroup/SyncGroup protocol with the
	// cooperative-sticky balancer (KIP-429), as Kafka Streams: a rebalance
	// revokes only the partitions that move.
	GroupProtocolClassic = "classic"
	// GroupProtocolConsumer is KIP-848's consumer protocol (Kafka 4.0+):
	// the broker assigns partitions (its "uniform" assignor, sticky and
	// incremental) and owns the session timeout.
	GroupProtocolConsumer = "consumer"
)

// DefaultSessionTimeout is Config.SessionTimeout when unset: Kafka
// Streams' session.timeout.ms, and the broker's own default for KIP-848
// groups (group.consumer.session.timeout.ms).
const DefaultSessionTimeout = 45 * time.Second

// ErrEnded, as (or wrapped in) the cause of Run's context, says that the job
// ends on purpose (a Cancel), not that the process stops to be restarted:
// the instance leaves the consumer group as it closes, so the application's
// other instances take its tasks at once rather than after its session
// timeout. A Run that ends because the job is done leaves too.
var ErrEnded = errors.New("the job ends")

func (c Config) sessionTimeout() time.Duration {
	if c.SessionTimeout > 0 {
		return c.SessionTimeout
	}
	return DefaultSessionTimeout
}

func (c Config) consumerProtocol() bool { return c.GroupProtocol == GroupProtocolConsumer }

// groupOpts are the client's consumer-group options. The balancers are
// cooperative: the revocation handling of instance.go (only the revoked
// tasks are dropped) relies on it. Under the classic protocol the first is
// stateBalancer (tasks land where their stores are, balancer.go), stored
// giving this member's; the KIP-848 uniform assignor is chosen through
// ServerSideBalancer.
func (c Config) groupOpts(stored func() map[string][]int32) []kgo.Opt {
	if c.consumerProtocol() {
		// The broker owns the session and the heartbeat interval
		// (setGroupSessionTimeout).
		return []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ServerSideBalancer()}
	}
	session := c.sessionTimeout()
	return append([]kgo.Opt{kgo.Balancers(newStateBalancer(stored), kgo.CooperativeStickyBalancer())},
		kgo.SessionTimeout(session),
		// Kafka's rule of thumb, at most a third of the session, so that
		// a short session survives a lost heartbeat; franz-go's 3 s
		// otherwise.
		kgo.HeartbeatInterval(min(3*time.Second, session/3)),
	)
}

// groupConsumerSessionTimeout is the group-level config (KIP-848) that
// overrides the broker's group.consumer.session.timeout.ms for one group.
const groupConsumerSessionTimeout = "consumer.session.timeout.ms"

// setGroupSessionTimeout sets, under the consumer protocol, a
// session_timeout_ms other than the default as the group's
// consumer.session.timeout.ms (KIP-848 group configs, Kafka 4.0+): there the
// broker owns the session, not the member. The default leaves the group's
// config alone (the broker's default is the same 45 s). A value outside the
// broker's group.consumer.min/max.session.timeout.ms fails, naming the
// option.
func setGroupSessionTimeout(ctx context.Context, admin *kgo.Client, cfg Config) error {
	if !cfg.consumerProtocol() || cfg.SessionTimeout <= 0 || cfg.SessionTimeout == DefaultSessionTimeout {
		return nil
	}
	ms := strconv.FormatInt(cfg.SessionTimeout.Milliseconds(), 10)
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = cfg.ApplicationID
	rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	rc.Name = groupConsumerSessionTimeout
	rc.Op = kmsg.IncrementalAlterConfigOpSet
	rc.Value = &ms
	res.Configs = append(res.Configs, rc)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, admin)
	if err == nil && len(resp.Resources) == 1 {
		r := resp.Resources[0]
		if err = kerr.ErrorForCode(r.ErrorCode); err != nil && r.ErrorMessage != nil {
			err = fmt.Errorf("%w: %s", err, *r.ErrorMessage)
		}
	}
	if err != nil {
		return fmt.Errorf("option session_timeout_ms: %s: under group_protocol=consumer the broker owns the session, and it refuses it as group %s's %s (it must lie within the broker's group.consumer.min.session.timeout.ms and group.consumer.max.session.timeout.ms, 45000 and 60000 by default): %w",
			ms, cfg.ApplicationID, groupConsumerSessionTimeout, err)
	}
	// The controller accepted the config; brokers learn it from the
	// metadata log a moment later. A member that joined before its
	// coordinator knew would get the broker's default session, so wait
	// (briefly: the join itself is not wrong, only slower to fail over)
	// until a describe shows it.
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if v, err := describeGroupConfig(wait, admin, cfg.ApplicationID, groupConsumerSessionTimeout); err == nil && v == ms {
			return nil
		}
		select {
		case <-wait.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// describeGroupConfig is the value of a config set on group (not a
// broker default), "" when none is.
func describeGroupConfig(ctx context.Context, admin *kgo.Client, group, name string) (string, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	r.ResourceName = group
	r.ConfigNames = []string{name}
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return "", err
	}
	for _, res := range resp.Resources {
		if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
			return "", err
		}
		for _, c := range res.Configs {
			if c.Name == name && c.Value != nil && c.Source == kmsg.ConfigSourceGroupConfig {
				return *c.Value, nil
			}
		}
	}
	return "", nil
}

// groupError names the option at fault when the group refuses the member:
// a session timeout outside the broker's limits fails every join.
func (c Config) groupError(err error) error {
	if errors.Is(err, kerr.InvalidSessionTimeout) {
		return fmt.Errorf("option session_timeout_ms: %d: the broker refuses it (outside its group.min.session.timeout.ms and group.max.session.timeout.ms, 6000 and 1800000 by default): %w", c.sessionTimeout().Milliseconds(), err)
	}
	return err
}

// membershipLost reports a group error that means the instance is no
// longer the member it was (its session expired, the group moved on to a
// new generation or epoch) or cannot commit now (a rebalance is under way):
// a cycle's work must be dropped and redone by whoever owns the partitions
// next, and the instance must not fail. The group management loop reports a
// loss (OnPartitionsLost) at the next AllowRebalance and joins again.
func membershipLost(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) ||
		errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.RebalanceInProgress) ||
		errors.Is(err, kerr.StaleMemberEpoch) ||
		errors.Is(err, kerr.FencedMemberEpoch)
}

// leaveGroup removes a static member from the group for good, after its
// client closed: franz-go's close leaves nothing for a static member
// (classic) or leaves only temporarily, keeping the assignment reserved
// until the session expires (consumer, member epoch -2). memberID is the
// member's id under the consumer protocol, read before the client closed.
// A dynamic member has left already, as its client closed.
func (i *instance) leaveGroup(memberID string) {
	gid := i.ident.groupInstanceID(i.cfg.ApplicationID)
	if gid == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	group := i.cfg.ApplicationID
	var err error
	if i.cfg.consumerProtocol() && memberID != "" {
		// Member epoch -1 from a static member: a permanent leave
		// (KIP-848), accepted after the client's temporary one.
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group = group
		req.MemberID = memberID
		req.MemberEpoch = -1
		req.InstanceID = gid
		var resp *kmsg.ConsumerGroupHeartbeatResponse
		if resp, err = req.RequestWith(ctx, i.admin); err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
	} else {
		// KIP-345's removal of a static member by its instance id.
		var resps kadm.LeaveGroupResponses
		resps, err = kadm.NewClient(i.admin).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(*gid).Reason("ksrunner: the job ended"))
		if err == nil {
			err = resps.Error()
		}
	}
	if err != nil {
		i.cfg.Logger.Warn("leaving the consumer group: the other instances take this one's tasks after its session expires", "group", group, "group.instance.id", *gid, "error", err)
		return
	}
	i.progress(fmt.Sprintf("left consumer group %s (group.instance.id %s): the job ended, so the other instances take its tasks now", group, *gid))
}

// groupSessionError is what the run loop makes of an error the group
// management loop injected into a poll (it also reported the loss of the
// assignment, OnPartitionsLost, so the tasks are gone): nil when that loop
// recovers by joining again, which it does after a lost membership (the
// session expired, the member was fenced or replaced by a newer epoch), a
// coordinator moving or a connection failing; otherwise the error, naming
// the option at fault, that fails the instance rather than let it retry
// forever (a session timeout the broker refuses, a group it may not join,
// another process with this instance's group.instance.id).
func (i *instance) groupSessionError(gs *kgo.ErrGroupSession) error {
	err := gs.Err
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable && !membershipLost(err) && !errors.Is(err, kerr.UnreleasedInstanceID) {
		if errors.Is(err, kerr.FencedInstanceID) {
			return fmt.Errorf("consumer group %s: another process joined with this instance's group.instance.id %s-%s (a copy of its state_dir?): %w", i.cfg.ApplicationID, i.cfg.ApplicationID, i.ident.id, err)
		}
		return fmt.Errorf("consumer group %s: %w", i.cfg.ApplicationID, i.cfg.groupError(err))
	}
	if i.cfg.reach.down() > 0 {
		// Once per failed attempt to reach the coordinator: the outage is
		// reported by reach.watch, not per attempt.
		i.cfg.Logger.Debug("consumer group: the group management loop failed while the brokers are out of reach; it joins again", "group", i.cfg.ApplicationID, "error", err)
		return nil
	}
	i.progress(fmt.Sprintf("consumer group %s: this instance lost its partitions (%v); their tasks are dropped, with their uncommitted work, and the instance joins again", i.cfg.ApplicationID, err))
	return nil
}

// rebalanceState is what the run loop learns, under exactly_once, from the
// rebalance callbacks, which run between its cycles (BlockRebalanceOnPoll).
type rebalanceState struct {
	// pending: partitions were revoked or lost since the last poll (the
	// session will abort its next transaction), or a classic member's
	// session ended (afterRebalance).
	pending atomic.Bool
	// revokedIn is the group generation whose session a classic member
	// ended (revoking partitions or, cooperative, nothing), -1 if none
	// since the last rejoin: the member is rejoining, and afterRebalance
	// waits for the new generation.
	revokedIn atomic.Int32
	// assigned has a value after each assignment or loss, to wake
	// afterRebalance's wait.
	assigned chan struct{}

	// blocked: under the consumer protocol, a rebalance callback waits
	// for the running cycle (OnPartitionsCallbackBlocked), so the cycle's
	// transaction cannot commit (endTransaction).
	blocked atomic.Bool
	endMu   sync.Mutex
	// endCancel cancels the running End's context under the consumer
	// protocol; interrupted says onBlocked did.
	endCancel   context.CancelFunc
	interrupted bool
}

func (r *rebalanceState) init() {
	r.assigned = make(chan struct{}, 1)
	r.revokedIn.Store(-1)
}

// revokedNow records a revocation of n partitions. A classic member's
// revocation, even of nothing, ends its group session: it rejoins next.
func (r *rebalanceState) revokedNow(cl *kgo.Client, n int, classic bool) {
	if classic {
		_, gen := cl.GroupMetadata()
		r.revokedIn.Store(gen)
		r.pending.Store(true)
	} else if n > 0 {
		r.pending.Store(true)
	}
}

func (r *rebalanceState) lostNow() {
	r.pending.Store(true)
	r.signal()
}

func (r *rebalanceState) assignedNow() { r.signal() }

func (r *rebalanceState) signal() {
	select {
	case r.assigned <- struct{}{}:
	default:
	}
}

// afterRebalance runs, under exactly_once, after a poll during which
// partitions were revoked or lost, or a classic member's group session
// ended (rebalance.pending), so that the rebalance costs the tasks that
// stay no work:
//
//   - The session aborts its next transaction whatever it holds, as it
//     cannot tell that the revocation came between transactions. Aborted
//     after processing, that transaction would cost the work of every task,
//     reset from the store. So it is aborted now, empty, before any task saw
//     the polled records: End rewinds consumption to the committed offsets
//     (the records are fetched again) and clears the session's mark.
//   - A classic member whose session ended rejoins the group at once (a
//     member joined or left, or, in cooperative rebalancing's second
//     round, it revoked partitions), and a cycle whose offsets were
//     committed while that join was under way would abort: franz-go reads
//     the generation for the transaction's offset commit before it waits
//     for a join to end (kgo's commitTransactionOffsets), so the commit
//     carries the old one (ILLEGAL_GENERATION). So the loop waits, polling
//     nothing, for the new generation: at most until every member has
//     noticed the rebalance (within its heartbeat interval), bounded by the
//     session timeout.
func (i *instance) afterRebalance(ctx context.Context) error {
	if err := i.sess.Begin(); err != nil {
		return fmt.Errorf("beginning a transaction: %w", err)
	}
	i.inTxn = true
	// Not ctx: a Cancel must not leave the transaction open (see
	// endContext).
	ectx, cancel := i.endContext(ctx)
	_, err := i.sess.End(ectx, kgo.TryAbort)
	cancel()
	// The abort moved every partition back to its committed offset.
	i.intake.drop()
	if err != nil {
		return fmt.Errorf("ending the transaction after a rebalance: %w", err)
	}
	i.inTxn = false
	i.cl.AllowRebalance()
	from := i.rebalance.revokedIn.Swap(-1)
	if from < 0 {
		level := slog.LevelInfo
		if i.cfg.reach.down() > 0 {
			level = slog.LevelDebug // once per attempt to rejoin: reach.watch reports the outage
		}
		i.cfg.Logger.Log(ctx, level, "rebalance: partitions revoked or lost; the polled records are fetched again")
		return nil
	}
	start := time.Now()
	timeout := time.NewTimer(i.cfg.sessionTimeout())
	defer timeout.Stop()
	for {
		if _, gen := i.cl.GroupMetadata(); gen != from {
			i.cfg.Logger.Info("rebalance: the tasks that stay go on in the new generation", "generation", gen, "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-i.rebalance.assigned:
		case <-ctx.Done():
			return nil
		case <-timeout.C:
			i.cfg.Logger.Warn("rebalance: the group's rejoin did not end within session_timeout_ms; going on", "generation", from)
			return nil
		}
	}
}

// endContext is the context of ending a transaction: not the loop's, whose
// cancellation (a Cancel, the job ending) would interrupt End between
// flushing and ending, leaving the transaction open on the broker, so that
// every read_committed reader of its partitions (the next owner's changelog
// restore among them) waits out transaction_timeout_ms; bounded by that
// timeout instead, and ended when the brokers are given up (brokers.go).
func (i *instance) endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, rcancel := i.cfg.reach.bound(context.WithoutCancel(ctx))
	tctx, tcancel := context.WithTimeout(rctx, i.cfg.transactionTimeout())
	return tctx, func() { tcancel(); rcancel() }
}

// onBlocked is told, on a goroutine of its own, that a rebalance callback
// waits for the running cycle (BlockRebalanceOnPoll). Under the consumer
// protocol that means the group changed this member's assignment, and
// franz-go's heartbeat loop stops heartbeating until the callback has run.
// The cycle's transaction cannot commit then: End forces a heartbeat
// before it commits, and with no loop to receive it End would wait until
// its context ends, then fail to end the transaction. So the cycle aborts:
// endTransaction does not try to commit, and a running End is interrupted
// and its transaction aborted anew. (Under classic the heartbeat loop keeps
// running through a rebalance, and a cycle commits; see afterRebalance.)
//
// Under either protocol, a callback blocked while the brokers are out of
// reach is the group management loop's error path (franz-go's
// manageFailWait calls OnPartitionsLost): its heartbeat loop has ended,
// and a running End would wait for it until transaction_timeout_ms. It is
// interrupted; the cycle fails as an outage and a new instance redoes it
// (brokers.go).
func (i *instance) onBlocked(context.Context, *kgo.Client) {
	if i.sess == nil || (!i.cfg.consumerProtocol() && i.cfg.reach.down() == 0) {
		return
	}
	r := &i.rebalance
	r.blocked.Store(true)
	r.endMu.Lock()
	defer r.endMu.Unlock()
	if r.endCancel != nil {
		r.endCancel()
		r.interrupted = true
	}
}

// endTransaction ends the cycle's transaction (see onBlocked and
// endContext).
func (i *instance) endTransaction(ctx context.Context, try kgo.TransactionEndTry) (committed bool, err error) {
	r := &i.rebalance
	ectx, cancel := i.endContext(ctx)
	defer cancel()
	r.endMu.Lock()
	r.endCancel, r.interrupted = cancel, false
	r.endMu.Unlock()
	if r.blocked.Load() {
		try = kgo.TryAbort
	}
	var offsets map[string]map[int32]kgo.EpochOffset
	if try == kgo.TryCommit && !r.pending.Load() && len(i.cl.UncommittedOffsets()) == 0 {
		committed, err = endWithoutOffsets(ectx, i.cl)
	} else {
		// Not past the records the intake carries.
		carried := i.intake.commitOffsets()
		if try == kgo.TryCommit {
			offsets = adjust(i.cl.UncommittedOffsets(), carried) // what End commits
		}
		i.unconfirmedCommit.Store(false)
		committed, err = i.sess.End(kgo.PreTxnCommitFnContext(ectx, rewriteTxnCommit(carried)), try)
		if err == nil && !committed && i.unconfirmedCommit.Load() {
			err = &unknownCommitError{errors.New("the broker answered the commit UNKNOWN_SERVER_ERROR, and the client aborted the transaction anew")}
		}
	}
	r.endMu.Lock()
	interrupted := r.interrupted
	r.endCancel = nil
	r.endMu.Unlock()
	i.cfg.outcomes.record(offsets, outcomeOf(committed, err), i.txnMark.Load())
	if !interrupted || err == nil {
		return committed, err
	}
	var unknown *unknownCommitError
	if errors.As(err, &unknown) {
		// Its commit was sent: not an abort to redo in place.
		return false, err
	}
	if i.cfg.reach.troubleSince(i.cycleMark) {
		// The outcome of an interrupted commit is not known: a new
		// instance redoes what did not commit (brokers.go).
		return false, err
	}
	// Interrupted, End could not confirm its abort; franz-go keeps the
	// transaction's state for this retry, which fences the broker's
	// transaction by re-initializing the producer id (KIP-360).
	i.cfg.Logger.Info("rebalance: the group reassigned this member's partitions during the cycle; its transaction aborts", "error", err)
	actx, acancel := i.endContext(ctx)
	defer acancel()
	return i.sess.End(actx, kgo.TryAbort)
}

// endWithoutOffsets commits a transaction that consumed nothing (a cycle
// that only fired timers, reported watermarks or statuses, or ran a bundle
// that outlived its input), bypassing the session's End.
//
// Why: franz-go's End learns that the broker supports KIP-447 only from a
// TxnOffsetCommit response, and a transaction without offsets sends none;
// it then assumes an old broker and holds the session's lock for 500 ms
// after the commit (kgo txn.go, "sleeping 500ms before allowing a
// rebalance"), so the next cycle's End waits that long. Every
// exactly_once job paid it at least once, at its end (a bounded job's
// last statuses go out in such a transaction), and a pipeline whose
// cycles alternate between consuming and not paid it per cycle.
//
// Why it is safe: without offsets End itself skips the group checks (its
// forced heartbeat: "with nothing committed, membership is irrelevant to
// the transaction"); what is left is its revoked/lost mark, which the
// rebalance callbacks set only between cycles (BlockRebalanceOnPoll) and
// which the run loop sees as rebalance.pending (the caller falls back to
// End when it is set). Nothing was consumed, so an abort has nothing to
// rewind.
func endWithoutOffsets(ctx context.Context, cl *kgo.Client) (committed bool, err error) {
	if err := cl.Flush(ctx); err != nil {
		return false, err
	}
	err = cl.EndTransaction(ctx, kgo.TryCommit)
	if err == nil {
		return true, nil
	}
	// The errors EndTransaction documents as "retry as an abort": the
	// commit was not attempted, or its outcome is unknown. The abort
	// fences whatever the broker still holds of the transaction by
	// bumping the producer's epoch.
	var ke *kerr.Error
	notAttempted := errors.Is(err, kerr.OperationNotAttempted) || errors.Is(err, kerr.TransactionAbortable)
	if notAttempted || errors.Is(err, kerr.UnknownServerError) || !errors.As(err, &ke) {
		if aerr := cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
			return false, fmt.Errorf("%w (and aborting: %v)", err, aerr)
		}
		if notAttempted {
			return false, nil
		}
		// The commit may have reached the broker and only its answer
		// been lost: the abort cannot undo a commit that happened, so
		// the cycle must not be redone in place as an aborted one (its
		// output would be doubled, and the store would lack what its
		// changelog committed). The caller fails the cycle; Run starts
		// the instance again, which restores the tasks from their
		// changelogs and resumes at the committed offsets (brokers.go).
		return false, &unknownCommitError{err}
	}
	return false, err
}

// unknownCommitError is a commit cycle's failure because whether its
// transaction committed is not known: the commit got no answer, or
// UNKNOWN_SERVER_ERROR, and the abort that followed cannot undo a commit
// that happened. Redone in place as an aborted cycle, its output would be
// doubled if it had, and the store would lack what its changelog
// committed. Run starts the instance again (counted as a rejection,
// runInstances), which restores the tasks from their changelogs and
// resumes at the committed offsets, whichever happened.
type unknownCommitError struct{ err error }

func (e *unknownCommitError) Error() string {
	return "the transaction's commit may or may not have happened: " + e.err.Error()
}
func (e *unknownCommitError) Unwrap() error { return e.err }
