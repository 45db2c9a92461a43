package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/kafkastreams" // the runner; expands kafkaio.Read/Write in-process
)

func init() {
	register.Function2x2(decodeWord)
	register.Function3x2(formatCount)
}

// Window is the size of the fixed windows counted in.
const Window = 10 * time.Second

// span is how far apart the first and last generated event timestamps are.
const span = 3 * time.Minute

// Config is what Run runs.
type Config struct {
	// Bootstrap is the Kafka broker list; empty starts an embedded broker in
	// this process (not allowed with --endpoint).
	Bootstrap string
	// WordsTopic (4 partitions) and CountsTopic (1 partition) are created if
	// missing.
	WordsTopic, CountsTopic string
	// ApplicationID is the job's application_id.
	ApplicationID string
	// Records to generate, over Keys keys.
	Records, Keys int
	// Deadline bounds the wait for every window in CountsTopic.
	Deadline time.Duration
}

// Result is what a run produced and read.
type Result struct {
	// Expected is the count per "key,windowStart" line prefix of the
	// generated records (windowStart RFC 3339, UTC).
	Expected map[string]int64
	// Lines are the values read from CountsTopic, in order.
	Lines []string
	// Committed are the offsets the job (consumer group ApplicationID) had
	// committed on WordsTopic once every window had arrived, and Ends the
	// partitions' end offsets then, by partition.
	Committed, Ends map[int32]int64
}

// Run fills cfg.WordsTopic, runs the counting job until cfg.CountsTopic
// holds a line for every key and window of those records, cancels it and
// prints a summary to stdout. It runs on the kafkastreams runner (LOOPBACK).
// With no --endpoint flag it starts a ksrunner job server in this process
// and submits to it (it needs the server's endpoint to cancel the job); set
// KSRUNNER_DEBUG for the server's debug log. It fails if a window does not
// arrive by the deadline or a count differs from the generated input's.
func Run(ctx context.Context, cfg Config, stdout io.Writer) (*Result, error) {
	start := time.Now()
	if cfg.Bootstrap == "" {
		if *jobopts.Endpoint != "" {
			return nil, errors.New("--endpoint needs --bootstrap_servers: the Kafka cluster the job server uses")
		}
		b, err := host.StartEmbeddedBroker(0)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		cfg.Bootstrap = b.Bootstrap()
		fmt.Fprintf(stdout, "embedded broker (in memory): %s\n", cfg.Bootstrap)
	}
	if *jobopts.Endpoint == "" {
		level := slog.LevelWarn
		if os.Getenv("KSRUNNER_DEBUG") != "" {
			level = slog.LevelDebug
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		opts := host.DefaultOptions()
		opts.BootstrapServers = cfg.Bootstrap
		// Its job's messages show on this terminal (the runner's console):
		// not in its log too.
		srv, err := host.NewJobServer("localhost:0", opts, logger, host.WithMessagesOnly())
		if err != nil {
			return nil, err
		}
		go srv.Serve()
		defer srv.Stop() // before the broker closes: it cancels and waits for the job
		flag.Set("endpoint", srv.Endpoint())
		defer flag.Set("endpoint", "")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(cfg.Bootstrap, ",")...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := createTopics(ctx, kadm.NewClient(cl), map[string]int32{cfg.WordsTopic: 4, cfg.CountsTopic: 1}); err != nil {
		return nil, err
	}
	// Counts are read from where the topic ends now: earlier runs' lines are
	// not this run's.
	from, err := kadm.NewClient(cl).ListEndOffsets(ctx, cfg.CountsTopic)
	if err == nil {
		err = from.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", cfg.CountsTopic, err)
	}
	res := &Result{}
	if res.Expected, err = fill(ctx, cl, cfg); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "produced %d records over %d keys to %s (%v)\n", cfg.Records, cfg.Keys, cfg.WordsTopic, time.Since(start).Round(time.Millisecond))

	// The job's options: a Go pipeline sends what is set here (and the flags
	// given), which override the job server's defaults.
	beam.PipelineOptions.Set("application_id", cfg.ApplicationID)
	beam.PipelineOptions.Set("bootstrap_servers", cfg.Bootstrap)
	jobName := *jobopts.JobName // Cancel finds the job by its name
	if jobName == "" {
		jobName = fmt.Sprintf("streaming-example-%d", time.Now().UnixNano())
		flag.Set("job_name", jobName)
		defer flag.Set("job_name", "")
	}
	p := pipeline(cfg)
	jobCtx, stopJob := context.WithCancel(context.Background())
	defer stopJob()
	job := &running{done: make(chan struct{})}
	go func() { _, job.err = beam.Run(jobCtx, kafkastreams.Name, p); close(job.done) }()

	readCtx, cancelRead := context.WithTimeout(ctx, cfg.Deadline)
	defer cancelRead()
	res.Lines, err = readCounts(readCtx, cfg, from, res.Expected, job)
	if err == nil {
		// Every window is out, so every input record has been read: each
		// partition's source task has committed its offset to the end, in
		// the transaction of its last cycle.
		res.Committed, res.Ends, err = sourceOffsets(ctx, kadm.NewClient(cl), cfg.ApplicationID, cfg.WordsTopic)
	}
	if cerr := cancelJob(ctx, jobName, job); err == nil {
		err = cerr
	}
	if err != nil {
		return res, err
	}
	fmt.Fprintf(stdout, "read %d lines from %s: all %d windows of %d keys (%v)\n", len(res.Lines), cfg.CountsTopic, len(res.Expected), cfg.Keys, time.Since(start).Round(time.Millisecond))
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(res.Ends)) {
		parts = append(parts, fmt.Sprintf("%d: %d of %d", p, res.Committed[p], res.Ends[p]))
	}
	fmt.Fprintf(stdout, "offsets %s committed on %s, by partition (one source task each): %s\n", cfg.ApplicationID, cfg.WordsTopic, strings.Join(parts, ", "))
	for _, l := range res.Lines[:min(5, len(res.Lines))] {
		fmt.Fprintf(stdout, "  %s\n", l)
	}
	if len(res.Lines) > 5 {
		fmt.Fprintf(stdout, "  ...\n")
	}
	if bad := Check(res.Expected, res.Lines); len(bad) > 0 {
		return res, fmt.Errorf("wrong counts:\n%s", strings.Join(bad, "\n"))
	}
	fmt.Fprintf(stdout, "every count matches the input; job cancelled\n")
	return res, nil
}

// pipeline reads cfg.WordsTopic through kafkaio with the records' create
// times as event times, counts per key in fixed windows and writes
// "key,windowStart,count" to cfg.CountsTopic.
func pipeline(cfg Config) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	recs := kafkaio.Read(s, "", cfg.Bootstrap, []string{cfg.WordsTopic},
		kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"}),
		kafkaio.TimestampPolicy(kafkaio.CreateTime))
	words := beam.WindowInto(s, window.NewFixedWindows(Window), beam.ParDo(s, decodeWord, recs))
	lines := beam.ParDo(s, formatCount, stats.SumPerKey(s, words))
	kafkaio.Write(s, "", cfg.Bootstrap, cfg.CountsTopic, beam.WindowInto(s, window.NewGlobalWindows(), lines))
	return p
}

// decodeWord reads a record of words: a String key and a Long value.
func decodeWord(k, v []byte) (string, int64) {
	return string(k), int64(binary.BigEndian.Uint64(v))
}

// formatCount writes a key's count in a window as the record value
// "key,windowStart,count" (UTF-8, as StringSerializer would: the Go SDK's
// kafkaio writes bytes), keyed by the key.
func formatCount(w beam.Window, k string, n int64) ([]byte, []byte) {
	return []byte(k), []byte(fmt.Sprintf("%s,%d", line(k, w.(window.IntervalWindow).Start.ToTime()), n))
}

// line is the "key,windowStart" prefix of a count line.
func line(k string, start time.Time) string {
	return k + "," + start.UTC().Format(time.RFC3339)
}

// Generate returns the records Run produces: n over keys keys, each with
// value 1 (Long) and event timestamps evenly spread over span, ending 20 s
// before now, in timestamp order, so in order in every partition. The keys
// are drawn from a fixed seed.
func Generate(topic string, n, keys int, now time.Time) []*kgo.Record {
	r := rand.New(rand.NewPCG(1, 2))
	base := now.Truncate(Window).Add(-span - 20*time.Second)
	one := binary.BigEndian.AppendUint64(nil, 1)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		ts := base.Add(time.Duration(int64(span) * int64(i) / int64(n))).Truncate(time.Millisecond)
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("key%02d", r.IntN(keys))), Value: one, Timestamp: ts}
	}
	return recs
}

// Expected is the count per "key,windowStart" of records (String key, Long
// value) by their timestamps.
func Expected(recs []*kgo.Record) map[string]int64 {
	want := map[string]int64{}
	for _, r := range recs {
		want[line(string(r.Key), r.Timestamp.Truncate(Window))] += int64(binary.BigEndian.Uint64(r.Value))
	}
	return want
}

// fill produces the generated records to cfg.WordsTopic and returns their
// expected counts.
func fill(ctx context.Context, cl *kgo.Client, cfg Config) (map[string]int64, error) {
	recs := Generate(cfg.WordsTopic, cfg.Records, cfg.Keys, time.Now())
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("producing to %s: %w", cfg.WordsTopic, err)
	}
	return Expected(recs), nil
}

// createTopics creates the topics that do not exist yet and waits until
// every partition of each has a leader (a real cluster spreads a new
// topic's metadata to its brokers after CreateTopics returns).
func createTopics(ctx context.Context, adm *kadm.Client, topics map[string]int32) error {
	for name, parts := range topics {
		resp, err := adm.CreateTopic(ctx, parts, -1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", name, err)
		}
	}
	for name := range topics {
		for {
			md, err := adm.Metadata(ctx, name)
			if err == nil {
				if td, ok := md.Topics[name]; ok && td.Err == nil && len(td.Partitions) > 0 && allLed(td.Partitions) {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("topic %s: not ready: %w", name, context.Cause(ctx))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// allLed reports whether every partition has a leader.
func allLed(ps kadm.PartitionDetails) bool {
	for _, p := range ps {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// running is the pipeline's Run, in its goroutine: done is closed when it
// returns err.
type running struct {
	done chan struct{}
	err  error
}

// readCounts reads cfg.CountsTopic from the offsets from, read_committed,
// until a line has arrived for every key and window of want, the deadline
// of ctx passes, or the job ends.
func readCounts(ctx context.Context, cfg Config, from kadm.ListedOffsets, want map[string]int64, job *running) ([]string, error) {
	start := map[int32]kgo.Offset{}
	from.Each(func(o kadm.ListedOffset) { start[o.Partition] = kgo.NewOffset().At(o.Offset) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(cfg.Bootstrap, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.CountsTopic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// A poll also ends when the job does.
	poll, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-job.done:
			stop()
		case <-poll.Done():
		}
	}()
	var lines []string
	seen := map[string]bool{}
	for len(seen) < len(want) {
		fs := cl.PollFetches(poll)
		select {
		case <-job.done:
			return lines, fmt.Errorf("the job ended (%v) with %d of %d windows in %s", job.err, len(seen), len(want), cfg.CountsTopic)
		default:
		}
		if ctx.Err() != nil {
			return lines, fmt.Errorf("only %d of %d windows arrived in %s by the deadline (%v)", len(seen), len(want), cfg.CountsTopic, cfg.Deadline)
		}
		if err := fs.Err0(); err != nil {
			return lines, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			l := string(r.Value)
			lines = append(lines, l)
			if i := strings.LastIndexByte(l, ','); i >= 0 {
				if _, ok := want[l[:i]]; ok {
					seen[l[:i]] = true
				}
			}
		})
	}
	return lines, nil
}

// cancelJob cancels the running job named name and waits (up to a minute)
// for the pipeline's Run to return.
func cancelJob(ctx context.Context, name string, job *running) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	id, err := host.CancelNamed(ctx, *jobopts.Endpoint, name)
	if err != nil {
		return err
	}
	select {
	case <-job.done:
		if job.err != nil {
			return fmt.Errorf("job %s: %w", id, job.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("job %s: not ended a minute after Cancel", id)
	}
}

// Check compares count lines "key,windowStart,count" with want: it returns
// one message per window missing, written twice, unexpected or with a wrong
// count (empty: each window of want once, with its count).
func Check(want map[string]int64, lines []string) []string {
	var bad []string
	got := map[string]int64{}
	for _, l := range lines {
		i := strings.LastIndexByte(l, ',')
		n, err := strconv.ParseInt(l[i+1:], 10, 64)
		if i < 0 || err != nil {
			bad = append(bad, fmt.Sprintf("%q: not key,windowStart,count", l))
			continue
		}
		k := l[:i]
		if _, dup := got[k]; dup {
			bad = append(bad, fmt.Sprintf("%s: written twice", k))
		}
		got[k] = n
		if w, ok := want[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: count %d, no such window in the input", k, n))
		} else if n != w {
			bad = append(bad, fmt.Sprintf("%s: count %d, want %d", k, n, w))
		}
	}
	for k, w := range want {
		if _, ok := got[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: missing (want %d)", k, w))
		}
	}
	slices.Sort(bad)
	return bad
}

// sourceOffsets returns group's committed offsets on topic and the topic's
// end offsets, by partition.
func sourceOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (committed, ends map[int32]int64, err error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	committed = map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			committed[o.Partition] = o.At
		}
	})
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	ends = map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return committed, ends, nil
}
