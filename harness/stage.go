package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Transform URNs of the runner's ends of the data channel.
const (
	URNDataSource = "beam:runner:source:v1"
	URNDataSink   = "beam:runner:sink:v1"
)

// MaxDataChunk is the size ProcessElements packs input messages to, and
// the size the host should keep Process batches near: big enough to
// amortise per-message costs, small enough to bound buffering.
const MaxDataChunk = 4 << 20

// Stage is a ProcessBundleDescriptor registered with the worker of one
// environment. Start any number of bundles on it, concurrently.
type Stage struct {
	h              *Harness
	w              *worker
	id             string // the registered descriptor's id
	inputTransform string
	outputs        map[string]string // data sink transform id -> PCollection id
}

// Stage prepares desc for the worker of environment envID (which must have
// been started with StartEnvironment) and registers it there, once.
//
// The harness fills in the ApiServiceDescriptor of every data port (the
// RemoteGrpcPort payloads of beam:runner:source:v1 and beam:runner:sink:v1
// transforms) and the state API descriptor with its own address, and gives
// the descriptor an id unique within the harness; desc itself is not
// modified. inputTransform is the data source the bundles' input goes to;
// outputs maps every data sink transform id to the PCollection id its
// output is reported under.
func (h *Harness) Stage(ctx context.Context, envID string, desc *fnpb.ProcessBundleDescriptor, inputTransform string, outputs map[string]string) (*Stage, error) {
	w, err := h.workerFor(envID)
	if err != nil {
		return nil, fmt.Errorf("staging descriptor %q: %w", desc.GetId(), err)
	}
	prepared, err := h.prepareDescriptor(desc, inputTransform, outputs)
	if err != nil {
		return nil, fmt.Errorf("staging descriptor %q for environment %q: %w", desc.GetId(), envID, err)
	}
	w.mu.Lock()
	w.descriptors[prepared.GetId()] = prepared
	w.mu.Unlock()
	_, err = w.instruct(ctx, &fnpb.InstructionRequest{
		Request: &fnpb.InstructionRequest_Register{Register: &fnpb.RegisterRequest{
			ProcessBundleDescriptor: []*fnpb.ProcessBundleDescriptor{prepared},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("registering descriptor %s (from %q) with worker %s of environment %q: %w", prepared.GetId(), desc.GetId(), w.id, envID, err)
	}
	return &Stage{h: h, w: w, id: prepared.GetId(), inputTransform: inputTransform, outputs: maps.Clone(outputs)}, nil
}

// prepareDescriptor validates desc against the stage's input and outputs
// and returns a copy pointing at this harness.
func (h *Harness) prepareDescriptor(desc *fnpb.ProcessBundleDescriptor, inputTransform string, outputs map[string]string) (*fnpb.ProcessBundleDescriptor, error) {
	if desc == nil {
		return nil, errors.New("nil descriptor")
	}
	prepared := proto.Clone(desc).(*fnpb.ProcessBundleDescriptor)
	base := desc.GetId()
	if base == "" {
		base = "stage"
	}
	prepared.Id = h.newID(sanitizeID(base))
	endpoint := h.apiDescriptor()
	prepared.StateApiServiceDescriptor = endpoint
	prepared.TimerApiServiceDescriptor = endpoint

	var sources, sinks []string
	for _, id := range slices.Sorted(maps.Keys(prepared.GetTransforms())) {
		t := prepared.GetTransforms()[id]
		urn := t.GetSpec().GetUrn()
		if urn != URNDataSource && urn != URNDataSink {
			continue
		}
		var port fnpb.RemoteGrpcPort
		if err := proto.Unmarshal(t.GetSpec().GetPayload(), &port); err != nil {
			return nil, fmt.Errorf("transform %q: decoding RemoteGrpcPort of %s: %w", id, urn, err)
		}
		port.ApiServiceDescriptor = endpoint
		payload, err := proto.Marshal(&port)
		if err != nil {
			return nil, fmt.Errorf("transform %q: encoding RemoteGrpcPort: %w", id, err)
		}
		t.Spec.Payload = payload
		if urn == URNDataSource {
			sources = append(sources, id)
		} else {
			sinks = append(sinks, id)
		}
	}
	// One input per stage: a second source would wait for input forever.
	if !slices.Contains(sources, inputTransform) {
		return nil, fmt.Errorf("input transform %q is not a %s transform of the descriptor (data sources: %q)", inputTransform, URNDataSource, sources)
	}
	if len(sources) > 1 {
		return nil, fmt.Errorf("descriptor has data sources %q; a stage takes input through exactly one (%q)", sources, inputTransform)
	}
	for _, sink := range sinks {
		if _, ok := outputs[sink]; !ok {
			return nil, fmt.Errorf("data sink %q of the descriptor has no PCollection in outputs", sink)
		}
	}
	for sink := range outputs {
		if !slices.Contains(sinks, sink) {
			return nil, fmt.Errorf("output %q is not a %s transform of the descriptor (data sinks: %q)", sink, URNDataSink, sinks)
		}
	}
	return prepared, nil
}

// ID is the id the stage's descriptor is registered under.
func (s *Stage) ID() string { return s.id }

// BundleOption configures one bundle.
type BundleOption func(*Bundle)

// WithStateHandler serves the bundle's state requests with h instead of
// Config.StateHandler: the host's view of side inputs and user state is
// usually specific to a task.
func WithStateHandler(h StateHandler) BundleOption {
	return func(b *Bundle) { b.state = h }
}

// Bundle is one ProcessBundle instruction in flight. One goroutine drives
// it: Process any number of times, then Finish once.
type Bundle struct {
	stage *Stage
	w     *worker
	id    string // instruction id
	ctx   context.Context
	emit  func(pcoll string, data []byte) error
	state StateHandler

	stopWatchingCtx func() bool

	done chan struct{} // closed by complete

	// emitMu is held while emit runs. Finish takes it after done closes,
	// so emit is never running or called once Finish has returned.
	emitMu sync.Mutex

	mu          sync.Mutex
	completed   bool
	err         error
	resp        *fnpb.ProcessBundleResponse
	awaiting    map[string]bool // data sinks whose is_last has not arrived
	inputClosed bool            // is_last sent (or owed via abort) for the input
	finishing   bool
}

// StartBundle sends a ProcessBundleRequest for the stage. The SDK's outputs
// go to emit as they arrive: the raw data of each sink (concatenated
// windowed-value-encoded elements, in chunks that may end mid-element; the
// host reassembles), in order, never concurrently for one bundle, and never
// after Finish returns. emit is called from the worker's data stream, which
// every bundle on the worker shares: it must be quick and must not wait for
// the SDK (for example on this bundle's Process). emit may keep data. If
// emit returns an error, the bundle fails with it.
//
// Cancelling ctx fails the bundle: Process and Finish return the cause and
// the SDK is told the input ended, so its side of the bundle terminates.
func (s *Stage) StartBundle(ctx context.Context, emit func(pcoll string, data []byte) error, opts ...BundleOption) (*Bundle, error) {
	if emit == nil {
		return nil, fmt.Errorf("stage %s: StartBundle: nil emit", s.id)
	}
	b := &Bundle{
		stage:    s,
		w:        s.w,
		id:       s.h.newID("bundle"),
		ctx:      ctx,
		emit:     emit,
		state:    s.h.cfg.StateHandler,
		done:     make(chan struct{}),
		awaiting: make(map[string]bool, len(s.outputs)),
	}
	for sink := range s.outputs {
		b.awaiting[sink] = true
	}
	for _, opt := range opts {
		opt(b)
	}
	s.w.mu.Lock()
	if s.w.lostErr != nil {
		err := s.w.lostErr
		s.w.mu.Unlock()
		return nil, fmt.Errorf("stage %s: worker %s lost: %w", s.id, s.w.id, err)
	}
	s.w.bundles[b.id] = b
	s.w.mu.Unlock()

	b.stopWatchingCtx = context.AfterFunc(ctx, func() {
		b.complete(fmt.Errorf("stage %s bundle %s: %w", s.id, b.id, context.Cause(ctx)))
	})
	err := s.w.sendInstruction(ctx, &fnpb.InstructionRequest{
		InstructionId: b.id,
		Request: &fnpb.InstructionRequest_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleRequest{
			ProcessBundleDescriptorId: s.id,
		}},
	})
	if err != nil {
		err = fmt.Errorf("stage %s bundle %s: sending ProcessBundleRequest: %w", s.id, b.id, err)
		b.complete(err)
		b.stopWatchingCtx()
		return nil, err
	}
	return b, nil
}

// ID is the bundle's instruction id.
func (b *Bundle) ID() string { return b.id }

// Process sends data, concatenated encoded windowed values for the stage's
// input transform, on the data channel as one message. data must hold whole
// elements: every SDK (Go, Java, Python) decodes each data message on its
// own, so the harness cannot split a batch without knowing where its
// elements end. Keep batches around MaxDataChunk; ProcessElements packs
// elements into such messages itself. Process may block for flow control.
// data is copied: the caller may reuse it when Process returns.
func (b *Bundle) Process(data []byte) error {
	if err := b.beforeInput(); err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	return b.sendInput(slices.Clone(data), false)
}

// ProcessElements sends encoded windowed values for the stage's input
// transform, packed into messages of up to MaxDataChunk bytes (an element
// larger than that goes alone) without ever splitting an element. The
// elements are copied.
func (b *Bundle) ProcessElements(elements [][]byte) error {
	if err := b.beforeInput(); err != nil {
		return err
	}
	var batch []byte
	for _, e := range elements {
		if len(batch) > 0 && len(batch)+len(e) > MaxDataChunk {
			if err := b.sendInput(batch, false); err != nil {
				return err
			}
			batch = nil
		}
		if batch == nil {
			batch = make([]byte, 0, min(MaxDataChunk, max(len(e), 64<<10)))
		}
		batch = append(batch, e...)
	}
	if len(batch) > 0 {
		return b.sendInput(batch, false)
	}
	return nil
}

// beforeInput checks that input may still be sent and waits until the
// worker has connected its data stream: SDKs open it lazily, when their
// first bundle starts.
func (b *Bundle) beforeInput() error {
	b.checkContext()
	b.mu.Lock()
	finishing := b.finishing
	b.mu.Unlock()
	if finishing {
		return fmt.Errorf("stage %s bundle %s: Process after Finish", b.stage.id, b.id)
	}
	if isClosed(b.done) { // select below picks at random among ready cases
		return b.failure()
	}
	select {
	case <-b.w.dataReady:
		return nil
	case <-b.done:
		return b.failure()
	}
}

func (b *Bundle) sendInput(data []byte, isLast bool) error {
	msg := &fnpb.Elements{Data: []*fnpb.Elements_Data{{
		InstructionId: b.id,
		TransformId:   b.stage.inputTransform,
		Data:          data,
		IsLast:        isLast,
	}}}
	if isClosed(b.done) { // select below picks at random among ready cases
		return b.failure()
	}
	select {
	case b.w.dataOut <- msg:
		return nil
	case <-b.done:
		return b.failure()
	}
}

// checkContext fails the bundle at once if its context is done, rather than
// leaving it to the context.AfterFunc goroutine, which may not have run yet.
func (b *Bundle) checkContext() {
	if b.ctx.Err() != nil {
		b.complete(fmt.Errorf("stage %s bundle %s: %w", b.stage.id, b.id, context.Cause(b.ctx)))
	}
}

// failure is the error of a completed bundle, or an error saying it
// completed too early.
func (b *Bundle) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	return fmt.Errorf("stage %s bundle %s: the SDK finished the bundle before its input ended", b.stage.id, b.id)
}

// Finish tells the SDK the input ended, then waits for the
// ProcessBundleResponse and the end (is_last) of every output. An SDK
// failure is returned with the SDK's error text verbatim, wrapped with the
// stage and bundle ids.
func (b *Bundle) Finish() (*Result, error) {
	b.mu.Lock()
	if b.finishing {
		b.mu.Unlock()
		return nil, fmt.Errorf("stage %s bundle %s: Finish called twice", b.stage.id, b.id)
	}
	b.finishing = true
	b.mu.Unlock()
	b.checkContext()
	b.mu.Lock()
	sendLast := !b.inputClosed && !b.completed
	b.mu.Unlock()

	// inputClosed is set only once is_last is queued: if the bundle fails
	// meanwhile, complete still owes the SDK an is_last (a duplicate is
	// harmless; a missing one leaves the SDK waiting for input forever).
	if sendLast {
		select {
		case <-b.w.dataReady:
			if b.sendInput(nil, true) == nil {
				b.mu.Lock()
				b.inputClosed = true
				b.mu.Unlock()
			}
		case <-b.done:
		}
	}
	<-b.done
	b.stopWatchingCtx()
	b.emitMu.Lock()
	//lint:ignore SA2001 an empty critical section: waits for a running emit to return
	b.emitMu.Unlock()

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	return newResult(b.resp), nil
}

// complete ends the bundle with err (nil for success), once. A failed
// bundle whose input is still open gets an is_last sent on its behalf, so
// the SDK does not wait for input forever.
func (b *Bundle) complete(err error) {
	b.mu.Lock()
	if b.completed {
		b.mu.Unlock()
		return
	}
	b.completed = true
	b.err = err
	abort := err != nil && !b.inputClosed
	b.inputClosed = true
	close(b.done)
	b.mu.Unlock()

	b.w.removeBundle(b.id)
	if abort && !b.w.isLost() {
		b.w.abortInput(b.id, b.stage.inputTransform)
	}
}

// onResponse handles the SDK's answer to the ProcessBundleRequest.
func (b *Bundle) onResponse(resp *fnpb.InstructionResponse) {
	if msg := resp.GetError(); msg != "" {
		b.complete(fmt.Errorf("stage %s bundle %s: %w", b.stage.id, b.id, &SDKError{Message: msg}))
		return
	}
	b.mu.Lock()
	b.resp = resp.GetProcessBundle()
	if b.resp == nil {
		b.resp = &fnpb.ProcessBundleResponse{}
	}
	ready := len(b.awaiting) == 0
	b.mu.Unlock()
	if ready {
		b.complete(nil)
	}
}

// onData handles output of the bundle; it runs on the data stream's
// receiving goroutine.
func (b *Bundle) onData(transformID string, data []byte, isLast bool) {
	pcoll, ok := b.stage.outputs[transformID]
	if !ok {
		b.complete(fmt.Errorf("stage %s bundle %s: the SDK sent data for transform %q, which is not a data sink of the stage",
			b.stage.id, b.id, transformID))
		return
	}
	if len(data) > 0 {
		b.emitMu.Lock()
		var err error
		if !isClosed(b.done) {
			err = b.emit(pcoll, data)
		}
		b.emitMu.Unlock()
		if err != nil {
			b.complete(fmt.Errorf("stage %s bundle %s: emitting output of %s to PCollection %s: %w", b.stage.id, b.id, transformID, pcoll, err))
			return
		}
	}
	if !isLast {
		return
	}
	b.mu.Lock()
	delete(b.awaiting, transformID)
	ready := b.resp != nil && len(b.awaiting) == 0
	b.mu.Unlock()
	if ready {
		b.complete(nil)
	}
}

// Finalize sends the FinalizeBundle instruction for a bundle whose Result
// said RequiresFinalization, after the host durably committed its output.
func (b *Bundle) Finalize(ctx context.Context) error {
	_, err := b.w.instruct(ctx, &fnpb.InstructionRequest{
		Request: &fnpb.InstructionRequest_FinalizeBundle{FinalizeBundle: &fnpb.FinalizeBundleRequest{InstructionId: b.id}},
	})
	if err != nil {
		return fmt.Errorf("stage %s bundle %s: finalizing: %w", b.stage.id, b.id, err)
	}
	return nil
}

// SDKError is a bundle failure reported by the SDK worker; Message is the
// SDK's text (for example a DoFn's panic message and stack).
type SDKError struct {
	Message string
}

func (e *SDKError) Error() string { return "SDK worker: " + e.Message }

// Result is what a successful bundle reports besides its output.
type Result struct {
	// Residuals are the parts of the input the SDK did not process
	// (checkpoints of splittable DoFns, or splits), to be scheduled again.
	Residuals []Residual
	// MonitoringInfos are the bundle's metrics.
	MonitoringInfos []*pipepb.MonitoringInfo
	// RequiresFinalization says the host must call Bundle.Finalize once
	// the bundle's output is committed.
	RequiresFinalization bool
}

// Residual is unprocessed input returned by the SDK.
type Residual struct {
	TransformID string
	InputID     string
	// Element is the encoded windowed value to process again.
	Element []byte
	// Delay is how long the SDK asked the runner to wait before resuming.
	Delay time.Duration
}

func newResult(resp *fnpb.ProcessBundleResponse) *Result {
	r := &Result{
		MonitoringInfos:      resp.GetMonitoringInfos(),
		RequiresFinalization: resp.GetRequiresFinalization(),
	}
	for _, root := range resp.GetResidualRoots() {
		app := root.GetApplication()
		r.Residuals = append(r.Residuals, Residual{
			TransformID: app.GetTransformId(),
			InputID:     app.GetInputId(),
			Element:     app.GetElement(),
			Delay:       root.GetRequestedTimeDelay().AsDuration(),
		})
	}
	return r
}
