package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// Environment URNs the harness understands.
const (
	URNEnvExternal = "beam:env:external:v1"
	URNEnvProcess  = "beam:env:process:v1"
	URNEnvDocker   = "beam:env:docker:v1"
	URNEnvAnyOf    = "beam:env:anyof:v1"
)

// environment is the state of one environment id: being started (ready
// open) or started, successfully (w) or not (err).
type environment struct {
	ready chan struct{}
	w     *worker
	err   error
}

// StartEnvironment starts an SDK worker for env under envID and waits until
// it connects its control stream (at most Config.ConnectTimeout).
//
// It is idempotent per envID: concurrent and later calls share the first
// call's worker and outcome, except that a call after the worker was lost
// starts a replacement. Stages already built on a lost worker stay failed;
// build them again with Stage.
//
// Supported: beam:env:external:v1 (StartWorker on the BeamFnExternalWorkerPool
// of the payload's endpoint; the Go SDK's LOOPBACK mode sends this),
// beam:env:process:v1 (runs the payload's command with the flags of the Beam
// boot contract: --id, --control_endpoint, --logging_endpoint,
// --artifact_endpoint, --provision_endpoint) and beam:env:anyof:v1 (the
// first supported alternative, preferring external, then process).
// beam:env:docker:v1 is refused: Docker is not available here.
func (h *Harness) StartEnvironment(ctx context.Context, envID string, env *pipepb.Environment) error {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return fmt.Errorf("starting environment %q: %w", envID, ErrClosed)
		}
		e := h.envs[envID]
		if e == nil || (isClosed(e.ready) && e.err == nil && e.w.isLost()) {
			e = &environment{ready: make(chan struct{})}
			h.envs[envID] = e
			h.mu.Unlock()
			e.w, e.err = h.launch(ctx, envID, env)
			if e.err != nil {
				// Forget the failure so a later call can try again (for
				// example after a transient pool outage); concurrent
				// waiters still see it.
				h.mu.Lock()
				if h.envs[envID] == e {
					delete(h.envs, envID)
				}
				h.mu.Unlock()
			}
			close(e.ready)
			return e.err
		}
		h.mu.Unlock()
		select {
		case <-e.ready:
			if e.err != nil {
				return e.err
			}
			if !e.w.isLost() {
				return nil
			}
			// Lost since: loop to start a replacement.
		case <-ctx.Done():
			return fmt.Errorf("starting environment %q: %w", envID, context.Cause(ctx))
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// workerFor returns the connected worker of a started environment.
func (h *Harness) workerFor(envID string) (*worker, error) {
	h.mu.Lock()
	e := h.envs[envID]
	closed := h.closed
	h.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case e == nil || !isClosed(e.ready):
		return nil, fmt.Errorf("environment %q is not started: call StartEnvironment first", envID)
	case e.err != nil:
		return nil, fmt.Errorf("environment %q failed to start: %w", envID, e.err)
	case e.w.isLost():
		return nil, fmt.Errorf("environment %q: worker %s lost: %w", envID, e.w.id, e.w.err())
	}
	return e.w, nil
}

// launch starts a worker for env and waits for its control stream.
func (h *Harness) launch(ctx context.Context, envID string, env *pipepb.Environment) (*worker, error) {
	if env == nil {
		return nil, fmt.Errorf("environment %q: nil environment", envID)
	}
	switch env.GetUrn() {
	case URNEnvAnyOf:
		var anyOf pipepb.AnyOfEnvironmentPayload
		if err := proto.Unmarshal(env.GetPayload(), &anyOf); err != nil {
			return nil, fmt.Errorf("environment %q: decoding %s payload: %w", envID, URNEnvAnyOf, err)
		}
		chosen, err := chooseAnyOf(envID, anyOf.GetEnvironments(), !h.cfg.NoProcessEnvironments)
		if err != nil {
			return nil, err
		}
		h.logger.Debug("anyof environment resolved", slog.String("env", envID), slog.String("urn", chosen.GetUrn()))
		return h.launch(ctx, envID, chosen)
	case URNEnvExternal:
		var payload pipepb.ExternalPayload
		if err := proto.Unmarshal(env.GetPayload(), &payload); err != nil {
			return nil, fmt.Errorf("environment %q: decoding %s payload: %w", envID, URNEnvExternal, err)
		}
		return h.launchExternal(ctx, envID, env, &payload)
	case URNEnvProcess:
		var payload pipepb.ProcessPayload
		if err := proto.Unmarshal(env.GetPayload(), &payload); err != nil {
			return nil, fmt.Errorf("environment %q: decoding %s payload: %w", envID, URNEnvProcess, err)
		}
		if h.cfg.NoProcessEnvironments {
			return nil, fmt.Errorf("environment %q is a PROCESS environment (command %q), and PROCESS environments are off here (option allow_process_environments)", envID, payload.GetCommand())
		}
		return h.launchProcess(ctx, envID, env, &payload)
	case URNEnvDocker:
		return nil, fmt.Errorf("environment %q uses %s, but Docker is not available here: "+
			"run the pipeline with a LOOPBACK, EXTERNAL or PROCESS environment", envID, URNEnvDocker)
	default:
		return nil, fmt.Errorf("environment %q: unsupported environment URN %q", envID, env.GetUrn())
	}
}

func chooseAnyOf(envID string, envs []*pipepb.Environment, process bool) (*pipepb.Environment, error) {
	var urns []string
	preference := []string{URNEnvExternal}
	if process {
		preference = append(preference, URNEnvProcess)
	}
	for _, preferred := range preference {
		for _, e := range envs {
			if e.GetUrn() == preferred {
				return e, nil
			}
		}
	}
	for _, e := range envs {
		urns = append(urns, e.GetUrn())
	}
	if !process {
		return nil, fmt.Errorf("environment %q: none of the %s alternatives %q is supported here (need %s; %s is off, option allow_process_environments)",
			envID, URNEnvAnyOf, urns, URNEnvExternal, URNEnvProcess)
	}
	return nil, fmt.Errorf("environment %q: none of the %s alternatives %q is supported here (need %s or %s)",
		envID, URNEnvAnyOf, urns, URNEnvExternal, URNEnvProcess)
}

// register makes w reachable by its worker id; call before the worker can
// dial in.
func (h *Harness) register(w *worker) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.workers[w.id] = w
	return nil
}

func (h *Harness) launchExternal(ctx context.Context, envID string, env *pipepb.Environment, payload *pipepb.ExternalPayload) (*worker, error) {
	poolURL := payload.GetEndpoint().GetUrl()
	if poolURL == "" {
		return nil, fmt.Errorf("environment %q: %s payload has no worker pool endpoint", envID, URNEnvExternal)
	}
	conn, err := grpc.NewClient(poolURL, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("environment %q: dialing worker pool %s: %w", envID, poolURL, err)
	}
	pool := fnpb.NewBeamFnExternalWorkerPoolClient(conn)
	w := h.newWorker(envID, env)
	w.stopEnv = func(ctx context.Context) error {
		defer conn.Close()
		resp, err := pool.StopWorker(ctx, &fnpb.StopWorkerRequest{WorkerId: w.id})
		if err != nil {
			return fmt.Errorf("StopWorker on pool %s: %w", poolURL, err)
		}
		if resp.GetError() != "" {
			return fmt.Errorf("StopWorker on pool %s: %s", poolURL, resp.GetError())
		}
		return nil
	}
	if err := h.register(w); err != nil {
		conn.Close()
		return nil, fmt.Errorf("starting environment %q: %w", envID, err)
	}
	endpoint := h.apiDescriptor()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		conn.Close()
		return nil, fmt.Errorf("starting environment %q: %w", envID, ErrClosed)
	}
	h.starting.Add(1)
	h.mu.Unlock()
	// Not cancelled with ctx: the pool's work for this call goes on after a
	// cancelled client gives up on it (the Go SDK's reads this harness's
	// provision endpoint), and Close waits for it (Harness.starting).
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.ConnectTimeout)
	defer cancel()
	resp, err := pool.StartWorker(startCtx, &fnpb.StartWorkerRequest{
		WorkerId:          w.id,
		ControlEndpoint:   endpoint,
		LoggingEndpoint:   endpoint,
		ArtifactEndpoint:  endpoint,
		ProvisionEndpoint: endpoint,
		Params:            payload.GetParams(),
	})
	h.starting.Done()
	if err == nil && resp.GetError() != "" {
		err = errors.New(resp.GetError())
	}
	if err != nil {
		// The pool never started it: nothing to stop but the connection.
		w.stopOnce.Do(func() { conn.Close() })
		startErr := fmt.Errorf("environment %q: StartWorker %s on pool %s: %w", envID, w.id, poolURL, err)
		w.fail(startErr)
		return nil, startErr
	}
	return w, h.awaitConnect(ctx, w)
}

func (h *Harness) launchProcess(ctx context.Context, envID string, env *pipepb.Environment, payload *pipepb.ProcessPayload) (*worker, error) {
	if payload.GetCommand() == "" {
		return nil, fmt.Errorf("environment %q: %s payload has no command", envID, URNEnvProcess)
	}
	w := h.newWorker(envID, env)
	endpoint := h.endpoint
	cmd := exec.Command(payload.GetCommand(),
		"--id="+w.id,
		"--control_endpoint="+endpoint,
		"--logging_endpoint="+endpoint,
		"--artifact_endpoint="+endpoint,
		"--provision_endpoint="+endpoint,
	)
	cmd.Env = os.Environ()
	for _, k := range slices.Sorted(maps.Keys(payload.GetEnv())) {
		cmd.Env = append(cmd.Env, k+"="+payload.GetEnv()[k])
	}
	cmd.Stdout = &lineLogger{logger: w.logger, stream: "stdout"}
	cmd.Stderr = &lineLogger{logger: w.logger, stream: "stderr"}
	// Output pipes held open by grandchildren must not keep Wait (and so
	// Close) blocked once the process itself has exited.
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)

	exited := make(chan struct{})
	w.stopEnv = func(ctx context.Context) error {
		if cmd.Process == nil {
			return nil
		}
		terminate(cmd) // the boot program starts the SDK as a child: signal the group
		select {
		case <-exited:
			return nil
		case <-ctx.Done():
			kill(cmd)
			<-exited
			return nil
		}
	}
	if err := h.register(w); err != nil {
		return nil, fmt.Errorf("starting environment %q: %w", envID, err)
	}
	if err := cmd.Start(); err != nil {
		close(exited)
		startErr := fmt.Errorf("environment %q: starting %s: %w", envID, payload.GetCommand(), err)
		w.fail(startErr)
		return nil, startErr
	}
	w.logger.Debug("process started", slog.String("command", cmd.String()), slog.Int("pid", cmd.Process.Pid))
	h.goOwned(func() {
		err := cmd.Wait()
		close(exited)
		if err == nil {
			err = errors.New("exit status 0")
		}
		w.fail(fmt.Errorf("process %s of environment %q exited: %w", payload.GetCommand(), envID, err))
	})
	return w, h.awaitConnect(ctx, w)
}

// awaitConnect waits for w's control stream. On failure the worker is
// failed and stopped before returning, so nothing lingers.
func (h *Harness) awaitConnect(ctx context.Context, w *worker) error {
	timer := time.NewTimer(h.cfg.ConnectTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-w.connected:
		return nil
	case <-w.lost:
		err = fmt.Errorf("environment %q: worker %s was lost before connecting: %w", w.envID, w.id, w.err())
	case <-timer.C:
		err = fmt.Errorf("environment %q: SDK worker %s did not connect its control stream to %s within %v",
			w.envID, w.id, h.endpoint, h.cfg.ConnectTimeout)
	case <-ctx.Done():
		err = fmt.Errorf("environment %q: waiting for worker %s to connect: %w", w.envID, w.id, context.Cause(ctx))
	case <-h.ctx.Done():
		err = fmt.Errorf("environment %q: %w", w.envID, ErrClosed)
	}
	w.fail(err)
	if stopErr := w.stop(); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	return err
}

// lineLogger logs a process's output line by line.
type lineLogger struct {
	logger *slog.Logger
	stream string
	mu     sync.Mutex
	buf    []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.logger.Info(string(l.buf[:i]), slog.String("stream", l.stream))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a runaway line: log it in pieces
		l.logger.Info(string(l.buf), slog.String("stream", l.stream))
		l.buf = nil
	}
	return len(p), nil
}
