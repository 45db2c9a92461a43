package host

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStopRefusesRun: after Stop, Run starts no job that nobody would
// cancel; it fails Unavailable, naming the preparation.
func TestStopRefusesRun(t *testing.T) {
	s, err := NewJobServer("127.0.0.1:0", DefaultOptions(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	s.Stop()
	_, err = s.Run(context.Background(), &jobpb.RunJobRequest{PreparationId: "prep-1"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "prep-1") {
		t.Fatalf("Run after Stop: %v, want Unavailable naming prep-1", err)
	}
	if len(s.jobs) != 0 {
		t.Fatalf("%d jobs registered after Stop", len(s.jobs))
	}
}
