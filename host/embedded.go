package host

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

// EmbeddedBroker is an in-process Kafka broker (franz-go's kfake). It keeps
// every record in memory only: for development, tests and examples.
type EmbeddedBroker struct {
	cluster *kfake.Cluster
}

// StartEmbeddedBroker starts a one-node broker on 127.0.0.1:port (0 picks a
// free port).
func StartEmbeddedBroker(port int) (*EmbeddedBroker, error) {
	c, err := kfake.NewCluster(
		kfake.Ports(port),
		kfake.ListenFn(func(network, address string) (netListener, error) {
			return listenLoopback(network, address)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	return &EmbeddedBroker{cluster: c}, nil
}

// Bootstrap is the broker list to give clients.
func (b *EmbeddedBroker) Bootstrap() string { return strings.Join(b.cluster.ListenAddrs(), ",") }

// Close stops the broker and drops its data.
func (b *EmbeddedBroker) Close() { b.cluster.Close() }

// warnEmbedded is logged once per process that starts an embedded broker.
func warnEmbedded(logger *slog.Logger, bootstrap string) {
	logger.Warn("EMBEDDED BROKER: bootstrap_servers=embedded runs an in-process Kafka broker that keeps all data IN MEMORY ONLY; it is lost when this process exits. Set bootstrap_servers to a real Kafka cluster for anything that matters.", "bootstrap", bootstrap)
}
