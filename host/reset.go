package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/ksrunner/ksrunner/host/internal/application"
)

// ResetConfig names an application to reset (ResetApplication).
type ResetConfig struct {
	ApplicationID    string
	BootstrapServers string
	// DeleteSourceOffsets deletes the application's consumer group too, so
	// that its next job's Kafka reads start per their start_read_time or
	// auto.offset.reset rather than where the last job's stopped.
	DeleteSourceOffsets bool
	// Force resets an application whose job did not end on purpose (its
	// pipeline topic says it runs, though no process runs it), losing the
	// records it had in flight.
	Force bool
}

// ResetReport is what ResetApplication did.
type ResetReport struct {
	// JobID, JobName and JobState are the application's last job as its
	// pipeline topic had it ("": none).
	JobID, JobName, JobState string
	// Topics are the internal topics deleted.
	Topics []string
	// KeptOffsets are the user's topics whose committed offsets stay;
	// DeletedGroup says the consumer group went (DeleteSourceOffsets).
	KeptOffsets  []string
	DeletedGroup bool
}

// ResetApplication resets an application no process runs, as Kafka
// Streams' application reset tool does: it deletes the application's
// internal topics (pipeline, status, changelog, repartition, side-input,
// impulse topics; the dead-letter topic stays) and its consumer group's
// offsets of them, keeping those of the user's topics, so that the next
// job under the application id, whatever its pipeline or ksrunner's layout
// of it, starts with empty state and its Kafka reads go on where the last
// job's stopped. A process's local store (state_dir) sees that the topics
// were made again and starts empty too. It refuses an application whose
// group has members, or whose job has not ended on purpose (drained,
// cancelled, done) unless cfg.Force. Options: WithKafkaSecurity.
func ResetApplication(ctx context.Context, cfg ResetConfig, options ...ServerOption) (ResetReport, error) {
	switch {
	case cfg.ApplicationID == "":
		return ResetReport{}, errors.New("reset: option application_id is required")
	case cfg.BootstrapServers == "" || cfg.BootstrapServers == "embedded":
		return ResetReport{}, fmt.Errorf("reset: option bootstrap_servers: %q: give the application's Kafka brokers", cfg.BootstrapServers)
	}
	var sc serverConfig
	for _, o := range options {
		o(&sc)
	}
	kafka, err := sc.kafkaConfig.Load()
	if err != nil {
		return ResetReport{}, fmt.Errorf("reset: %w", err)
	}
	r, err := application.Reset(ctx, application.ResetConfig{ApplicationID: cfg.ApplicationID, BootstrapServers: cfg.BootstrapServers,
		Security: kafka, DeleteSourceOffsets: cfg.DeleteSourceOffsets, Force: cfg.Force})
	rep := ResetReport{Topics: r.Topics, KeptOffsets: r.KeptOffsets, DeletedGroup: r.DeletedGroup}
	if r.Job != nil {
		rep.JobID, rep.JobName, rep.JobState = r.Job.JobID, r.Job.JobName, string(r.Job.State)
	}
	return rep, err
}
