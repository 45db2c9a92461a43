package status

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	// Addr is where it listens ("host:port"; port 0 picks one).
	Addr string
	// Middleware, if set, wraps every handler (authentication, for one).
	Middleware func(http.Handler) http.Handler
	// TLS, if set, serves HTTPS with it.
	TLS *tls.Config
	// Listener, if set, is where it serves, instead of listening on Addr;
	// HTTPS says the listener already speaks TLS (for the page's URL).
	// Start takes it over: Close closes it.
	Listener net.Listener
	HTTPS    bool
	Logger   *slog.Logger
}

// Server serves the status page, its JSON API and /metrics. Start starts
// it; Close stops it and waits for its goroutine.
type Server struct {
	src    Source
	lis    net.Listener
	srv    *http.Server
	scheme string
	done   chan struct{}
	err    error
}

// actionHeader must be on the POSTs (Cancel, Drain): a page of another
// origin cannot send it without the browser asking first (CORS
// preflight, which this server does not answer), so it cannot make a
// visitor's browser cancel jobs.
const actionHeader = "X-Ksrunner-Action"

// Start listens on opts.Addr and serves until Close.
func Start(src Source, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	lis := opts.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", opts.Addr); err != nil {
			return nil, fmt.Errorf("status page: listen on %s: %w", opts.Addr, err)
		}
	}
	s := &Server{src: src, lis: lis, scheme: "http", done: make(chan struct{})}
	if opts.HTTPS {
		s.scheme = "https"
	}
	var h http.Handler = s.routes()
	if opts.Middleware != nil {
		h = opts.Middleware(h)
	}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: opts.TLS,
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)}
	if opts.TLS != nil {
		s.scheme = "https"
	}
	go func() {
		defer close(s.done)
		var err error
		if opts.TLS != nil {
			err = s.srv.ServeTLS(lis, "", "")
		} else {
			err = s.srv.Serve(lis)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			s.err = err
			opts.Logger.Error("status page server stopped", "error", err)
		}
	}()
	return s, nil
}

// Addr is the address it listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// URL is the status page's address.
func (s *Server) URL() string { return s.scheme + "://" + s.Addr() + "/" }

// Close stops serving (requests in progress get a few seconds) and waits.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
	return s.err
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.Handle("GET /", files)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /api/jobs", s.listJobs)
	mux.HandleFunc("GET /api/jobs/{id}", s.getJob)
	mux.HandleFunc("POST /api/jobs/{id}/cancel", s.action(s.src.Cancel))
	mux.HandleFunc("POST /api/jobs/{id}/drain", s.action(s.src.Drain))
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(s.src),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// healthz is a liveness probe: the process answers.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz is a readiness probe: 503 while a job of the process has not yet
// started consuming (STOPPED, STARTING: its topics, group membership and
// store are being set up), naming it; else 200. A process without jobs (a
// job server awaiting submissions, a worker awaiting its application's
// pipeline) is ready, and so is one whose jobs ended.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var running int
	for _, j := range s.src.Summaries() {
		switch j.State {
		case "STOPPED", "STARTING":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: job %s (%s) of application %s is %s\n", j.ID, j.Name, j.ApplicationID, j.State)
			return
		case "RUNNING", "DRAINING":
			running++
		}
	}
	fmt.Fprintf(w, "ready: %d jobs running\n", running)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	jobs := s.src.Jobs(r.Context())
	out := make([]JobSummary, len(jobs))
	for i, j := range jobs {
		out[i] = j.summary()
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, j := range s.src.Jobs(r.Context()) {
		if j.ID == id {
			writeJSON(w, http.StatusOK, j)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no job %q", id)})
}

func (s *Server) action(do func(id string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(actionHeader) == "" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "missing header " + actionHeader + " (sent by the status page)"})
			return
		}
		err := do(r.PathValue("id"))
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, map[string]string{"result": "ok"})
		case errors.Is(err, ErrNotFound):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case errors.Is(err, ErrConflict):
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		case errors.Is(err, ErrUnsupported):
			writeJSON(w, http.StatusNotImplemented, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
