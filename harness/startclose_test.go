package harness_test

import (
	"context"
	"net"
	"testing"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/harness"
)

// provisioningPool is a worker pool that, like the Go SDK's LOOPBACK pool,
// reads the provision info from the request's endpoint before StartWorker
// returns, and goes on doing so after its caller gave up on the call.
type provisioningPool struct {
	fnpb.UnimplementedBeamFnExternalWorkerPoolServer
	delay       time.Duration
	provisioned chan error
}

func (p *provisioningPool) StartWorker(_ context.Context, req *fnpb.StartWorkerRequest) (*fnpb.StartWorkerResponse, error) {
	time.Sleep(p.delay)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(req.GetProvisionEndpoint().GetUrl(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		_, err = fnpb.NewProvisionServiceClient(conn).GetProvisionInfo(ctx, &fnpb.GetProvisionInfoRequest{}, grpc.WaitForReady(true))
		conn.Close()
	}
	p.provisioned <- err
	return &fnpb.StartWorkerResponse{}, nil
}

func (p *provisioningPool) StopWorker(context.Context, *fnpb.StopWorkerRequest) (*fnpb.StopWorkerResponse, error) {
	return &fnpb.StopWorkerResponse{}, nil
}

// TestCloseWaitsForStartWorker: a job cancelled while its worker starts,
// and its harness closed at once, must leave the harness serving until
// the pool's StartWorker is done with it. The Go SDK's pool reads the
// provision endpoint under a lock every StartWorker takes, dialing for two
// minutes, so an endpoint gone mid-call held up every later job on that
// pool (ci42: four e2e tests failed, StartWorker DeadlineExceeded).
func TestCloseWaitsForStartWorker(t *testing.T) {
	lis, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	pool := &provisioningPool{delay: 300 * time.Millisecond, provisioned: make(chan error, 1)}
	srv := grpc.NewServer()
	fnpb.RegisterBeamFnExternalWorkerPoolServer(srv, pool)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	h, err := harness.Start(context.Background(), harness.Config{JobID: "startclose", Logger: quietLogger(), ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := proto.Marshal(&pipepb.ExternalPayload{Endpoint: &pipepb.ApiServiceDescriptor{Url: lis.Addr().String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.StartEnvironment(ctx, "env", &pipepb.Environment{Urn: harness.URNEnvExternal, Payload: payload}); err == nil {
		t.Error("StartEnvironment succeeded; the worker never connects")
	}
	h.Close()
	select {
	case err := <-pool.provisioned:
		if err != nil {
			t.Errorf("the pool could not read the provision info of a start in flight when the harness closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pool's StartWorker never ran")
	}
}
