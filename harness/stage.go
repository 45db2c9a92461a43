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
	timerFamilies  []TimerFamily     // in the order given to WithTimerFamilies
}

// TimerFamily names one timer family of a stateful ParDo: the transform id
// in the stage's descriptor and the timer family id (a key of the ParDo's
// timer_family_specs).
type TimerFamily struct{ TransformID, FamilyID string }

// StageOption configures a stage.
type StageOption func(*stageConfig)

type stageConfig struct {
	timerFamilies []TimerFamily
}

// WithTimerFamilies lists every timer family of the stage: every
// (stateful ParDo transform id, timer family id) of the descriptor. SDKs
// wait for the end (is_last) of the timer stream of each of them in every
// bundle, so Stage refuses a descriptor whose ParDos declare timer families
// that are not all listed here, or a list naming families the descriptor
// does not declare.
func WithTimerFamilies(families []TimerFamily) StageOption {
	return func(c *stageConfig) { c.timerFamilies = slices.Clone(families) }
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
// output is reported under. A stage with stateful ParDos that use timers
// must list their timer families with WithTimerFamilies; the harness then
// also points the descriptor's timer API descriptor at itself.
func (h *Harness) Stage(ctx context.Context, envID string, desc *fnpb.ProcessBundleDescriptor, inputTransform string, outputs map[string]string, opts ...StageOption) (*Stage, error) {
	var cfg stageConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	w, err := h.workerFor(envID)
	if err != nil {
		return nil, fmt.Errorf("staging descriptor %q: %w", desc.GetId(), err)
	}
	prepared, err := h.prepareDescriptor(desc, inputTransform, outputs, cfg.timerFamilies)
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
	return &Stage{
		h:              h,
		w:              w,
		id:             prepared.GetId(),
		inputTransform: inputTransform,
		outputs:        maps.Clone(outputs),
		timerFamilies:  cfg.timerFamilies,
	}, nil
}

// prepareDescriptor validates desc against the stage's input and outputs
// and returns a copy pointing at this harness.
func (h *Harness) prepareDescriptor(desc *fnpb.ProcessBundleDescriptor, inputTransform string, outputs map[string]string, timerFamilies []TimerFamily) (*fnpb.ProcessBundleDescriptor, error) {
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
	prepared.TimerApiServiceDescriptor = nil
	if len(timerFamilies) > 0 {
		prepared.TimerApiServiceDescriptor = endpoint
	}

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
	if err := checkTimerFamilies(prepared, timerFamilies); err != nil {
		return nil, err
	}
	return prepared, nil
}

// URNParDo is the transform URN of a ParDo, whose payload declares its
// timer families.
const URNParDo = "beam:transform:pardo:v1"

// checkTimerFamilies checks that families are exactly the timer families
// the descriptor's ParDos declare: a family the SDK expects but the runner
// does not know would leave every bundle waiting for its end forever.
func checkTimerFamilies(desc *fnpb.ProcessBundleDescriptor, families []TimerFamily) error {
	declared := map[TimerFamily]bool{}
	for _, id := range slices.Sorted(maps.Keys(desc.GetTransforms())) {
		t := desc.GetTransforms()[id]
		if t.GetSpec().GetUrn() != URNParDo {
			continue
		}
		var payload pipepb.ParDoPayload
		if err := proto.Unmarshal(t.GetSpec().GetPayload(), &payload); err != nil {
			return fmt.Errorf("transform %q: decoding ParDoPayload: %w", id, err)
		}
		for family := range payload.GetTimerFamilySpecs() {
			declared[TimerFamily{TransformID: id, FamilyID: family}] = true
		}
	}
	listed := make(map[TimerFamily]bool, len(families))
	for _, f := range families {
		if listed[f] {
			return fmt.Errorf("timer family %q of transform %q listed twice", f.FamilyID, f.TransformID)
		}
		listed[f] = true
		if !declared[f] {
			return fmt.Errorf("timer family %q of transform %q is not declared by a ParDo of the descriptor", f.FamilyID, f.TransformID)
		}
	}
	var missing []string
	for f := range declared {
		if !listed[f] {
			missing = append(missing, fmt.Sprintf("%s/%s", f.TransformID, f.FamilyID))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("the descriptor's ParDos declare timer families %q (transform/family) that WithTimerFamilies does not list", missing)
	}
	return nil
}

// ID is the id the stage's descriptor is registered under.
func (s *Stage) ID() string { return s.id }

// BundleOption configures one bundle.
type BundleOption func(*Bundle)

// WithCacheTokens sends the bundle's ProcessBundleRequest with tokens: for
// each, the SDK may cache what it reads of that state (a side input) and
// reuse it in every later bundle that carries the same token. The caller
// promises that a token's state does not change: new contents need a new
// token.
func WithCacheTokens(tokens []*fnpb.ProcessBundleRequest_CacheToken) BundleOption {
	return func(b *Bundle) { b.cacheTokens = tokens }
}

// WithStateHandler serves the bundle's state requests with h instead of
// Config.StateHandler: the host's view of side inputs and user state is
// usually specific to a task.
func WithStateHandler(h StateHandler) BundleOption {
	return func(b *Bundle) { b.state = h }
}

// WithTimerOutput makes the timers the SDK sets in the bundle go to emit:
// the raw timer data of each timer family (concatenated timers encoded
// with the family's timer coder, in chunks as the SDK sent them), in order
// per family, never concurrently with each other or with the bundle's data
// emit, and never after Finish returns. The rules of StartBundle's emit
// apply: emit runs on the worker's data stream, must be quick and must not
// wait for the SDK; it may keep data; an error fails the bundle. A bundle
// whose SDK sets timers without a timer output fails.
func WithTimerOutput(emit func(transformID, familyID string, data []byte) error) BundleOption {
	return func(b *Bundle) { b.timerEmit = emit }
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
	// cacheTokens go in the ProcessBundleRequest (WithCacheTokens).
	cacheTokens []*fnpb.ProcessBundleRequest_CacheToken

	timerEmit func(transformID, familyID string, data []byte) error

	stopWatchingCtx func() bool

	done chan struct{} // closed by complete

	// emitMu is held while emit or timerEmit runs. Finish takes it after done closes,
	// so emit is never running or called once Finish has returned.
	emitMu sync.Mutex

	mu          sync.Mutex
	completed   bool
	err         error
	resp        *fnpb.ProcessBundleResponse
	awaiting    map[string]bool      // data sinks whose is_last has not arrived
	awaitingTF  map[TimerFamily]bool // timer families whose is_last has not arrived
	inputClosed bool                 // is_last sent (or owed via abort) for the input
	finishing   bool

	// split is what a checkpoint (FinishCheckpointing) took from the
	// bundle; nil if none was taken, and splitFrom the first input element
	// it took (-1: none). Only Finish's goroutine touches them.
	split     *fnpb.ProcessBundleSplitResponse
	splitFrom int
	// inputGiven says a split (a checkpoint, or Split) gave its caller
	// input elements the SDK will not process: a later split's channel
	// split cannot give them again (under mu). Splits are asked only of
	// bundles of one element, so the first one given is all of them.
	inputGiven bool
}

// givenFrom is the first input element of the bundle (of inputElements)
// that a split's channel splits give its caller, -1 for none: also none
// if an earlier split gave them already.
func (b *Bundle) givenFrom(split *fnpb.ProcessBundleSplitResponse, inputElements int) int {
	first := -1
	for _, cs := range split.GetChannelSplits() {
		if cs.GetTransformId() == b.stage.inputTransform && int(cs.GetFirstResidualElement()) < inputElements {
			first = int(cs.GetFirstResidualElement())
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if first < 0 || b.inputGiven {
		return -1
	}
	b.inputGiven = true
	return first
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

		awaitingTF: make(map[TimerFamily]bool, len(s.timerFamilies)),
	}
	for sink := range s.outputs {
		b.awaiting[sink] = true
	}
	// Every SDK ends the timer stream of each family it was sent the end
	// of (the Go SDK only of those).
	for _, f := range s.timerFamilies {
		b.awaitingTF[f] = true
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
			CacheTokens:               b.cacheTokens,
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
	return b.sendInput(slices.Clone(data))
}

// ProcessTimers sends fired timers for the timer family familyID of the
// stateful ParDo transformID (one of the stage's timer families) on the
// data channel as one message: data is concatenated timers encoded with
// the family's timer coder, and must hold whole timers, for the same
// reason Process needs whole elements. Timers and elements reach the SDK
// in the order they are sent. data is copied.
func (b *Bundle) ProcessTimers(transformID, familyID string, data []byte) error {
	if !slices.Contains(b.stage.timerFamilies, TimerFamily{TransformID: transformID, FamilyID: familyID}) {
		return fmt.Errorf("stage %s bundle %s: ProcessTimers: timer family %q of transform %q is not a timer family of the stage (WithTimerFamilies)",
			b.stage.id, b.id, familyID, transformID)
	}
	if err := b.beforeInput(); err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	return b.send(&fnpb.Elements{Timers: []*fnpb.Elements_Timers{{
		InstructionId: b.id,
		TransformId:   transformID,
		TimerFamilyId: familyID,
		Timers:        slices.Clone(data),
	}}})
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
			if err := b.sendInput(batch); err != nil {
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
		return b.sendInput(batch)
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

func (b *Bundle) sendInput(data []byte) error {
	return b.send(&fnpb.Elements{Data: []*fnpb.Elements_Data{{
		InstructionId: b.id,
		TransformId:   b.stage.inputTransform,
		Data:          data,
	}}})
}

// endOfInput is the message that ends the bundle's input: is_last for the
// data input and for every timer family of the stage, in one message. The
// Go SDK counts is_last markers per instruction (one for the data input,
// one per ParDo with timers) and only answers the timer families it saw
// before it stopped reading, so they must all arrive together.
func (b *Bundle) endOfInput() *fnpb.Elements {
	msg := &fnpb.Elements{Data: []*fnpb.Elements_Data{{
		InstructionId: b.id,
		TransformId:   b.stage.inputTransform,
		IsLast:        true,
	}}}
	for _, f := range b.stage.timerFamilies {
		msg.Timers = append(msg.Timers, &fnpb.Elements_Timers{
			InstructionId: b.id,
			TransformId:   f.TransformID,
			TimerFamilyId: f.FamilyID,
			IsLast:        true,
		})
	}
	return msg
}

// send queues one data stream message of the bundle.
func (b *Bundle) send(msg *fnpb.Elements) error {
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

// Finish tells the SDK the input ended (the data input and the timers of
// every timer family of the stage, even if none were sent), then waits for
// the ProcessBundleResponse and the end (is_last) of every output: every
// data sink and the timers of every timer family. An SDK
// failure is returned with the SDK's error text verbatim, wrapped with the
// stage and bundle ids.
func (b *Bundle) Finish() (*Result, error) {
	return b.FinishCheckpointing(time.Time{}, 0)
}

// FinishCheckpointing is Finish, except that a bundle still running at
// time at (zero: never) is checkpointed: the SDK is asked to split its
// input at fraction 0 of the remainder (a ProcessBundleSplitRequest for
// the stage's data source, inputElements being how many elements the
// bundle was sent), which stops a splittable DoFn at its current position.
// The Result then holds the rest of the running element's restriction
// among its Residuals, and Unprocessed the index of the first input
// element the SDK will not process (the channel split), to be processed
// again by the caller; an SDK that declines the split (nothing left to
// split, the bundle already done) leaves the bundle as it was. A split
// request whose answer is lost fails the bundle: the SDK may have split
// it, and the residuals would be lost with the answer.
func (b *Bundle) FinishCheckpointing(at time.Time, inputElements int) (*Result, error) {
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
			if b.send(b.endOfInput()) == nil {
				b.mu.Lock()
				b.inputClosed = true
				b.mu.Unlock()
			}
		case <-b.done:
		}
	}
	if !at.IsZero() {
		b.checkpointAt(at, inputElements)
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
	r := newResult(b.resp)
	r.Unprocessed = -1
	if b.split != nil {
		r.Checkpointed = true
		r.Residuals = append(residuals(b.split.GetResidualRoots()), r.Residuals...)
		r.Unprocessed = b.splitFrom
	}
	return r, nil
}

// checkpointRetry bounds the wait between a declined checkpoint and the
// next request. An SDK declines while the bundle is not yet active in it:
// the Go SDK answers "instruction not active" (an error) to a split that
// overtakes its ProcessBundle, Python an empty split to one that comes
// before its bundle runs. A bundle left unsplit then would run its whole
// restriction past the checkpoint time, holding the commit cycle (and
// past the transaction timeout, for a long one).
//
// An empty answer from the Go SDK says instead that its element is done or
// nearly: asked again in the moment between the element's end and the
// bundle's, the Go SDK holds the split 500 ms waiting for an element to
// start. So an empty answer is asked again only after checkpointRetry, by
// when such a bundle is usually done; an error answer soon (5 ms, then
// doubling).
const checkpointRetry = 50 * time.Millisecond

// checkpointAt checkpoints the bundle at at, asking again after each
// decline until the SDK splits or the bundle ends. A failed request fails
// the bundle.
func (b *Bundle) checkpointAt(at time.Time, inputElements int) {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, checkpointRetry) {
		select {
		case <-b.done:
			return
		case <-timer.C:
		}
		split, empty, err := b.checkpoint(inputElements)
		if err != nil {
			b.complete(err)
			return
		}
		if split {
			return
		}
		if empty {
			timer.Reset(checkpointRetry)
		} else {
			timer.Reset(wait)
		}
	}
}

// checkpoint asks the SDK to split the running bundle at fraction 0 of
// its remainder and keeps the split in b.split; split says whether it
// did, empty whether the SDK declined with an empty answer. An SDK that
// answers with an error did not split; an answer that does not arrive is
// an error.
func (b *Bundle) checkpoint(inputElements int) (split, empty bool, err error) {
	resp, err := b.w.instruct(b.ctx, &fnpb.InstructionRequest{
		Request: &fnpb.InstructionRequest_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitRequest{
			InstructionId: b.id,
			DesiredSplits: map[string]*fnpb.ProcessBundleSplitRequest_DesiredSplit{
				b.stage.inputTransform: {FractionOfRemainder: 0, EstimatedInputElements: int64(inputElements)},
			},
		}},
	})
	if err != nil {
		if resp.GetError() != "" {
			return false, false, nil // declined: the bundle goes on unsplit
		}
		return false, false, fmt.Errorf("stage %s bundle %s: checkpointing (ProcessBundleSplit): %w", b.stage.id, b.id, err)
	}
	// The Go SDK declines a split it cannot make with an empty answer.
	if s := resp.GetProcessBundleSplit(); len(s.GetResidualRoots()) > 0 || len(s.GetChannelSplits()) > 0 {
		b.split, b.splitFrom = s, b.givenFrom(s, inputElements)
		return true, false, nil
	}
	return false, true, nil
}

// Split asks the SDK to split the running bundle at fraction of its
// remainder (a ProcessBundleSplitRequest for the stage's data source,
// inputElements being how many elements the bundle was sent), for another
// bundle to process the rest: a splittable DoFn's running restriction is
// cut where the fraction falls. It may be called while another goroutine
// waits in FinishCheckpointing, whose Result then holds none of what the
// split returned. ok is false if the SDK declined (the bundle done or
// about to be, nothing left to split): nothing moved. Otherwise residuals
// are the rest of the running element, and unprocessed the index of the
// first input element the SDK will not process, -1 for none: those
// elements are the caller's too. A split request whose answer is lost
// fails the bundle, as in FinishCheckpointing.
func (b *Bundle) Split(fraction float64, inputElements int) (residualRoots []Residual, unprocessed int, ok bool, err error) {
	b.mu.Lock()
	done := b.completed
	b.mu.Unlock()
	if done {
		return nil, -1, false, nil
	}
	resp, err := b.w.instruct(b.ctx, &fnpb.InstructionRequest{
		Request: &fnpb.InstructionRequest_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitRequest{
			InstructionId: b.id,
			DesiredSplits: map[string]*fnpb.ProcessBundleSplitRequest_DesiredSplit{
				b.stage.inputTransform: {FractionOfRemainder: fraction, EstimatedInputElements: int64(inputElements)},
			},
		}},
	})
	if err != nil {
		if resp.GetError() != "" {
			return nil, -1, false, nil // declined
		}
		err = fmt.Errorf("stage %s bundle %s: splitting (ProcessBundleSplit): %w", b.stage.id, b.id, err)
		b.complete(err)
		return nil, -1, false, err
	}
	split := resp.GetProcessBundleSplit()
	unprocessed = b.givenFrom(split, inputElements)
	if len(split.GetResidualRoots()) == 0 && unprocessed < 0 {
		return nil, -1, false, nil // the Go SDK declines with an empty answer
	}
	return residuals(split.GetResidualRoots()), unprocessed, true, nil
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
		b.w.abortInput(b.endOfInput())
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
	ready := len(b.awaiting) == 0 && len(b.awaitingTF) == 0
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
	ready := b.resp != nil && len(b.awaiting) == 0 && len(b.awaitingTF) == 0
	b.mu.Unlock()
	if ready {
		b.complete(nil)
	}
}

// onTimers handles timers the SDK set in the bundle; it runs on the data
// stream's receiving goroutine.
func (b *Bundle) onTimers(transformID, familyID string, data []byte, isLast bool) {
	f := TimerFamily{TransformID: transformID, FamilyID: familyID}
	if !slices.Contains(b.stage.timerFamilies, f) {
		b.complete(fmt.Errorf("stage %s bundle %s: the SDK sent timers of family %q of transform %q, which is not a timer family of the stage",
			b.stage.id, b.id, familyID, transformID))
		return
	}
	if len(data) > 0 {
		if b.timerEmit == nil {
			b.complete(fmt.Errorf("stage %s bundle %s: transform %s set timers of family %q, but the bundle has no timer output (WithTimerOutput)",
				b.stage.id, b.id, transformID, familyID))
			return
		}
		b.emitMu.Lock()
		var err error
		if !isClosed(b.done) {
			err = b.timerEmit(transformID, familyID, data)
		}
		b.emitMu.Unlock()
		if err != nil {
			b.complete(fmt.Errorf("stage %s bundle %s: emitting timers of family %q of transform %s: %w", b.stage.id, b.id, familyID, transformID, err))
			return
		}
	}
	if !isLast {
		return
	}
	b.mu.Lock()
	delete(b.awaitingTF, f)
	ready := b.resp != nil && len(b.awaiting) == 0 && len(b.awaitingTF) == 0
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
	// Checkpointed says FinishCheckpointing split the bundle. Unprocessed
	// is then the index of the first input element the SDK did not
	// process: it and every element after it are the caller's to process
	// again. -1: the SDK processed every element (or a residual holds the
	// rest).
	Checkpointed bool
	Unprocessed  int
}

// Residual is unprocessed input returned by the SDK.
type Residual struct {
	TransformID string
	InputID     string
	// Element is the encoded windowed value to process again.
	Element []byte
	// Delay is how long the SDK asked the runner to wait before resuming.
	Delay time.Duration
	// OutputWatermarks are the SDK's estimates of the residual's output
	// watermark, by output (local name); none if it gave none.
	OutputWatermarks map[string]time.Time
}

func newResult(resp *fnpb.ProcessBundleResponse) *Result {
	r := &Result{
		MonitoringInfos:      resp.GetMonitoringInfos(),
		RequiresFinalization: resp.GetRequiresFinalization(),
	}
	r.Residuals = residuals(resp.GetResidualRoots())
	return r
}

// residuals converts the SDK's residual roots (of a bundle's response or of
// a split).
func residuals(roots []*fnpb.DelayedBundleApplication) []Residual {
	var out []Residual
	for _, root := range roots {
		app := root.GetApplication()
		res := Residual{
			TransformID: app.GetTransformId(),
			InputID:     app.GetInputId(),
			Element:     app.GetElement(),
			Delay:       root.GetRequestedTimeDelay().AsDuration(),
		}
		for local, ts := range app.GetOutputWatermarks() {
			if res.OutputWatermarks == nil {
				res.OutputWatermarks = map[string]time.Time{}
			}
			res.OutputWatermarks[local] = ts.AsTime()
		}
		out = append(out, res)
	}
	return out
}
