package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// FollowConfig is how Follow runs an application's job.
type FollowConfig struct {
	// Poll is how often the manifest is read; zero: one second.
	Poll time.Duration
	// Retry is how long after a failed run the same pipeline is run again;
	// zero: ten seconds.
	Retry time.Duration
	// Run runs the job until it is done (nil), ctx ends, or it fails.
	Run    func(ctx context.Context, m *Manifest, s *Spec) error
	Logger *slog.Logger
	// Unavailable is how long the manifest may stay unread (its brokers
	// out of reach, or any other failure to read it) before Follow fails,
	// naming the topic and brokers: the option
	// broker_unavailable_timeout_ms, which bounds every other wait for the
	// brokers. Each read is bounded by what is left of it, not by
	// franz-go's own retry limit (30 s). Zero: Follow never gives up.
	Unavailable time.Duration
}

// ErrEnded is the cause of the context of a job Follow runs when the
// application was cancelled or is done: the job ends in every process
// (unlike when this process stops, or another pipeline replaces it).
var ErrEnded = errors.New("the application was cancelled or is done")

// run is one run of the application's job by Follow.
type run struct {
	fp     string
	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error
}

// Follow runs the application's job in this process as long as ctx lasts:
// it starts the job when the manifest says the application runs, stops it
// when the manifest says it was cancelled or done, or names another
// pipeline (and then runs that one), and runs a failed job again after
// Retry. A job that is done, or that this ksrunner refused for its layout
// (LayoutError), is not run again until the manifest changes.
// It returns when ctx ends (nil) or the manifest could not be read for
// cfg.Unavailable (an error naming the topic, its brokers and the option),
// after the job it runs has stopped.
func Follow(ctx context.Context, t *Topic, cfg FollowConfig) error {
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 10 * time.Second
	}
	log := cfg.Logger.With("application_id", t.appID, "topic", t.name)
	var (
		cur       *run
		finished  string       // the fingerprint of a run that ended done
		refused   string       // the fingerprint of a run refused for its layout
		failedAt  time.Time    // when the last run failed
		lastState string       // the last state logged, to log changes once
		readErr   bool         // a manifest read failed; logged once until one succeeds
		readOK    = time.Now() // the last manifest read that succeeded (or Follow's start)
	)
	stop := func(why string, cause error) {
		if cur == nil {
			return
		}
		log.Info("stopping the job: "+why, "fingerprint", cur.fp)
		cur.cancel(cause)
		<-cur.done
		cur = nil
	}
	defer stop("the process stops", context.Canceled)
	tick := time.NewTicker(cfg.Poll)
	defer tick.Stop()
	for {
		if cur != nil {
			select {
			case <-cur.done:
				var layout *LayoutError
				switch {
				case errors.As(cur.err, &layout):
					// Running it again cannot help: this ksrunner lays
					// the pipeline out otherwise for as long as it runs.
					log.Error("this ksrunner cannot run the application's job; waiting for another pipeline", "error", cur.err)
					refused = cur.fp
				case cur.err != nil:
					log.Error("the job failed; running it again", "error", cur.err, "after", cfg.Retry)
					failedAt = time.Now()
				default:
					log.Info("the job is done; waiting for the next pipeline", "fingerprint", cur.fp)
					finished = cur.fp
				}
				cur = nil
			default:
			}
		}
		m, err := t.readManifest(ctx, readOK, cfg.Unavailable)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if down := time.Since(readOK); cfg.Unavailable > 0 && down >= cfg.Unavailable {
				return fmt.Errorf("cannot read the pipeline topic %s on the Kafka brokers %s for %v (option broker_unavailable_timeout_ms %d): %w",
					t.name, t.brokers, down.Round(100*time.Millisecond), cfg.Unavailable.Milliseconds(), err)
			}
			if !readErr {
				log.Warn("reading the pipeline topic (retrying)", "error", err)
			}
			readErr = true
		default:
			readErr, readOK = false, time.Now()
			state := "no pipeline yet"
			if m != nil {
				state = fmt.Sprintf("job %s (%s) %s, fingerprint %s", m.JobID, m.JobName, m.State, m.Fingerprint)
			}
			if state != lastState {
				log.Info("pipeline topic: " + state)
				lastState = state
			}
			switch {
			case m == nil || m.State != Running:
				stop("the application is not running", ErrEnded)
				finished = ""
			case cur != nil && cur.fp != m.Fingerprint:
				stop("another pipeline replaced it", context.Canceled)
			}
			if cur == nil && m != nil && m.State == Running && m.Fingerprint != finished && m.Fingerprint != refused && time.Since(failedAt) >= cfg.Retry {
				cur, err = start(ctx, t, m.Fingerprint, cfg, log)
				if err != nil {
					log.Error("loading the job from the pipeline topic (retrying)", "error", err)
					failedAt = time.Now()
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// readManifest is Manifest, given up at readOK + unavailable (zero: only
// when ctx ends).
func (t *Topic) readManifest(ctx context.Context, readOK time.Time, unavailable time.Duration) (*Manifest, error) {
	if unavailable <= 0 {
		return t.Manifest(ctx)
	}
	ctx, cancel := context.WithDeadline(ctx, readOK.Add(unavailable))
	defer cancel()
	return t.Manifest(ctx)
}

// start loads the job of fingerprint fp and runs it in a goroutine owned by
// the returned run.
func start(ctx context.Context, t *Topic, fp string, cfg FollowConfig, log *slog.Logger) (*run, error) {
	lctx, lcancel := ctx, context.CancelFunc(func() {})
	if cfg.Unavailable > 0 {
		lctx, lcancel = context.WithTimeout(ctx, cfg.Unavailable)
	}
	m, s, err := t.Load(lctx)
	lcancel()
	if err != nil {
		return nil, err
	}
	if m == nil || m.Fingerprint != fp || m.State != Running {
		return nil, nil // changed meanwhile: the next poll sees it
	}
	log.Info("running the job", "job", m.JobID, "name", m.JobName, "fingerprint", fp)
	rctx, cancel := context.WithCancelCause(ctx)
	r := &run{fp: fp, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = cfg.Run(rctx, m, s)
		if rctx.Err() != nil {
			r.err = nil // stopped, not failed
		}
	}()
	return r, nil
}
