package harness

import (
	"context"

	"google.golang.org/grpc/stats"
)

// connWatch is the server's stats handler: it gives every client
// connection a channel that closes when the connection ends, which the
// connection's RPCs find in their contexts (connEnded).
//
// A worker's stop waits on it. The Go SDK (harness.MainWithOptions, v2.77)
// closes its control connection only after its control loop saw the stream
// end and stopped sending bundle responses; stopping the worker before that
// lets a bundle that returns on the worker's cancelled context pass the
// loop's shutdown check and send on the channel the loop is closing, which
// the race detector reports and which otherwise panics the worker.
type connWatch struct{}

type connEndedKey struct{}

func (connWatch) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connEndedKey{}, make(chan struct{}))
}

func (connWatch) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); ok {
		if ended, ok := ctx.Value(connEndedKey{}).(chan struct{}); ok {
			close(ended)
		}
	}
}

func (connWatch) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (connWatch) HandleRPC(context.Context, stats.RPCStats) {}

// connEnded returns the channel that closes when the client connection of
// an RPC's context ends; nil if the context carries none.
func connEnded(ctx context.Context) <-chan struct{} {
	ended, _ := ctx.Value(connEndedKey{}).(chan struct{})
	return ended
}
