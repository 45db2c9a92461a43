package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/ksrunner/ksrunner/host"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerCheckTimeout bounds the start-up check of the brokers.
const brokerCheckTimeout = 10 * time.Second

// checkBrokers checks, at start-up, that the job server reaches the Kafka
// brokers of bootstrap_servers, and says so (the cluster's brokers) or
// warns, naming them: jobs fail until they can be reached. The embedded
// broker needs no check.
func checkBrokers(ctx context.Context, bootstrap string, sec host.KafkaSecurity, stdout io.Writer, logger *slog.Logger) {
	if bootstrap == "embedded" {
		return
	}
	if err := reachBrokers(ctx, bootstrap, sec, stdout); err != nil {
		logger.Warn("cannot reach the Kafka brokers of bootstrap_servers: jobs fail until they can", "bootstrap_servers", bootstrap, "error", err)
	}
}

// reachBrokers asks the brokers for the cluster's metadata and prints it.
func reachBrokers(ctx context.Context, bootstrap string, sec host.KafkaSecurity, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, brokerCheckTimeout)
	defer cancel()
	opts, err := sec.ClientOpts(bootstrap, kgo.RetryTimeout(brokerCheckTimeout))
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	meta, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer in %v: %w", brokerCheckTimeout, err)
		}
		return err
	}
	var brokers []string
	for _, b := range meta.Brokers {
		brokers = append(brokers, fmt.Sprintf("%s:%d", b.Host, b.Port))
	}
	sort.Strings(brokers)
	fmt.Fprintf(stdout, "kafka: reached %s: cluster %s, %d brokers (%s)\n", bootstrap, meta.Cluster, len(brokers), strings.Join(brokers, ", "))
	return nil
}
