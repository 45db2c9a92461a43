package application

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
)

// Resetting an application (`ksrunner reset`, as Kafka Streams' application
// reset tool): its internal topics go (the pipeline topic, the status
// topic, the changelogs, repartition, side-input, impulse topics), and so
// do its consumer group's committed offsets of them, so that the next job
// under the application id, whatever its pipeline or layout, starts with
// empty state. The group's committed offsets of the user's topics stay
// (unless asked), so its Kafka reads go on where the last job's stopped:
// the way to change a pipeline under an application id without reading its
// input again or skipping any of it, after a drain.
//
// Invariants:
//   - Only an application no process runs (its group has no member) is
//     reset, and only one whose job ended on purpose (drained, cancelled,
//     done) unless forced: a job that merely stopped has records in flight
//     between its reads' committed offsets and its output, which the reset
//     would lose.
//   - The dead-letter topic is the user's data: it stays.
//   - Topics are told apart from another application's whose id extends
//     this one's ("orders" and "orders_v2" share the prefix __beam_orders_):
//     a topic under a longer id that has a pipeline topic is not this
//     application's.
//   - A process's local store of the application (its state_dir) is not
//     reached from here; the store knows the topics it followed by the
//     status topic's id and starts empty when that topic was made again
//     (runtime's incarnation check).

// ResetConfig says what Reset resets.
type ResetConfig struct {
	ApplicationID    string
	BootstrapServers string
	Security         *kafkaconn.Security
	// DeleteSourceOffsets deletes the consumer group too: the next job's
	// Kafka reads start per their start_read_time or auto.offset.reset.
	DeleteSourceOffsets bool
	// Force resets an application whose pipeline topic says it runs
	// (though no process runs it), losing what it had in flight.
	Force bool
}

// ResetReport is what Reset did.
type ResetReport struct {
	// Job is the application's last job as its pipeline topic had it (nil:
	// none).
	Job *Manifest
	// Topics are the internal topics deleted.
	Topics []string
	// KeptOffsets are the user's topics whose committed offsets stay;
	// DeletedGroup says the whole group went (DeleteSourceOffsets).
	KeptOffsets  []string
	DeletedGroup bool
}

// Reset resets the application (see above).
func Reset(ctx context.Context, cfg ResetConfig) (ResetReport, error) {
	var rep ResetReport
	app := cfg.ApplicationID
	if app == "" {
		return rep, errors.New("reset: no application_id")
	}
	cl, err := kafkaconn.NewClient(cfg.BootstrapServers, cfg.Security)
	if err != nil {
		return rep, fmt.Errorf("reset: kafka client for %s: %w", cfg.BootstrapServers, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if live, err := GroupLive(ctx, adm, app); err != nil {
		return rep, fmt.Errorf("reset %s: %w", app, err)
	} else if live {
		return rep, fmt.Errorf("reset %s: processes still run the application (its consumer group %s has members): stop them, or cancel or drain its job, first", app, app)
	}
	names, err := internalTopics(ctx, adm, app)
	if err != nil {
		return rep, fmt.Errorf("reset %s: %w", app, err)
	}
	pipeline := shuffle.TopicName(app, shuffle.PipelineTopic)
	if slices.Contains(names, pipeline) {
		t, err := Open(ctx, cfg.BootstrapServers, cfg.Security, app, 0, false)
		if err != nil {
			return rep, fmt.Errorf("reset %s: %w", app, err)
		}
		rep.Job, err = t.Manifest(ctx)
		t.Close()
		if err != nil {
			return rep, fmt.Errorf("reset %s: %w", app, err)
		}
	}
	if m := rep.Job; m != nil && m.State == Running && !cfg.Force {
		return rep, fmt.Errorf("reset %s: its job %s (%q) has not ended: its pipeline topic says it runs, though no process runs it now, so records between its Kafka reads' committed offsets and its output would be lost. "+
			"Resume it and drain it (`ksrunner drain`) or cancel it first, or reset it anyway with --force", app, m.JobID, m.JobName)
	}

	committed, err := adm.FetchOffsets(ctx, app)
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		committed, err = nil, nil
	case err == nil:
		err = committed.Error()
	}
	if err != nil {
		return rep, fmt.Errorf("reset %s: the committed offsets of group %s: %w", app, app, err)
	}
	internal := kadm.TopicsSet{}
	for topic, parts := range committed {
		if !slices.Contains(names, topic) {
			rep.KeptOffsets = append(rep.KeptOffsets, topic)
			continue
		}
		for p := range parts {
			internal.Add(topic, p)
		}
	}
	slices.Sort(rep.KeptOffsets)
	if cfg.DeleteSourceOffsets && committed != nil {
		resp, err := adm.DeleteGroups(ctx, app)
		if err == nil {
			err = resp.Error()
		}
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return rep, fmt.Errorf("reset %s: deleting consumer group %s: %w", app, app, err)
		}
		rep.DeletedGroup, rep.KeptOffsets = true, nil
	} else if len(internal) > 0 {
		resp, err := adm.DeleteOffsets(ctx, app, internal)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return rep, fmt.Errorf("reset %s: deleting group %s's offsets of its internal topics: %w", app, app, err)
		}
	}

	if len(names) > 0 {
		resps, err := adm.DeleteTopics(ctx, names...)
		if err != nil {
			return rep, fmt.Errorf("reset %s: deleting its topics: %w", app, err)
		}
		for _, r := range resps.Sorted() {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				return rep, fmt.Errorf("reset %s: deleting topic %s: %w", app, r.Topic, r.Err)
			}
		}
		if err := topics.WaitForDeletion(ctx, cl, names...); err != nil {
			return rep, fmt.Errorf("reset %s: %w", app, err)
		}
	}
	rep.Topics = names
	return rep, nil
}

// internalTopics are the application's internal topics in the cluster,
// sorted: those named __beam_<app>_..., but the dead-letter topic and those
// of another application whose id extends app's.
func internalTopics(ctx context.Context, adm *kadm.Client, app string) ([]string, error) {
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	prefix := shuffle.TopicName(app, "")
	suffix := "_" + shuffle.PipelineTopic
	var others []string // prefixes of longer application ids
	for _, name := range listed.Names() {
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix) && name != prefix+shuffle.PipelineTopic {
			others = append(others, strings.TrimSuffix(name, shuffle.PipelineTopic))
		}
	}
	var out []string
	for _, name := range listed.Names() {
		if !strings.HasPrefix(name, prefix) || name == prefix+topics.DeadLetterName {
			continue
		}
		if slices.ContainsFunc(others, func(o string) bool { return strings.HasPrefix(name, o) }) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}
