package harness_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ksrunner/ksrunner/harness"
)

// fakePool is a BeamFnExternalWorkerPool whose workers the test drives by
// hand, to make the SDK side's timing deterministic.
type fakePool struct {
	fnpb.UnimplementedBeamFnExternalWorkerPoolServer
	started chan *fnpb.StartWorkerRequest
}

func (p *fakePool) StartWorker(_ context.Context, req *fnpb.StartWorkerRequest) (*fnpb.StartWorkerResponse, error) {
	p.started <- req
	return &fnpb.StartWorkerResponse{}, nil
}

func (p *fakePool) StopWorker(context.Context, *fnpb.StopWorkerRequest) (*fnpb.StopWorkerResponse, error) {
	return &fnpb.StopWorkerResponse{}, nil
}

// fakeWorker is the SDK side of one worker, driven by the test.
type fakeWorker struct {
	t       *testing.T
	cancel  context.CancelFunc
	control fnpb.BeamFnControl_ControlClient
	data    fnpb.BeamFnData_DataClient
	state   fnpb.BeamFnState_StateClient
}

// startFake starts a harness whose environment "fake" is a worker the
// test plays, and registers a one-sink stage on it.
func startFake(t *testing.T) (*harness.Harness, *harness.Stage, *fakeWorker) {
	t.Helper()
	return startFakeWithTimers(t, nil)
}

// startFakeWithTimers is startFake for a stage whose descriptor also has a
// ParDo "pardo" declaring the given timer families.
func startFakeWithTimers(t *testing.T, families []string) (*harness.Harness, *harness.Stage, *fakeWorker) {
	t.Helper()
	lis, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	pool := &fakePool{started: make(chan *fnpb.StartWorkerRequest, 1)}
	srv := grpc.NewServer()
	fnpb.RegisterBeamFnExternalWorkerPoolServer(srv, pool)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	h, err := harness.Start(context.Background(), harness.Config{JobID: "fake", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	payload, _ := proto.Marshal(&pipepb.ExternalPayload{Endpoint: &pipepb.ApiServiceDescriptor{Url: lis.Addr().String()}})

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fw := &fakeWorker{t: t, cancel: cancel}
	connected := make(chan error, 1)
	go func() {
		req := <-pool.started
		conn, err := grpc.NewClient(req.GetControlEndpoint().GetUrl(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			connected <- err
			return
		}
		t.Cleanup(func() { conn.Close() })
		wctx := metadata.AppendToOutgoingContext(ctx, "worker_id", req.GetWorkerId())
		if fw.control, err = fnpb.NewBeamFnControlClient(conn).Control(wctx); err != nil {
			connected <- err
			return
		}
		if fw.data, err = fnpb.NewBeamFnDataClient(conn).Data(wctx); err != nil {
			connected <- err
			return
		}
		fw.state, err = fnpb.NewBeamFnStateClient(conn).State(wctx)
		connected <- err
	}()
	if err := h.StartEnvironment(context.Background(), "fake", &pipepb.Environment{Urn: harness.URNEnvExternal, Payload: payload}); err != nil {
		t.Fatalf("StartEnvironment: %v", err)
	}
	if err := <-connected; err != nil {
		t.Fatal(err)
	}

	port, _ := proto.Marshal(&fnpb.RemoteGrpcPort{CoderId: "c"})
	desc := &fnpb.ProcessBundleDescriptor{Id: "fake", Transforms: map[string]*pipepb.PTransform{
		"in":  {Spec: &pipepb.FunctionSpec{Urn: harness.URNDataSource, Payload: port}, Outputs: map[string]string{"o": "p1"}},
		"out": {Spec: &pipepb.FunctionSpec{Urn: harness.URNDataSink, Payload: port}, Inputs: map[string]string{"i": "p1"}},
	}}
	var opts []harness.StageOption
	if len(families) > 0 {
		payload := &pipepb.ParDoPayload{TimerFamilySpecs: map[string]*pipepb.TimerFamilySpec{}}
		var tfs []harness.TimerFamily
		for _, f := range families {
			payload.TimerFamilySpecs[f] = &pipepb.TimerFamilySpec{TimeDomain: pipepb.TimeDomain_EVENT_TIME}
			tfs = append(tfs, harness.TimerFamily{TransformID: "pardo", FamilyID: f})
		}
		b, _ := proto.Marshal(payload)
		desc.Transforms["pardo"] = &pipepb.PTransform{Spec: &pipepb.FunctionSpec{Urn: harness.URNParDo, Payload: b}, Inputs: map[string]string{"i": "p1"}}
		opts = append(opts, harness.WithTimerFamilies(tfs))
	}
	staged := make(chan *harness.Stage, 1)
	go func() {
		stage, err := h.Stage(context.Background(), "fake", desc, "in", map[string]string{"out": "p1"}, opts...)
		if err != nil {
			t.Error(err)
		}
		staged <- stage
	}()
	reg := fw.recvInstruction()
	got := reg.GetRegister().GetProcessBundleDescriptor()[0]
	var gotPort fnpb.RemoteGrpcPort
	proto.Unmarshal(got.GetTransforms()["in"].GetSpec().GetPayload(), &gotPort)
	if gotPort.GetApiServiceDescriptor().GetUrl() != h.Endpoint() || got.GetStateApiServiceDescriptor().GetUrl() != h.Endpoint() {
		t.Errorf("registered descriptor does not point at the harness: %v", got)
	}
	if hasTimerAPI := got.GetTimerApiServiceDescriptor().GetUrl() == h.Endpoint(); hasTimerAPI != (len(families) > 0) {
		t.Errorf("registered descriptor's timer API descriptor is %v with timer families %q", got.GetTimerApiServiceDescriptor(), families)
	}
	fw.respond(&fnpb.InstructionResponse{InstructionId: reg.GetInstructionId(), Response: &fnpb.InstructionResponse_Register{Register: &fnpb.RegisterResponse{}}})
	stage := <-staged
	if stage == nil {
		t.FailNow()
	}
	return h, stage, fw
}

func (fw *fakeWorker) recvInstruction() *fnpb.InstructionRequest {
	fw.t.Helper()
	req, err := fw.control.Recv()
	if err != nil {
		fw.t.Fatalf("control.Recv: %v", err)
	}
	return req
}

// recvInstructionWithin is recvInstruction that fails the test if no
// instruction comes within d (the worker's streams are then closed).
func (fw *fakeWorker) recvInstructionWithin(d time.Duration, what string) *fnpb.InstructionRequest {
	fw.t.Helper()
	type recv struct {
		req *fnpb.InstructionRequest
		err error
	}
	got := make(chan recv, 1)
	go func() {
		req, err := fw.control.Recv()
		got <- recv{req, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			fw.t.Fatalf("control.Recv: %v", r.err)
		}
		return r.req
	case <-time.After(d):
		fw.cancel()
		fw.t.Fatalf("no instruction within %v: want %s", d, what)
		return nil
	}
}

func (fw *fakeWorker) respond(resp *fnpb.InstructionResponse) {
	fw.t.Helper()
	if err := fw.control.Send(resp); err != nil {
		fw.t.Fatalf("control.Send: %v", err)
	}
}

// readInput reads the bundle's input up to its is_last.
func (fw *fakeWorker) readInput() string {
	fw.t.Helper()
	var got strings.Builder
	for {
		msg, err := fw.data.Recv()
		if err != nil {
			fw.t.Fatalf("data.Recv: %v", err)
		}
		for _, d := range msg.GetData() {
			got.Write(d.GetData())
			if d.GetIsLast() {
				return got.String()
			}
		}
	}
}

func (fw *fakeWorker) sendOutput(instID string, data string, isLast bool) {
	fw.t.Helper()
	err := fw.data.Send(&fnpb.Elements{Data: []*fnpb.Elements_Data{{InstructionId: instID, TransformId: "out", Data: []byte(data), IsLast: isLast}}})
	if err != nil {
		fw.t.Fatalf("data.Send: %v", err)
	}
}

// TestOutputAndResponseInEitherOrder checks that a bundle completes only
// when both its ProcessBundleResponse and the is_last of its output have
// arrived, whichever comes first, and that residuals come through.
func TestOutputAndResponseInEitherOrder(t *testing.T) {
	_, stage, fw := startFake(t)
	for _, responseFirst := range []bool{true, false} {
		c := newCollector(t)
		var out []string
		b, err := stage.StartBundle(context.Background(), func(pcoll string, data []byte) error {
			out = append(out, pcoll+":"+string(data))
			return c.emit(pcoll, data)
		})
		if err != nil {
			t.Fatal(err)
		}
		req := fw.recvInstruction()
		if err := b.Process([]byte("input")); err != nil {
			t.Fatal(err)
		}
		finished := make(chan error, 1)
		var res *harness.Result
		go func() {
			var err error
			res, err = b.Finish()
			finished <- err
		}()
		if got := fw.readInput(); got != "input" {
			t.Errorf("SDK got input %q", got)
		}
		resp := &fnpb.InstructionResponse{InstructionId: req.GetInstructionId(), Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{
			ResidualRoots: []*fnpb.DelayedBundleApplication{{
				Application:        &fnpb.BundleApplication{TransformId: "t", InputId: "i", Element: []byte("rest"), OutputWatermarks: map[string]*timestamppb.Timestamp{"out": timestamppb.New(time.UnixMilli(1234))}},
				RequestedTimeDelay: durationpb.New(3 * time.Second),
			}},
		}}}
		fw.sendOutput(req.GetInstructionId(), "first", false)
		if responseFirst {
			fw.respond(resp)
			fw.sendOutput(req.GetInstructionId(), "second", true)
		} else {
			fw.sendOutput(req.GetInstructionId(), "second", true)
			fw.respond(resp)
		}
		if err := <-finished; err != nil {
			t.Fatalf("responseFirst=%v: Finish: %v", responseFirst, err)
		}
		if strings.Join(out, ",") != "p1:first,p1:second" {
			t.Errorf("responseFirst=%v: output %q", responseFirst, out)
		}
		if len(res.Residuals) != 1 || string(res.Residuals[0].Element) != "rest" || res.Residuals[0].TransformID != "t" ||
			res.Residuals[0].Delay != 3*time.Second || !res.Residuals[0].OutputWatermarks["out"].Equal(time.UnixMilli(1234)) || len(res.Residuals[0].OutputWatermarks) != 1 {
			t.Errorf("residuals %+v, want the element, its delay and its output watermark", res.Residuals)
		}
	}
}

// TestControlStreamBreakFailsBundles breaks the worker's control stream
// with a bundle in flight: Finish fails with a clear error instead of
// hanging, and the environment can be started again.
func TestControlStreamBreakFailsBundles(t *testing.T) {
	_, stage, fw := startFake(t)
	b, err := stage.StartBundle(context.Background(), newCollector(t).emit)
	if err != nil {
		t.Fatal(err)
	}
	fw.recvInstruction()
	fw.cancel() // the SDK worker goes away
	_, err = b.Finish()
	if err == nil || !strings.Contains(err.Error(), "lost") || !strings.Contains(err.Error(), "stream") {
		t.Errorf("got %v, want an error saying the worker was lost with its stream", err)
	}
	if errors.Is(err, harness.ErrClosed) {
		t.Errorf("reported as a closed harness: %v", err)
	}
}

// readInputMessages reads the bundle's data stream messages up to the one
// carrying the input's is_last.
func (fw *fakeWorker) readInputMessages() []*fnpb.Elements {
	fw.t.Helper()
	var msgs []*fnpb.Elements
	for {
		msg, err := fw.data.Recv()
		if err != nil {
			fw.t.Fatalf("data.Recv: %v", err)
		}
		msgs = append(msgs, msg)
		for _, d := range msg.GetData() {
			if d.GetIsLast() {
				return msgs
			}
		}
	}
}

// checkEndOfInput checks that the last message ends the data input and
// the timers of every family at once (the Go SDK needs them together).
func checkEndOfInput(t *testing.T, last *fnpb.Elements, instID string, families ...string) {
	t.Helper()
	var ended []string
	for _, tm := range last.GetTimers() {
		if tm.GetIsLast() && tm.GetInstructionId() == instID && tm.GetTransformId() == "pardo" && len(tm.GetTimers()) == 0 {
			ended = append(ended, tm.GetTimerFamilyId())
		}
	}
	slices.Sort(ended)
	if !slices.Equal(ended, families) {
		t.Errorf("the message ending the input %v ends timer families %q, want %q", last, ended, families)
	}
}

func (fw *fakeWorker) sendTimers(instID, family, data string, isLast bool) {
	fw.t.Helper()
	err := fw.data.Send(&fnpb.Elements{Timers: []*fnpb.Elements_Timers{{InstructionId: instID, TransformId: "pardo", TimerFamilyId: family, Timers: []byte(data), IsLast: isLast}}})
	if err != nil {
		fw.t.Fatalf("data.Send: %v", err)
	}
}

// TestTimersEndInAnyOrder checks that ProcessTimers reaches the SDK as
// Elements.Timers in order with the input, that Finish ends the input and
// every timer family in one message, and that a bundle completes only once
// its response, data is_last and the is_last of every timer family have
// all arrived, whichever comes last, with the timers the SDK set emitted.
func TestTimersEndInAnyOrder(t *testing.T) {
	_, stage, fw := startFakeWithTimers(t, []string{"f1", "f2"})
	for _, last := range []string{"response", "data", "f1", "f2"} {
		var mu sync.Mutex
		var timersOut []string
		b, err := stage.StartBundle(context.Background(), newCollector(t).emit, harness.WithTimerOutput(func(transformID, familyID string, data []byte) error {
			mu.Lock()
			defer mu.Unlock()
			timersOut = append(timersOut, transformID+"/"+familyID+":"+string(data))
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		req := fw.recvInstruction()
		inst := req.GetInstructionId()
		if err := b.Process([]byte("in1")); err != nil {
			t.Fatal(err)
		}
		if err := b.ProcessTimers("pardo", "f2", []byte("fired")); err != nil {
			t.Fatal(err)
		}
		if err := b.Process([]byte("in2")); err != nil {
			t.Fatal(err)
		}
		finished := make(chan error, 1)
		go func() {
			_, err := b.Finish()
			finished <- err
		}()
		msgs := fw.readInputMessages()
		if len(msgs) != 4 || string(msgs[0].GetData()[0].GetData()) != "in1" ||
			len(msgs[1].GetTimers()) != 1 || msgs[1].GetTimers()[0].GetTimerFamilyId() != "f2" || string(msgs[1].GetTimers()[0].GetTimers()) != "fired" ||
			string(msgs[2].GetData()[0].GetData()) != "in2" {
			t.Fatalf("SDK got input messages %v", msgs)
		}
		checkEndOfInput(t, msgs[3], inst, "f1", "f2")

		fw.sendTimers(inst, "f1", "set1", false)
		steps := map[string]func(){
			"response": func() {
				fw.respond(&fnpb.InstructionResponse{InstructionId: inst, Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{}}})
			},
			"data": func() { fw.sendOutput(inst, "", true) },
			"f1":   func() { fw.sendTimers(inst, "f1", "set2", true) },
			"f2":   func() { fw.sendTimers(inst, "f2", "", true) },
		}
		for _, name := range []string{"response", "data", "f1", "f2"} {
			if name != last {
				steps[name]()
			}
		}
		select {
		case err := <-finished:
			t.Fatalf("last=%s: Finish returned (%v) before the last end arrived", last, err)
		case <-time.After(100 * time.Millisecond):
		}
		steps[last]()
		if err := <-finished; err != nil {
			t.Fatalf("last=%s: Finish: %v", last, err)
		}
		mu.Lock()
		if got := strings.Join(timersOut, ","); got != "pardo/f1:set1,pardo/f1:set2" {
			t.Errorf("last=%s: timers emitted %q", last, got)
		}
		mu.Unlock()
	}
}

// TestAbortEndsTimerFamilies cancels a bundle of a stage with timer
// families: the SDK is told the input and every timer family ended, so its
// side of the bundle terminates.
func TestAbortEndsTimerFamilies(t *testing.T) {
	_, stage, fw := startFakeWithTimers(t, []string{"f1", "f2"})
	inst := startAndCancel(t, stage, fw)
	msgs := fw.readInputMessages()
	checkEndOfInput(t, msgs[len(msgs)-1], inst, "f1", "f2")
}

// startAndCancel starts a bundle of stage, gives it an input, cancels it
// and checks that Finish says so; it returns the bundle's instruction id.
func startAndCancel(t *testing.T, stage *harness.Stage, fw *fakeWorker) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := stage.StartBundle(ctx, newCollector(t).emit)
	if err != nil {
		t.Fatal(err)
	}
	inst := fw.recvInstruction().GetInstructionId()
	if err := b.Process([]byte("in")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := b.Finish(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Finish of a cancelled bundle: %v", err)
	}
	return inst
}

// TestAbortedBundles aborts bundles the SDK still runs: a state request of
// such a bundle is answered with an error saying the runner abandoned it
// (not that no such bundle exists), and the ids the data sender keeps to
// drop aborted bundles' queued input stay bounded however many bundles a
// job aborts.
func TestAbortedBundles(t *testing.T) {
	h, stage, fw := startFake(t)
	abort := func() string {
		t.Helper()
		inst := startAndCancel(t, stage, fw)
		fw.readInput()
		return inst
	}
	stateError := func(inst string) string {
		t.Helper()
		req := &fnpb.StateRequest{Id: "s-" + inst, InstructionId: inst,
			StateKey: &fnpb.StateKey{Type: &fnpb.StateKey_Runner_{Runner: &fnpb.StateKey_Runner{Key: []byte("k")}}},
			Request:  &fnpb.StateRequest_Get{Get: &fnpb.StateGetRequest{}}}
		if err := fw.state.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := fw.state.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetError()
	}

	inst := abort()
	if got := stateError(inst); !strings.Contains(got, "abandoned by the runner") {
		t.Errorf("state request of a bundle the SDK still runs after its abort: %q, want it to say the runner abandoned it", got)
	}
	fw.respond(&fnpb.InstructionResponse{InstructionId: inst, Error: "abandoned"})
	if got := stateError("no-such-bundle"); !strings.Contains(got, "no bundle \"no-such-bundle\" in flight") {
		t.Errorf("state request of an unknown bundle: %q", got)
	}

	// Each aborted bundle here sends one data message: after 2*AbortedKeep
	// of them the first ones must be forgotten.
	n := 2*harness.AbortedKeep + 10
	for range n {
		fw.respond(&fnpb.InstructionResponse{InstructionId: abort(), Error: "abandoned"})
	}
	if got := harness.AbortedRemembered(h); got > 2*harness.AbortedKeep {
		t.Errorf("after %d aborted bundles the workers keep %d of their ids, want at most %d", n+1, got, 2*harness.AbortedKeep)
	}
}
