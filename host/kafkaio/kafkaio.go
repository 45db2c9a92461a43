package kafkaio

import (
	"context"
	"errors"
	"log/slog"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/xlangx"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"

	"github.com/ksrunner/ksrunner/host/internal/expansion"
)

// Namespace is the xlangx handler namespace: "ksrunner" as an expansion
// address expands in-process.
const Namespace = "ksrunner"

func init() {
	xlangx.RegisterHandler(Namespace, handle)
	for _, urn := range expansion.URNs {
		xlangx.RegisterOverrideForUrn(urn, Namespace)
	}
}

func handle(_ context.Context, p *xlangx.HandlerParams) (*jobpb.ExpansionResponse, error) {
	res, warnings, err := expansion.Expand(p.Req)
	for _, w := range warnings {
		slog.Warn("ksrunner kafkaio: "+w, "transform", p.Req.GetTransform().GetUniqueName())
	}
	if err != nil {
		return nil, errors.New("ksrunner kafkaio: " + err.Error())
	}
	return res, nil
}
