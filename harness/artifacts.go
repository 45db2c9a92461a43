package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Artifact type URNs the artifact retrieval service serves.
const (
	URNArtifactFile     = "beam:artifact:type:file:v1"
	URNArtifactEmbedded = "beam:artifact:type:embedded:v1"
)

// artifactChunkSize is the size of the GetArtifact messages streaming a file.
const artifactChunkSize = 1 << 20

// artifactService serves the artifacts the environments of this harness
// depend on: local files and embedded data.
type artifactService struct {
	jobpb.UnimplementedArtifactRetrievalServiceServer
	h *Harness
}

// ResolveArtifacts returns the artifacts unchanged: files and embedded
// data need no resolution.
func (a *artifactService) ResolveArtifacts(_ context.Context, req *jobpb.ResolveArtifactsRequest) (*jobpb.ResolveArtifactsResponse, error) {
	return &jobpb.ResolveArtifactsResponse{Replacements: req.GetArtifacts()}, nil
}

// GetArtifact streams one artifact. Only artifacts some environment of this
// harness declared as a dependency are served, and of files only those
// under Config.ArtifactDir, the job's staging directory: the server must
// not read arbitrary local files for whoever asks, nor for a pipeline that
// declares one (an environment's dependency is the submitter's say-so).
func (a *artifactService) GetArtifact(req *jobpb.GetArtifactRequest, stream jobpb.ArtifactRetrievalService_GetArtifactServer) error {
	art := req.GetArtifact()
	if t := art.GetTypeUrn(); t != URNArtifactFile && t != URNArtifactEmbedded {
		return status.Errorf(codes.Unimplemented, "artifact type %q is not supported (only %s and %s)", t, URNArtifactFile, URNArtifactEmbedded)
	}
	if !a.declared(art) {
		return status.Errorf(codes.PermissionDenied, "artifact of type %s is not a dependency of any environment of job %q", art.GetTypeUrn(), a.h.cfg.JobID)
	}
	switch art.GetTypeUrn() {
	case URNArtifactEmbedded:
		var payload pipepb.EmbeddedFilePayload
		if err := proto.Unmarshal(art.GetTypePayload(), &payload); err != nil {
			return status.Errorf(codes.InvalidArgument, "decoding %s payload: %v", URNArtifactEmbedded, err)
		}
		return stream.Send(&jobpb.GetArtifactResponse{Data: payload.GetData()})
	case URNArtifactFile:
		var payload pipepb.ArtifactFilePayload
		if err := proto.Unmarshal(art.GetTypePayload(), &payload); err != nil {
			return status.Errorf(codes.InvalidArgument, "decoding %s payload: %v", URNArtifactFile, err)
		}
		f, err := a.openStaged(payload.GetPath())
		if err != nil {
			return err
		}
		defer f.Close()
		if err := sendFile(f, stream); err != nil {
			return status.Errorf(codes.Unavailable, "artifact %s: %v", payload.GetPath(), err)
		}
		return nil
	default: // checked above
		return status.Errorf(codes.Unimplemented, "artifact type %q is not supported", art.GetTypeUrn())
	}
}

// openStaged opens a file artifact if it lies under the job's staging
// directory; through os.Root, so neither ".." nor a symbolic link leads
// out of it.
func (a *artifactService) openStaged(path string) (*os.File, error) {
	dir := a.h.cfg.ArtifactDir
	refuse := func() error {
		return status.Errorf(codes.PermissionDenied, "artifact %s of job %q was not staged for the job (only files under its staging directory are served)", path, a.h.cfg.JobID)
	}
	if dir == "" || !filepath.IsAbs(path) {
		return nil, refuse()
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, refuse()
	}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, os.ErrNotExist) { // nothing was staged for the job
		return nil, refuse()
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "artifact %s: staging directory: %v", path, err)
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, status.Errorf(codes.NotFound, "artifact %s: %v", path, err)
		}
		return nil, refuse()
	}
	return f, nil
}

func sendFile(f *os.File, stream jobpb.ArtifactRetrievalService_GetArtifactServer) error {
	buf := make([]byte, artifactChunkSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			// Send may hold on to the message after returning: send a copy.
			if sendErr := stream.Send(&jobpb.GetArtifactResponse{Data: bytes.Clone(buf[:n])}); sendErr != nil {
				return fmt.Errorf("sending: %w", sendErr)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading: %w", err)
		}
	}
}

// declared reports whether art is a dependency of an environment this
// harness started.
func (a *artifactService) declared(art *pipepb.ArtifactInformation) bool {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	for _, w := range a.h.workers {
		for _, dep := range w.env.GetDependencies() {
			if dep.GetTypeUrn() == art.GetTypeUrn() && bytes.Equal(dep.GetTypePayload(), art.GetTypePayload()) {
				return true
			}
		}
	}
	return false
}
