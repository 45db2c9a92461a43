package harness

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// services implements the Fn API gRPC services of a Harness, routing
// worker-scoped calls to the worker named in their metadata.
type services struct {
	fnpb.UnimplementedBeamFnControlServer
	fnpb.UnimplementedBeamFnDataServer
	fnpb.UnimplementedBeamFnStateServer
	fnpb.UnimplementedBeamFnLoggingServer
	fnpb.UnimplementedProvisionServiceServer

	h *Harness
}

func (s *services) Control(stream fnpb.BeamFnControl_ControlServer) error {
	w, err := s.h.workerFromContext(stream.Context())
	if err != nil {
		return err
	}
	return w.serveControl(stream)
}

func (s *services) GetProcessBundleDescriptor(ctx context.Context, req *fnpb.GetProcessBundleDescriptorRequest) (*fnpb.ProcessBundleDescriptor, error) {
	w, err := s.h.workerFromContext(ctx)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	desc, ok := w.descriptors[req.GetProcessBundleDescriptorId()]
	w.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "worker %s: no process bundle descriptor %q registered", w.id, req.GetProcessBundleDescriptorId())
	}
	return desc, nil
}

func (s *services) Data(stream fnpb.BeamFnData_DataServer) error {
	w, err := s.h.workerFromContext(stream.Context())
	if err != nil {
		return err
	}
	return w.serveData(stream)
}

func (s *services) State(stream fnpb.BeamFnState_StateServer) error {
	w, err := s.h.workerFromContext(stream.Context())
	if err != nil {
		return err
	}
	return w.serveState(stream)
}

// Logging accepts log streams from any caller: a worker may open its logging
// stream before anything else, and losing its logs would hide why it failed.
func (s *services) Logging(stream fnpb.BeamFnLogging_LoggingServer) error {
	workerID := workerIDFromContext(stream.Context())
	for {
		list, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		for _, entry := range list.GetLogEntries() {
			if s.h.cfg.OnLog != nil {
				s.h.cfg.OnLog(entry)
				continue
			}
			s.h.logger.LogAttrs(stream.Context(), slogLevel(entry.GetSeverity()), "[SDK] "+entry.GetMessage(),
				slog.String("worker", workerID),
				slog.String("transform", entry.GetTransformId()),
				slog.String("location", entry.GetLogLocation()),
				slog.String("trace", entry.GetTrace()))
		}
	}
}

func slogLevel(sev fnpb.LogEntry_Severity_Enum) slog.Level {
	switch sev {
	case fnpb.LogEntry_Severity_TRACE:
		return slog.LevelDebug - 4
	case fnpb.LogEntry_Severity_DEBUG:
		return slog.LevelDebug
	case fnpb.LogEntry_Severity_NOTICE:
		return slog.LevelInfo + 2
	case fnpb.LogEntry_Severity_WARN:
		return slog.LevelWarn
	case fnpb.LogEntry_Severity_ERROR:
		return slog.LevelError
	case fnpb.LogEntry_Severity_CRITICAL:
		return slog.LevelError + 4
	default:
		return slog.LevelInfo
	}
}

// GetProvisionInfo tells a worker its job, options, endpoints and the
// artifacts of its environment. A caller without worker_id metadata gets the
// job-wide part only.
func (s *services) GetProvisionInfo(ctx context.Context, _ *fnpb.GetProvisionInfoRequest) (*fnpb.GetProvisionInfoResponse, error) {
	var deps []*pipepb.ArtifactInformation
	if workerIDFromContext(ctx) != "" {
		w, err := s.h.workerFromContext(ctx)
		if err != nil {
			return nil, err
		}
		deps = w.env.GetDependencies()
	}
	options := s.h.cfg.PipelineOptions
	if options == nil {
		options = &structpb.Struct{}
	}
	endpoint := s.h.apiDescriptor()
	return &fnpb.GetProvisionInfoResponse{Info: &fnpb.ProvisionInfo{
		PipelineOptions:    options,
		RetrievalToken:     s.h.cfg.JobID,
		Dependencies:       deps,
		LoggingEndpoint:    endpoint,
		ControlEndpoint:    endpoint,
		ArtifactEndpoint:   endpoint,
		RunnerCapabilities: nil, // full MonitoringInfos, no short ids: see Result.MonitoringInfos.
		Metadata: map[string]string{
			"runner":   "ksrunner",
			"beam_sdk": core.SdkVersion,
			"job_id":   s.h.cfg.JobID,
			"job_name": s.h.cfg.JobName,
		},
	}}, nil
}
