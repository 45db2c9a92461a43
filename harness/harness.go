package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// DefaultConnectTimeout is how long StartEnvironment waits for a new SDK
// worker to connect its control stream when Config.ConnectTimeout is zero.
// The Go SDK itself gives up dialing control after 60s; booting a process
// environment can take a while (artifact staging), so allow a little more.
const DefaultConnectTimeout = 90 * time.Second

// DefaultStopTimeout bounds how long Close waits for a worker pool to
// acknowledge StopWorker when Config.StopTimeout is zero.
const DefaultStopTimeout = 10 * time.Second

// DefaultStopGrace bounds how long a worker's stop waits for the SDK to
// close its control connection when Config.StopGrace is zero. SDKs close
// it within milliseconds of seeing the control stream end.
const DefaultStopGrace = 2 * time.Second

// ErrClosed is returned (wrapped) by operations on a closed Harness and by
// bundles that were in flight when it closed.
var ErrClosed = errors.New("harness closed")

// Config configures one job's harness services.
type Config struct {
	// JobID and JobName identify the job to SDK workers (provision info) and
	// in log attributes.
	JobID, JobName string

	// PipelineOptions are served by the provision service; SDK workers read
	// their options from there.
	PipelineOptions *structpb.Struct

	// Logger receives the harness's own diagnostics, and SDK log entries when
	// OnLog is nil. Nil means slog.Default().
	Logger *slog.Logger

	// OnLog receives every log entry an SDK worker sends. It is called from
	// the logging stream's goroutine, so it should be quick. Nil means SDK
	// entries are written to Logger.
	OnLog func(*fnpb.LogEntry)

	// StateHandler serves the state requests of bundles that were not
	// started with their own (see WithStateHandler). Nil means every state
	// request fails with an error naming the state key type.
	StateHandler StateHandler

	// ConnectTimeout bounds how long StartEnvironment waits for the SDK
	// worker to connect its control stream. Zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration

	// StopTimeout bounds how long Close waits for a worker pool to answer
	// StopWorker and for a process environment to exit after SIGTERM before
	// it is killed. Zero means DefaultStopTimeout.
	StopTimeout time.Duration

	// StopGrace bounds how long stopping a worker that still runs a bundle
	// waits, after the harness ended the worker's control stream, for the
	// SDK to close its control connection before StopWorker or SIGTERM. An
	// idle worker is stopped at once. Zero means DefaultStopGrace.
	StopGrace time.Duration

	// ArtifactDir is the job's staging directory: the artifact retrieval
	// service serves a file artifact only if it is under it (and some
	// environment declared it). Empty: no file artifacts are served.
	ArtifactDir string

	// NoProcessEnvironments refuses to start PROCESS environments (also
	// as an ANYOF alternative): a process of this harness would run a
	// command the pipeline names.
	NoProcessEnvironments bool
}

// Harness serves the Fn API for one job and owns the SDK workers started for
// it. All methods are safe for concurrent use.
type Harness struct {
	cfg      Config
	logger   *slog.Logger
	endpoint string // host:port workers dial; also filled into descriptors

	// ctx is cancelled by Close; it bounds every goroutine and environment.
	ctx    context.Context
	cancel context.CancelFunc
	server *grpc.Server
	wg     sync.WaitGroup // every goroutine the harness starts

	nextID atomic.Uint64 // instruction, descriptor and worker ids
	// tag is random per harness and part of its worker ids: several
	// processes (a job server and `ksrunner worker`s) may start workers in
	// one SDK worker pool, which keys its workers by id.
	tag string

	mu      sync.Mutex
	closed  bool
	envs    map[string]*environment // by environment id
	workers map[string]*worker      // by worker id, for routing RPCs
	// starting counts StartWorker calls in flight (Add under mu while not
	// closed). Close waits for them before it stops the server: the Go
	// SDK's pool fetches the provision info while it holds the lock every
	// StartWorker takes, dialing for up to two minutes, so an endpoint
	// gone mid-call holds up every later start on that pool, for every
	// job that uses it.
	starting sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// Start opens the harness's gRPC server on a free loopback port and serves
// the control, data, state, logging, provision and artifact retrieval
// services on it until Close. ctx bounds only the start-up itself.
func Start(ctx context.Context, cfg Config) (*Harness, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("harness for job %q: %w", cfg.JobID, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.StateHandler == nil {
		cfg.StateHandler = UnsupportedState{}
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", "localhost:0")
	if err != nil {
		return nil, fmt.Errorf("harness for job %q: listening on loopback: %w", cfg.JobID, err)
	}
	rootCtx, cancel := context.WithCancelCause(context.Background())
	h := &Harness{
		cfg:      cfg,
		logger:   cfg.Logger.With(slog.String("job", cfg.JobID)),
		endpoint: lis.Addr().String(),
		ctx:      rootCtx,
		cancel:   func() { cancel(ErrClosed) },
		envs:     make(map[string]*environment),
		workers:  make(map[string]*worker),
		tag:      randomTag(),
	}
	h.server = grpc.NewServer(
		// SDKs send and accept messages far above gRPC's 4MB default (the Go
		// SDK dials with MaxCallRecvMsgSize(MaxInt32)); so do we.
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
		// Stop must not return while a handler still runs: Close promises
		// that every goroutine has exited.
		grpc.WaitForHandlers(true),
		// The Python SDK pings its streams every 20s, idle or not; gRPC's
		// default policy (at most every 5 minutes) answers that with
		// GOAWAY too_many_pings and the worker is lost.
		grpc.KeepaliveEnforcementPolicy(sdkKeepalive),
		// Tells a worker's stop when the SDK has let go of its control
		// connection (see worker.stop).
		grpc.StatsHandler(connWatch{}),
	)
	services := &services{h: h}
	fnpb.RegisterBeamFnControlServer(h.server, services)
	fnpb.RegisterBeamFnDataServer(h.server, services)
	fnpb.RegisterBeamFnStateServer(h.server, services)
	fnpb.RegisterBeamFnLoggingServer(h.server, services)
	fnpb.RegisterProvisionServiceServer(h.server, services)
	jobpb.RegisterArtifactRetrievalServiceServer(h.server, &artifactService{h: h})

	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		// Serve returns when the server stops; any other error leaves the
		// harness unusable, which workers notice as failed connections.
		if err := h.server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			h.logger.Error("fn api server stopped", slog.Any("error", err))
		}
	}()
	h.logger.Debug("fn api server started", slog.String("endpoint", h.endpoint))
	return h, nil
}

// Endpoint is the host:port of the harness's gRPC server, as given to SDK
// workers for every service.
// sdkKeepalive admits the SDKs' keepalive pings (Python: every 20s, with
// or without active streams).
var sdkKeepalive = keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}

func (h *Harness) Endpoint() string { return h.endpoint }

func (h *Harness) apiDescriptor() *pipepb.ApiServiceDescriptor {
	return &pipepb.ApiServiceDescriptor{Url: h.endpoint}
}

// Close stops every SDK worker (StopWorker on pools, SIGTERM then kill for
// processes), fails bundles still in flight with ErrClosed, stops the
// server and waits for every goroutine of the harness to exit. It is safe
// to call more than once.
func (h *Harness) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		workers := make([]*worker, 0, len(h.workers))
		for _, w := range h.workers {
			workers = append(workers, w)
		}
		h.mu.Unlock()

		// Fail the workers first, so bundles in flight report ErrClosed
		// rather than whatever the stopping workers' streams say; then stop
		// their environments while the server still answers, so SDK workers
		// see an orderly shutdown.
		for _, w := range workers {
			w.fail(fmt.Errorf("worker %s: %w", w.id, ErrClosed))
		}
		var errs []error
		for _, w := range workers {
			if err := w.stop(); err != nil {
				errs = append(errs, err)
			}
		}
		h.starting.Wait() // each bounded by ConnectTimeout
		// Let the stopped workers close their own streams: cutting them
		// from this side sends the SDK down its reconnection path (which
		// logs spurious warnings, and in the Go SDK races). Workers that
		// do not go within StopTimeout are cut off.
		stopped := make(chan struct{})
		go func() {
			h.server.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(h.cfg.StopTimeout):
			h.server.Stop()
			<-stopped
		}
		h.cancel()
		h.wg.Wait()
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// randomTag returns 8 random hex digits.
func randomTag() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newID returns a harness-unique id with a readable prefix.
func (h *Harness) newID(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, h.nextID.Add(1))
}

// goOwned starts fn as a goroutine owned by the harness: Close waits for it.
func (h *Harness) goOwned(fn func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fn()
	}()
}

// workerFromContext finds the worker named by the "worker_id" metadata of an
// incoming RPC.
func (h *Harness) workerFromContext(ctx context.Context) (*worker, error) {
	id := workerIDFromContext(ctx)
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, `missing "worker_id" in gRPC metadata`)
	}
	h.mu.Lock()
	w, ok := h.workers[id]
	h.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown worker_id %q (not started by this harness, or already stopped)", id)
	}
	return w, nil
}

func workerIDFromContext(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	if ids := md.Get("worker_id"); len(ids) > 0 {
		return ids[0]
	}
	return ""
}
