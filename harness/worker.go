package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// dataQueueLen bounds the data messages queued for a worker's data stream.
// With messages near MaxDataChunk bytes this keeps buffered input around
// 32MiB per worker; Process blocks beyond that, which is the flow control.
const dataQueueLen = 8

// worker is the runner's view of one SDK worker: its streams, the
// instructions and bundles in flight on it, and how to stop it.
type worker struct {
	h      *Harness
	id     string
	envID  string
	env    *pipepb.Environment
	logger *slog.Logger

	// stopEnv stops whatever runs the worker (pool StopWorker, process
	// kill). Set before the worker becomes visible; never changed.
	stopEnv  func(context.Context) error
	stopOnce sync.Once
	stopErr  error

	connected chan struct{} // closed when the control stream attaches
	// controlConnEnded closes when the client connection of the control
	// stream ends (connWatch); set with controlAttached.
	controlConnEnded <-chan struct{}
	dataReady        chan struct{} // closed when the first data stream attaches
	lost             chan struct{} // closed by fail; lostErr says why

	instructions chan *fnpb.InstructionRequest // to the control stream
	dataOut      chan *fnpb.Elements           // to the data stream
	abortSignal  chan struct{}                 // wakes the data sender for aborts (cap 1)

	mu              sync.Mutex
	lostErr         error
	controlAttached bool
	dataAttached    bool
	pending         map[string]chan *fnpb.InstructionResponse // non-bundle instructions awaiting a response
	bundles         map[string]*Bundle                        // in-flight bundles by instruction id
	descriptors     map[string]*fnpb.ProcessBundleDescriptor
	// aborted and abortedOld hold the bundles whose queued input must not
	// be sent any more. Input queued for a bundle is at most the queue's
	// length, plus one message of a send racing the abort; so an id need
	// not outlive abortedKeep dequeued messages, and the sender moves
	// aborted to abortedOld (dropping what abortedOld held) after each
	// abortedKeep messages. Without that a job that never ends would keep
	// the id of every bundle it ever aborted.
	aborted, abortedOld map[string]bool
	dequeued            int            // data messages the sender took since the last move
	aborts              *fnpb.Elements // is_last markers the data sender owes aborted bundles
	// unanswered holds the ProcessBundle requests sent on the control
	// stream that the SDK has not answered: bundles still running on the
	// SDK's side, whether or not the runner still waits for them.
	unanswered map[string]struct{}
}

func (h *Harness) newWorker(envID string, env *pipepb.Environment) *worker {
	id := h.newID("worker-" + sanitizeID(envID) + "-" + h.tag)
	return &worker{
		h:            h,
		id:           id,
		envID:        envID,
		env:          env,
		logger:       h.logger.With(slog.String("env", envID), slog.String("worker", id)),
		connected:    make(chan struct{}),
		dataReady:    make(chan struct{}),
		lost:         make(chan struct{}),
		instructions: make(chan *fnpb.InstructionRequest, 16),
		dataOut:      make(chan *fnpb.Elements, dataQueueLen),
		abortSignal:  make(chan struct{}, 1),
		pending:      make(map[string]chan *fnpb.InstructionResponse),
		bundles:      make(map[string]*Bundle),
		descriptors:  make(map[string]*fnpb.ProcessBundleDescriptor),
		aborted:      make(map[string]bool),
		unanswered:   make(map[string]struct{}),
	}
}

// sanitizeID keeps worker ids safe for gRPC metadata, command lines and
// file names, whatever the pipeline called its environment.
func sanitizeID(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// err returns why the worker was lost, or nil.
func (w *worker) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lostErr
}

func (w *worker) isLost() bool {
	select {
	case <-w.lost:
		return true
	default:
		return false
	}
}

// fail marks the worker lost (the first cause wins), fails every bundle in
// flight on it and stops its environment in the background, since a worker
// whose streams broke must not linger.
func (w *worker) fail(cause error) {
	w.mu.Lock()
	if w.lostErr != nil {
		w.mu.Unlock()
		return
	}
	w.lostErr = cause
	close(w.lost)
	bundles := make([]*Bundle, 0, len(w.bundles))
	for _, b := range w.bundles {
		bundles = append(bundles, b)
	}
	w.mu.Unlock()
	w.logger.Debug("worker lost", slog.Any("cause", cause), slog.Int("bundles_in_flight", len(bundles)))
	for _, b := range bundles {
		b.complete(fmt.Errorf("worker %s lost: %w", w.id, cause))
	}
	w.h.goOwned(func() {
		if err := w.stop(); err != nil {
			// Often expected: a worker is lost because its pool went away.
			w.logger.Debug("stopping lost worker", slog.Any("error", err))
		}
	})
}

// stop stops the worker's environment once; later calls wait for the first
// and return its result. It is called after fail, which ends the control
// stream. If a bundle is still running on the SDK's side, it first gives
// the SDK up to StopGrace to close its control connection (see connWatch
// for why); an idle worker is stopped at once, since a Python worker pool
// keeps its idle workers' connections open.
func (w *worker) stop() error {
	w.stopOnce.Do(func() {
		if w.stopEnv == nil {
			return
		}
		w.mu.Lock()
		connEnded := w.controlConnEnded
		running := len(w.unanswered)
		w.mu.Unlock()
		if connEnded != nil && running > 0 {
			grace := time.NewTimer(w.h.cfg.StopGrace)
			select {
			case <-connEnded:
			case <-grace.C:
				w.logger.Debug("the SDK worker kept its control connection open after its control stream ended; stopping it anyway",
					slog.Duration("stop_grace", w.h.cfg.StopGrace))
			}
			grace.Stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.h.cfg.StopTimeout)
		defer cancel()
		if err := w.stopEnv(ctx); err != nil {
			w.stopErr = fmt.Errorf("stopping worker %s of environment %q: %w", w.id, w.envID, err)
		}
	})
	return w.stopErr
}

// serveControl runs the worker's control stream: it sends instructions from
// w.instructions and routes responses to whoever waits for them.
func (w *worker) serveControl(stream fnpb.BeamFnControl_ControlServer) error {
	w.mu.Lock()
	switch {
	case w.lostErr != nil:
		w.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "worker %s is no longer usable: %v", w.id, w.lostErr)
	case w.controlAttached:
		w.mu.Unlock()
		return status.Errorf(codes.AlreadyExists, "worker %s already has a control stream", w.id)
	}
	w.controlAttached = true
	w.controlConnEnded = connEnded(stream.Context())
	w.mu.Unlock()
	close(w.connected)
	w.logger.Debug("control stream connected")

	recvErr := make(chan error, 1)
	w.h.goOwned(func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			w.dispatchResponse(resp)
		}
	})
	for {
		select {
		case req := <-w.instructions:
			if req.GetProcessBundle() != nil {
				// Before the send: the answer may come before Send returns.
				w.mu.Lock()
				w.unanswered[req.GetInstructionId()] = struct{}{}
				w.mu.Unlock()
			}
			if err := stream.Send(req); err != nil {
				w.fail(fmt.Errorf("sending instruction %s on the control stream: %w", req.GetInstructionId(), err))
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				w.fail(errors.New("the SDK worker closed its control stream"))
			} else {
				w.fail(fmt.Errorf("control stream broke: %w", err))
			}
			return nil
		case <-w.lost:
			return nil
		case <-w.h.ctx.Done():
			return nil
		}
	}
}

func (w *worker) dispatchResponse(resp *fnpb.InstructionResponse) {
	id := resp.GetInstructionId()
	w.mu.Lock()
	delete(w.unanswered, id)
	if ch, ok := w.pending[id]; ok {
		delete(w.pending, id)
		w.mu.Unlock()
		ch <- resp // buffered: the waiter may have gone
		return
	}
	b := w.bundles[id]
	w.mu.Unlock()
	if b == nil {
		// The bundle was aborted or failed before the SDK answered.
		w.logger.Debug("response for an instruction no longer awaited", slog.String("instruction", id))
		return
	}
	b.onResponse(resp)
}

// sendInstruction queues req for the control stream.
func (w *worker) sendInstruction(ctx context.Context, req *fnpb.InstructionRequest) error {
	select {
	case w.instructions <- req:
		return nil
	case <-w.lost:
		return fmt.Errorf("worker %s lost: %w", w.id, w.err())
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// instruct sends a non-bundle instruction and waits for its response. A
// response carrying an error is returned as an error.
func (w *worker) instruct(ctx context.Context, req *fnpb.InstructionRequest) (*fnpb.InstructionResponse, error) {
	req.InstructionId = w.h.newID("inst")
	ch := make(chan *fnpb.InstructionResponse, 1)
	w.mu.Lock()
	w.pending[req.InstructionId] = ch
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.pending, req.InstructionId)
		w.mu.Unlock()
	}()
	if err := w.sendInstruction(ctx, req); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		if resp.GetError() != "" {
			return resp, errors.New(resp.GetError())
		}
		return resp, nil
	case <-w.lost:
		return nil, fmt.Errorf("worker %s lost: %w", w.id, w.err())
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// serveData runs one data stream of the worker. The first stream a worker
// opens carries all input to it: one sender keeps each bundle's input in
// order. Every stream delivers output.
func (w *worker) serveData(stream fnpb.BeamFnData_DataServer) error {
	w.mu.Lock()
	if w.lostErr != nil {
		w.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "worker %s is no longer usable: %v", w.id, w.lostErr)
	}
	primary := !w.dataAttached
	w.dataAttached = true
	w.mu.Unlock()

	recvErr := make(chan error, 1)
	w.h.goOwned(func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			w.routeOutput(msg)
		}
	})

	var out <-chan *fnpb.Elements
	var aborts <-chan struct{}
	if primary {
		out, aborts = w.dataOut, w.abortSignal
		close(w.dataReady)
		w.logger.Debug("data stream connected")
	}
	for {
		select {
		case msg := <-out:
			if w.isAborted(msg) {
				continue
			}
			if err := stream.Send(msg); err != nil {
				w.fail(fmt.Errorf("sending on the data stream: %w", err))
				return err
			}
		case <-aborts:
			w.mu.Lock()
			msg := w.aborts
			w.aborts = nil
			w.mu.Unlock()
			if msg == nil {
				continue // sent with an earlier wake-up
			}
			if err := stream.Send(msg); err != nil {
				w.fail(fmt.Errorf("sending on the data stream: %w", err))
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				w.fail(errors.New("the SDK worker closed its data stream"))
			} else {
				w.fail(fmt.Errorf("data stream broke: %w", err))
			}
			return nil
		case <-w.lost:
			return nil
		case <-w.h.ctx.Done():
			return nil
		}
	}
}

// abortedKeep is how many dequeued data messages an aborted bundle's id is
// kept for at least (see worker.aborted): far more than can be queued for
// it.
const abortedKeep = 128 * dataQueueLen

// isAborted reports whether msg is input for a bundle that was aborted:
// the SDK has been (or will be) told the input ended, so it is dropped.
// Every queued message belongs to one bundle. Only the data sender calls
// it, once per message it takes.
func (w *worker) isAborted(msg *fnpb.Elements) bool {
	var id string
	switch {
	case len(msg.GetData()) > 0:
		id = msg.GetData()[0].GetInstructionId()
	case len(msg.GetTimers()) > 0:
		id = msg.GetTimers()[0].GetInstructionId()
	default:
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dequeued++; w.dequeued >= abortedKeep {
		w.dequeued = 0
		if len(w.aborted)+len(w.abortedOld) > 0 {
			w.abortedOld, w.aborted = w.aborted, make(map[string]bool)
		}
	}
	return w.aborted[id] || w.abortedOld[id]
}

// abortInput makes the data sender send end, the end of the input of an
// aborted bundle, without blocking the caller, so the SDK's side of the
// bundle terminates instead of waiting for input forever.
func (w *worker) abortInput(end *fnpb.Elements) {
	w.mu.Lock()
	for _, d := range end.GetData() {
		w.aborted[d.GetInstructionId()] = true
	}
	if w.aborts == nil {
		w.aborts = &fnpb.Elements{}
	}
	w.aborts.Data = append(w.aborts.Data, end.GetData()...)
	w.aborts.Timers = append(w.aborts.Timers, end.GetTimers()...)
	w.mu.Unlock()
	select {
	case w.abortSignal <- struct{}{}:
	default: // a wake-up is already pending; it will send this one too
	}
}

func (w *worker) routeOutput(msg *fnpb.Elements) {
	for _, d := range msg.GetData() {
		if b := w.bundle(d.GetInstructionId()); b != nil {
			b.onData(d.GetTransformId(), d.GetData(), d.GetIsLast())
		}
	}
	for _, t := range msg.GetTimers() {
		if b := w.bundle(t.GetInstructionId()); b != nil {
			b.onTimers(t.GetTransformId(), t.GetTimerFamilyId(), t.GetTimers(), t.GetIsLast())
		}
	}
}

func (w *worker) bundle(instructionID string) *Bundle {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bundles[instructionID]
}

func (w *worker) removeBundle(instructionID string) {
	w.mu.Lock()
	delete(w.bundles, instructionID)
	w.mu.Unlock()
}

// serveState answers the worker's state requests in the order they arrive,
// which keeps one bundle's appends and reads consistent.
func (w *worker) serveState(stream fnpb.BeamFnState_StateServer) error {
	requests := make(chan *fnpb.StateRequest)
	recvErr := make(chan error, 1)
	w.h.goOwned(func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case requests <- req:
			case <-stream.Context().Done():
				return
			}
		}
	})
	for {
		select {
		case req := <-requests:
			if err := stream.Send(w.handleState(req)); err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-w.lost:
			return nil
		case <-w.h.ctx.Done():
			return nil
		}
	}
}

func (w *worker) handleState(req *fnpb.StateRequest) *fnpb.StateResponse {
	resp := &fnpb.StateResponse{Id: req.GetId()}
	b := w.bundle(req.GetInstructionId())
	if b == nil {
		w.mu.Lock()
		_, running := w.unanswered[req.GetInstructionId()]
		w.mu.Unlock()
		if running {
			// The runner let go of the bundle (its commit cycle aborted,
			// its task closed) while the SDK still runs it: nothing it
			// does will be used, and the SDK fails it on this answer.
			resp.Error = fmt.Sprintf("state request %s: bundle %q was abandoned by the runner (its commit cycle aborted or its task closed; the work is redone): its output is discarded", req.GetId(), req.GetInstructionId())
		} else {
			resp.Error = fmt.Sprintf("state request %s: no bundle %q in flight on worker %s", req.GetId(), req.GetInstructionId(), w.id)
		}
		return resp
	}
	key := req.GetStateKey()
	var err error
	switch r := req.GetRequest().(type) {
	case *fnpb.StateRequest_Get:
		var data, next []byte
		data, next, err = b.state.Get(b.ctx, key, r.Get.GetContinuationToken())
		resp.Response = &fnpb.StateResponse_Get{Get: &fnpb.StateGetResponse{Data: data, ContinuationToken: next}}
	case *fnpb.StateRequest_Append:
		err = b.state.Append(b.ctx, key, r.Append.GetData())
		resp.Response = &fnpb.StateResponse_Append{Append: &fnpb.StateAppendResponse{}}
	case *fnpb.StateRequest_Clear:
		err = b.state.Clear(b.ctx, key)
		resp.Response = &fnpb.StateResponse_Clear{Clear: &fnpb.StateClearResponse{}}
	default:
		err = fmt.Errorf("unsupported state request %T", r)
	}
	if err != nil {
		resp.Response = nil
		resp.Error = fmt.Sprintf("stage %s bundle %s: state request for %s: %v", b.stage.id, b.id, StateKeyType(key), err)
	}
	return resp
}
