package harness_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/harness"
)

// stopPool is a worker pool that reports each StopWorker, saying whether
// the worker had closed its control connection by then.
type stopPool struct {
	fnpb.UnimplementedBeamFnExternalWorkerPoolServer
	started    chan *fnpb.StartWorkerRequest
	stopped    chan bool // connClosed at the time of StopWorker
	connClosed atomic.Bool
}

func (p *stopPool) StartWorker(_ context.Context, req *fnpb.StartWorkerRequest) (*fnpb.StartWorkerResponse, error) {
	p.started <- req
	return &fnpb.StartWorkerResponse{}, nil
}

func (p *stopPool) StopWorker(context.Context, *fnpb.StopWorkerRequest) (*fnpb.StopWorkerResponse, error) {
	p.stopped <- p.connClosed.Load()
	return &fnpb.StopWorkerResponse{}, nil
}

// startStopPool starts a harness with an EXTERNAL environment on a
// stopPool whose one worker attaches a control stream on a connection of
// its own; it returns the stream and a function that closes that
// connection.
func startStopPool(t *testing.T, cfg harness.Config) (*harness.Harness, *stopPool, fnpb.BeamFnControl_ControlClient, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	pool := &stopPool{started: make(chan *fnpb.StartWorkerRequest, 1), stopped: make(chan bool, 1)}
	srv := grpc.NewServer()
	fnpb.RegisterBeamFnExternalWorkerPoolServer(srv, pool)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	h, err := harness.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	payload, _ := proto.Marshal(&pipepb.ExternalPayload{Endpoint: &pipepb.ApiServiceDescriptor{Url: lis.Addr().String()}})

	type attached struct {
		control fnpb.BeamFnControl_ControlClient
		conn    *grpc.ClientConn
		err     error
	}
	done := make(chan attached, 1)
	go func() {
		req := <-pool.started
		conn, err := grpc.NewClient(req.GetControlEndpoint().GetUrl(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			done <- attached{err: err}
			return
		}
		ctx := metadata.AppendToOutgoingContext(context.Background(), "worker_id", req.GetWorkerId())
		control, err := fnpb.NewBeamFnControlClient(conn).Control(ctx)
		done <- attached{control, conn, err}
	}()
	if err := h.StartEnvironment(context.Background(), "pool", &pipepb.Environment{Urn: harness.URNEnvExternal, Payload: payload}); err != nil {
		t.Fatalf("StartEnvironment: %v", err)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	closeConn := func() {
		pool.connClosed.Store(true)
		a.conn.Close()
	}
	t.Cleanup(closeConn)
	return h, pool, a.control, closeConn
}

// runUnansweredBundle registers a one-transform stage on the worker of
// control and starts a bundle on it, which the worker receives and leaves
// unanswered.
func runUnansweredBundle(t *testing.T, h *harness.Harness, control fnpb.BeamFnControl_ControlClient) *harness.Bundle {
	t.Helper()
	port, _ := proto.Marshal(&fnpb.RemoteGrpcPort{CoderId: "c"})
	desc := &fnpb.ProcessBundleDescriptor{Id: "stop", Transforms: map[string]*pipepb.PTransform{
		"in": {Spec: &pipepb.FunctionSpec{Urn: harness.URNDataSource, Payload: port}, Outputs: map[string]string{"o": "p1"}},
	}}
	staged := make(chan *harness.Stage, 1)
	go func() {
		stage, err := h.Stage(context.Background(), "pool", desc, "in", nil)
		if err != nil {
			t.Error(err)
		}
		staged <- stage
	}()
	reg, err := control.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := control.Send(&fnpb.InstructionResponse{InstructionId: reg.GetInstructionId(), Response: &fnpb.InstructionResponse_Register{Register: &fnpb.RegisterResponse{}}}); err != nil {
		t.Fatal(err)
	}
	stage := <-staged
	if stage == nil {
		t.FailNow()
	}
	b, err := stage.StartBundle(context.Background(), func(string, []byte) error { return nil })
	if err != nil {
		t.Fatalf("StartBundle: %v", err)
	}
	req, err := control.Recv()
	if err != nil || req.GetProcessBundle() == nil {
		t.Fatalf("the worker got %v, %v; want a ProcessBundleRequest", req, err)
	}
	return b
}

// closeUntilEOF starts h.Close and waits until it has ended the worker's
// control stream; the channel gets Close's result.
func closeUntilEOF(t *testing.T, h *harness.Harness, control fnpb.BeamFnControl_ControlClient) <-chan error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	if _, err := control.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("control stream after Close: Recv got %v, want EOF", err)
	}
	return closed
}

// TestStopWaitsForControlConnection: Close ends a worker's control stream
// and, while a bundle runs on the worker, stops the worker (StopWorker)
// only once the SDK has closed its control connection, as the Go SDK does
// when its control loop is done. Stopping it earlier races the bundle, if
// it ends on the worker's cancelled context, against that loop's shutdown
// (a data race in the Go SDK).
func TestStopWaitsForControlConnection(t *testing.T) {
	h, pool, control, closeConn := startStopPool(t, harness.Config{JobID: "stop", Logger: quietLogger(), StopGrace: time.Minute})
	runUnansweredBundle(t, h, control)
	closed := closeUntilEOF(t, h, control)
	// The harness has ended the stream; it must not stop the worker while
	// the SDK still holds the connection. Half a second is far longer than
	// a harness that does not wait takes to call StopWorker.
	select {
	case <-pool.stopped:
		t.Fatal("StopWorker came while the SDK still held its control connection")
	case <-time.After(500 * time.Millisecond):
	}
	closeConn()
	select {
	case connWasClosed := <-pool.stopped:
		if !connWasClosed {
			t.Error("StopWorker came before the control connection closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no StopWorker within 10s after the SDK closed its control connection (StopGrace is a minute)")
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestStopGraceBoundsTheWait: a worker running a bundle that keeps its
// control connection open after its control stream ended is stopped after
// StopGrace anyway.
func TestStopGraceBoundsTheWait(t *testing.T) {
	h, pool, control, _ := startStopPool(t, harness.Config{JobID: "stop", Logger: quietLogger(), StopGrace: 200 * time.Millisecond})
	runUnansweredBundle(t, h, control)
	closed := closeUntilEOF(t, h, control)
	select {
	case connWasClosed := <-pool.stopped:
		if connWasClosed {
			t.Error("the test closed the connection, so this does not test the grace")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no StopWorker within 10s of Close although the SDK kept its control connection open (StopGrace 200ms)")
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestStopIdleWorkerAtOnce: a worker with no bundle running (the one it
// ran answered) is stopped as soon as its control stream ends, without
// waiting for its connection: Python's worker pool keeps idle workers'
// connections open, and every job's end would otherwise wait StopGrace.
func TestStopIdleWorkerAtOnce(t *testing.T) {
	h, pool, control, _ := startStopPool(t, harness.Config{JobID: "stop", Logger: quietLogger(), StopGrace: time.Minute})
	b := runUnansweredBundle(t, h, control)
	if err := control.Send(&fnpb.InstructionResponse{InstructionId: b.ID(), Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Finish(); err != nil {
		t.Fatalf("Finish after the worker answered: %v", err)
	}
	closed := closeUntilEOF(t, h, control)
	select {
	case <-pool.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("no StopWorker within 10s of Close for an idle worker (StopGrace is a minute)")
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}
