package harness_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

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
}

// startFake starts a harness whose environment "fake" is a worker the
// test plays, and registers a one-sink stage on it.
func startFake(t *testing.T) (*harness.Harness, *harness.Stage, *fakeWorker) {
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
		fw.data, err = fnpb.NewBeamFnDataClient(conn).Data(wctx)
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
	staged := make(chan *harness.Stage, 1)
	go func() {
		stage, err := h.Stage(context.Background(), "fake", desc, "in", map[string]string{"out": "p1"})
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
			ResidualRoots: []*fnpb.DelayedBundleApplication{{Application: &fnpb.BundleApplication{TransformId: "t", InputId: "i", Element: []byte("rest")}}},
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
		if len(res.Residuals) != 1 || string(res.Residuals[0].Element) != "rest" || res.Residuals[0].TransformID != "t" {
			t.Errorf("residuals %+v", res.Residuals)
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
