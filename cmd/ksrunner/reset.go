package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ksrunner/ksrunner/host"
)

// resetFlags are `ksrunner reset`'s flags.
type resetFlags struct {
	appID, brokers      string
	deleteSourceOffsets bool
	force               bool
	kafka               host.KafkaSecurity
}

func resetFlagSet(f *resetFlags) *pflag.FlagSet {
	fs := newFlagSet("reset")
	fs.StringVar(&f.appID, "application_id", "", "the application to reset (required)")
	fs.StringVar(&f.brokers, "bootstrap_servers", "", "the application's Kafka brokers (required)")
	fs.BoolVar(&f.deleteSourceOffsets, "delete_source_offsets", false, "delete the consumer group too: the next job's Kafka reads start per their start_read_time or auto.offset.reset, not where the last job's stopped")
	fs.BoolVar(&f.force, "force", false, "reset an application whose job did not end on purpose (its pipeline topic says it runs, though no process runs it), losing the records it had in flight")
	kafkaSecurityFlags(fs, &f.kafka)
	return fs
}

func runReset(ctx context.Context, args []string, stdout io.Writer) error {
	var f resetFlags
	fs := resetFlagSet(&f)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	env, err := envOptions(os.Environ(), func(key string) bool { return fs.Lookup(key) != nil })
	if err != nil {
		return err
	}
	for key, e := range env {
		if !fs.Changed(key) {
			if err := fs.Set(key, e.raw); err != nil {
				return fmt.Errorf("environment variable %s=%q: %v", e.name, e.raw, err)
			}
		}
	}
	if err := f.kafka.Check(); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if f.appID == "" || f.brokers == "" {
		return errors.New("reset: --application_id and --bootstrap_servers are required")
	}
	rep, err := host.ResetApplication(ctx, host.ResetConfig{ApplicationID: f.appID, BootstrapServers: f.brokers,
		DeleteSourceOffsets: f.deleteSourceOffsets, Force: f.force}, host.WithKafkaSecurity(f.kafka))
	if err != nil {
		return err
	}
	if rep.JobID != "" {
		fmt.Fprintf(stdout, "application %s: its last job %s (%s) was %s\n", f.appID, rep.JobID, rep.JobName, rep.JobState)
	}
	fmt.Fprintf(stdout, "deleted %d internal topics: %s\n", len(rep.Topics), strings.Join(rep.Topics, ", "))
	switch {
	case rep.DeletedGroup:
		fmt.Fprintf(stdout, "deleted consumer group %s: the next job's Kafka reads start per their start_read_time or auto.offset.reset\n", f.appID)
	case len(rep.KeptOffsets) > 0:
		fmt.Fprintf(stdout, "kept consumer group %s's offsets of %s: the next job's Kafka reads go on from there\n", f.appID, strings.Join(rep.KeptOffsets, ", "))
	}
	return nil
}
