package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host"
	_ "github.com/ksrunner/ksrunner/host/kafkaio" // expands kafkaio.Read/Write in-process
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// `ksrunner-bench kafka`: Kafka -> a stateless map -> Kafka, exactly once.
// The input topic holds --records records (a 16-digit sequence number as
// the key, a --value_bytes value starting with it, lower case), in
// --partitions partitions; the map upper-cases the value. Three variants
// run over the same input, each into a fresh output topic:
//
//   - copy: a franz-go GroupTransactSession consuming the input and
//     producing every record to the output, committing every
//     --commit_interval_ms: what Kafka -> Kafka costs here with nothing
//     else, the ceiling of the other two;
//   - wasm: a ksrunner job (kafkaio.Read -> ParDo -> kafkaio.Write,
//     expanded in-process) whose ParDo runs as a WASM stage (--stage_wasm
//     to the module ./cmd/ksrunner-bench/benchmap, built for wasip1 first);
//   - harness: the same job with the ParDo a Go SDK DoFn on the Fn API
//     harness (LOOPBACK: the SDK worker is this process).
//
// Both phases read the output topic read_committed while the variant runs
// and fail the bench unless it holds every input record exactly once with
// its mapped value (end markers produced after the variant stops bound the
// read, so a duplicate or extra record written late is caught too).
//
// Throughput: the input is filled first; the rate is records over the time
// from the first to the last output record's log-append time (both topics
// are LogAppendTime), which leaves out group join and job start-up; the
// wall time from start to the last record read is printed too.
//
// Latency: a producer paces --records records at --rate records/s into a
// fresh input while the variant runs (after a warm-up record per partition
// has come through, so start-up is not measured); each record's latency
// is its output log-append time minus its input log-append time (matched
// by sequence number), one broker clock.

func init() {
	register.Function2x2(upperValue)
}

// upperValue is the harness variant's map: the value upper-cased (ASCII),
// the key kept. benchmap's UpperValue is the same in WASM; the bench checks
// both against benchValue.
func upperValue(k, v []byte) ([]byte, []byte) {
	out := make([]byte, len(v))
	for i, c := range v {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		out[i] = c
	}
	return k, out
}

// The variants of bench kafka.
const (
	variantCopy    = "copy"
	variantWASM    = "wasm"
	variantHarness = "harness"
)

var variantNames = map[string]string{
	variantCopy:    "franz-go GroupTransactSession copy loop",
	variantWASM:    "ksrunner, map as a WASM stage",
	variantHarness: "ksrunner, map on the Go SDK harness (LOOPBACK)",
}

// benchKafkaConfig is what a bench kafka run measures.
type benchKafkaConfig struct {
	Records    int
	Partitions int32
	ValueBytes int
	Rate       int // records/s of the latency phase; 0 skips it
	CommitMs   int
	Variants   []string
	Timeout    time.Duration // per variant and phase
	CPUProfile string
	Logger     *slog.Logger
}

// benchKafkaResult is one variant's figures.
type benchKafkaResult struct {
	Variant    string
	Wall       time.Duration // from start to the last output record read
	Span       time.Duration // first to last output log-append time
	RatePerSec float64       // Records / Span
	P50, P99   time.Duration // latency phase; zero when skipped
	Max        time.Duration
}

func runBenchKafka(ctx context.Context, args []string, stdout io.Writer) error {
	def := host.DefaultOptions()
	fs := newFlagSet("bench kafka")
	records := fs.Int("records", 1_000_000, "input records (for each phase and variant)")
	parts := fs.Int32("partitions", 8, "partitions of the input and output topics")
	valueBytes := fs.Int("value_bytes", 100, "bytes per record value (at least 16)")
	rate := fs.Int("rate", 50_000, "records/s the latency phase's producer paces itself at (0: no latency phase)")
	commitMs := fs.Int("commit_interval_ms", def.CommitIntervalMs, "ksrunner's commit interval, and the copy loop's transaction length")
	variants := fs.String("variants", "copy,wasm,harness", "comma-separated variants: copy, wasm, harness")
	bootstrap := fs.String("bootstrap_servers", "embedded", `Kafka brokers, or "embedded" (an in-memory broker in this process)`)
	timeout := fs.Duration("timeout", 10*time.Minute, "how long each variant's phase may take")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each ksrunner throughput run to FILE.VARIANT")
	logLevel := fs.String("log_level", "warn", "ksrunner and SDK log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := benchLogger("bench kafka", *logLevel)
	if err != nil {
		return err
	}
	cfg := benchKafkaConfig{
		Records: *records, Partitions: *parts, ValueBytes: *valueBytes, Rate: *rate, CommitMs: *commitMs,
		Variants: strings.Split(*variants, ","), Timeout: *timeout, CPUProfile: *cpuProfile, Logger: logger,
	}
	_, err = benchKafka(ctx, cfg, *bootstrap, stdout)
	return err
}

// benchKafka runs the bench on bootstrap ("embedded": a broker of its own)
// and prints the figures; it fails if any variant's output is not exactly
// its input, mapped.
func benchKafka(ctx context.Context, cfg benchKafkaConfig, bootstrap string, stdout io.Writer) ([]benchKafkaResult, error) {
	switch {
	case cfg.Records < 1 || cfg.Partitions < 1 || cfg.CommitMs < 1 || cfg.Rate < 0:
		return nil, errors.New("bench kafka: --records, --partitions and --commit_interval_ms must be at least 1, --rate at least 0")
	case cfg.ValueBytes < 16:
		return nil, fmt.Errorf("bench kafka: --value_bytes %d: at least 16 (the value starts with the sequence number)", cfg.ValueBytes)
	}
	for _, v := range cfg.Variants {
		if variantNames[v] == "" {
			return nil, fmt.Errorf("bench kafka: --variants: unknown variant %q (want copy, wasm or harness)", v)
		}
	}
	bootstrap, where, closeBroker, err := benchBroker(bootstrap)
	if err != nil {
		return nil, err
	}
	defer closeBroker()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	b := &kafkaBench{cfg: cfg, bootstrap: bootstrap, cl: cl, adm: kadm.NewClient(cl), nonce: strconv.FormatInt(time.Now().UnixNano(), 36)}

	// The job servers: one maps the ParDo to the WASM module, one leaves it
	// to the harness.
	if slices.Contains(cfg.Variants, variantWASM) || slices.Contains(cfg.Variants, variantHarness) {
		dir, err := os.MkdirTemp("", "ksrunner-bench-kafka-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		opts := host.DefaultOptions()
		opts.BootstrapServers = bootstrap
		opts.CommitIntervalMs = cfg.CommitMs
		opts.StateDir = filepath.Join(dir, "state")
		b.endpoints = map[string]string{}
		for _, v := range cfg.Variants {
			o := opts
			switch v {
			case variantCopy:
				continue
			case variantWASM:
				module := filepath.Join(dir, "benchmap.wasm")
				cmd := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-o", module, "github.com/ksrunner/ksrunner/cmd/ksrunner-bench/benchmap")
				cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=", "GOWASM=satconv,signext")
				if msg, err := cmd.CombinedOutput(); err != nil {
					return nil, fmt.Errorf("bench kafka: building the WASM map (cmd/ksrunner-bench/benchmap): %v\n%s", err, msg)
				}
				o.StageWASM = []string{benchMapScope + "/*=" + module + "#UpperValue"}
			}
			srv, err := host.NewJobServer("localhost:0", o, cfg.Logger)
			if err != nil {
				return nil, err
			}
			go srv.Serve()
			defer srv.Stop() // before the broker closes: it cancels and waits for the jobs
			b.endpoints[v] = srv.Endpoint()
		}
		*jobopts.EnvironmentType = "LOOPBACK"
		flag.Set("environment_type", "LOOPBACK")
	}

	fmt.Fprintf(stdout, "bench kafka: %d records of %d bytes, %d partitions, on %s; exactly once, commit_interval_ms=%d; GOMAXPROCS=%d\n",
		cfg.Records, cfg.ValueBytes, cfg.Partitions, where, cfg.CommitMs, runtime.GOMAXPROCS(0))
	results := map[string]*benchKafkaResult{}
	var order []*benchKafkaResult
	for _, v := range cfg.Variants {
		r := &benchKafkaResult{Variant: v}
		results[v] = r
		order = append(order, r)
	}

	// Throughput: one filled input for all variants.
	in := b.topic("in")
	if err := b.createTopics(ctx, in); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := b.produce(ctx, in, 0, cfg.Records, 0); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "filled %s with %d records in %v\n", in, cfg.Records, time.Since(start).Round(time.Millisecond))
	for _, r := range order {
		out := b.topic("out-" + r.Variant)
		if err := b.createTopics(ctx, out); err != nil {
			return nil, err
		}
		res, err := b.runVariant(ctx, r.Variant, in, out, cfg.Records, nil)
		if err != nil {
			return nil, fmt.Errorf("bench kafka: %s, throughput: %w", r.Variant, err)
		}
		r.Wall, r.Span = res.wall, res.span
		r.RatePerSec = float64(cfg.Records) / max(res.span, time.Millisecond).Seconds()
		fmt.Fprintf(stdout, "%-8s %-48s %10.0f records/s  (first to last output append %v; %v from start; output exact: %d records, each once)\n",
			r.Variant, variantNames[r.Variant], r.RatePerSec, res.span.Round(time.Millisecond), res.wall.Round(time.Millisecond), cfg.Records)
		b.deleteTopics(ctx, out)
	}
	b.deleteTopics(ctx, in)
	if c := results[variantCopy]; c != nil {
		for _, r := range order {
			if r.Variant != variantCopy {
				fmt.Fprintf(stdout, "%s/copy ratio: %.2f\n", r.Variant, r.RatePerSec/c.RatePerSec)
			}
		}
	}

	if cfg.Rate > 0 {
		fmt.Fprintf(stdout, "latency: %d records paced at %d records/s, output minus input log-append time\n", cfg.Records, cfg.Rate)
		for _, r := range order {
			in, out := b.topic("lin-"+r.Variant), b.topic("lout-"+r.Variant)
			if err := b.createTopics(ctx, in, out); err != nil {
				return nil, err
			}
			res, err := b.runVariant(ctx, r.Variant, in, out, cfg.Records, func(ctx context.Context) error {
				return b.produce(ctx, in, 0, cfg.Records, cfg.Rate)
			})
			if err != nil {
				return nil, fmt.Errorf("bench kafka: %s, latency: %w", r.Variant, err)
			}
			r.P50, r.P99, r.Max = res.p50, res.p99, res.max
			// Output appended over about as long as the input was paced
			// over: the variant kept up, and the latency is its own; much
			// longer: it fell behind, and the latency is a backlog's.
			fmt.Fprintf(stdout, "%-8s %-48s p50 %6dms  p99 %6dms  max %6dms  (input paced over %v, output appended over %v; output exact)\n",
				r.Variant, variantNames[r.Variant], r.P50.Milliseconds(), r.P99.Milliseconds(), r.Max.Milliseconds(),
				res.paced.Round(time.Millisecond), res.span.Round(time.Millisecond))
			b.deleteTopics(ctx, in, out)
		}
	}
	var list []benchKafkaResult
	for _, r := range order {
		list = append(list, *r)
	}
	return list, nil
}

// benchMapScope is the scope of the job's map ParDo: stage_wasm maps
// benchMapScope/* to the WASM module.
const benchMapScope = "BenchMap"

// kafkaBench holds what the phases share.
type kafkaBench struct {
	cfg       benchKafkaConfig
	bootstrap string
	cl        *kgo.Client // produces with the manual partitioner
	adm       *kadm.Client
	nonce     string
	endpoints map[string]string // variant -> job server
	runs      int
}

func (b *kafkaBench) topic(name string) string { return "bench-kafka-" + b.nonce + "-" + name }

// createTopics creates LogAppendTime topics of cfg.Partitions partitions
// and waits until every partition has a leader.
func (b *kafkaBench) createTopics(ctx context.Context, topics ...string) error {
	lat := "LogAppendTime"
	return createBenchTopics(ctx, b.cl, b.cfg.Partitions, map[string]*string{"message.timestamp.type": &lat}, topics...)
}

// benchBroker resolves a bench's --bootstrap_servers: "embedded" starts an
// in-memory broker in this process (closed by closeBroker), anything else is
// a broker list used as is. where describes it for the bench's header.
func benchBroker(bootstrap string) (addr, where string, closeBroker func(), err error) {
	if bootstrap != "embedded" {
		return bootstrap, bootstrap, func() {}, nil
	}
	b, err := host.StartEmbeddedBroker(0)
	if err != nil {
		return "", "", nil, err
	}
	return b.Bootstrap(), "embedded broker " + b.Bootstrap(), b.Close, nil
}

// createBenchTopics creates topics of partitions partitions with configs
// (an existing one is kept) and waits until every partition has a leader:
// a real cluster spreads a new topic's metadata after CreateTopics returns.
// It asks with Metadata requests of its own: kadm's Metadata answers from
// franz-go's cache, which keeps a topic seen without leaders for 5 s.
func createBenchTopics(ctx context.Context, cl *kgo.Client, partitions int32, configs map[string]*string, topics ...string) error {
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, -1, configs, topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topics %v: %w", topics, err)
	}
	return kafkatest.WaitForLeaders(ctx, cl, partitions, topics...)
}

func (b *kafkaBench) deleteTopics(ctx context.Context, topics ...string) {
	if _, err := b.adm.DeleteTopics(ctx, topics...); err != nil {
		b.cfg.Logger.Warn("bench kafka: deleting topics", "topics", topics, "err", err)
	}
}

// benchKey is record seq's key: 16 decimal digits.
func benchKey(seq int) []byte { return appendKey(make([]byte, 0, 16), seq) }

func appendKey(b []byte, seq int) []byte {
	var d [16]byte
	for i := 15; i >= 0; i-- {
		d[i] = '0' + byte(seq%10)
		seq /= 10
	}
	return append(b, d[:]...)
}

// parseKey is the sequence number of a benchKey, or -1.
func parseKey(k []byte) int {
	if len(k) != 16 {
		return -1
	}
	seq := 0
	for _, c := range k {
		if c < '0' || c > '9' {
			return -1
		}
		seq = 10*seq + int(c-'0')
	}
	return seq
}

// benchValue is record seq's input value: the key, then lower-case letters,
// valueBytes in all.
func benchValue(seq, valueBytes int) []byte {
	v := appendKey(make([]byte, 0, valueBytes), seq)
	for i := 16; i < valueBytes; i++ {
		v = append(v, valueLetter(seq, i))
	}
	return v
}

func valueLetter(seq, i int) byte { return 'a' + byte((seq+i)%26) }

// isValue reports whether v is record seq's value (upper-cased if mapped),
// without allocating: the output reader runs it on every record, in the
// process it measures.
func isValue(v []byte, seq, valueBytes int, mapped bool) bool {
	if len(v) != valueBytes || parseKey(v[:16]) != seq {
		return false
	}
	for i := 16; i < valueBytes; i++ {
		c := valueLetter(seq, i)
		if mapped {
			c -= 'a' - 'A'
		}
		if v[i] != c {
			return false
		}
	}
	return true
}

// produce writes records [from, to) to topic, record seq to partition
// seq % partitions; at rate records/s if rate > 0 (in 10 ms steps), else as
// fast as the client goes.
func (b *kafkaBench) produce(ctx context.Context, topic string, from, to, rate int) error {
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	done := func(r *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("producing to %s partition %d: %w", topic, r.Partition, err)
			}
			mu.Unlock()
		}
		wg.Done()
	}
	start := time.Now()
	for seq := from; seq < to; seq++ {
		if rate > 0 && (seq-from)%max(rate/100, 1) == 0 {
			if err := waitDue(ctx, start, seq-from, rate); err != nil {
				return err
			}
		}
		wg.Add(1)
		b.cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(seq % int(b.cfg.Partitions)), Key: benchKey(seq), Value: benchValue(seq, b.cfg.ValueBytes)}, done)
	}
	wg.Wait()
	return firstErr
}

// variantRun is what one run of a variant measured.
type variantRun struct {
	wall, span    time.Duration
	paced         time.Duration
	p50, p99, max time.Duration
}

// runVariant runs variant from in to out until out holds n records, feeding
// in with pace (nil: in is already full) once a warm-up record per
// partition has come through, stops it, and checks out: read_committed up
// to end markers, exactly the records [0, n) (plus the warm-up ones) each
// once, mapped (copy: unchanged).
func (b *kafkaBench) runVariant(ctx context.Context, variant, in, out string, n int, pace func(context.Context) error) (*variantRun, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	total := n
	if pace != nil {
		// Warm-up records n, n+1, ...: one per partition.
		total += int(b.cfg.Partitions)
	}
	rd, err := newOutputReader(b.bootstrap, out, total, variant != variantCopy, b.cfg.ValueBytes)
	if err != nil {
		return nil, err
	}
	defer rd.close()
	go rd.run(ctx)

	b.runs++
	start := time.Now()
	profile := ""
	if b.cfg.CPUProfile != "" && pace == nil {
		profile = b.cfg.CPUProfile + "." + variant
	}
	stop, err := b.start(ctx, variant, in, out, profile)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	res := &variantRun{}
	if pace != nil {
		if err := b.produce(ctx, in, n, total, 0); err != nil {
			return nil, err
		}
		if err := rd.waitFor(ctx, n, total); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		t := time.Now()
		if err := pace(ctx); err != nil {
			return nil, err
		}
		res.paced = time.Since(t)
	}
	if err := rd.waitFor(ctx, 0, total); err != nil {
		return nil, err
	}
	res.wall = time.Since(start)
	stopped = true
	if err := stop(); err != nil {
		return nil, err
	}
	// Nothing more may arrive: end markers after the variant has stopped
	// bound the read.
	for p := range b.cfg.Partitions {
		if err := b.cl.ProduceSync(ctx, &kgo.Record{Topic: out, Partition: p, Key: []byte(endMarker)}).FirstErr(); err != nil {
			return nil, fmt.Errorf("end marker to %s partition %d: %w", out, p, err)
		}
	}
	if err := rd.waitEnd(ctx, b.cfg.Partitions); err != nil {
		return nil, err
	}
	first, last := rd.span(0, n)
	res.span = last.Sub(first)
	if pace != nil {
		lat, err := b.inputTimes(ctx, in, n)
		if err != nil {
			return nil, err
		}
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(rd.times[i]-lat[i]) * time.Millisecond
		}
		slices.Sort(d)
		res.p50, res.p99, res.max = d[n/2], d[min(n*99/100, n-1)], d[n-1]
	}
	return res, nil
}

// start starts variant reading in and writing out, with a CPU profile of
// the run to profile if not empty; stop stops it and waits until it has.
func (b *kafkaBench) start(ctx context.Context, variant, in, out, profile string) (stop func() error, err error) {
	if variant == variantCopy {
		return b.startCopy(ctx, in, out)
	}
	p, s := beam.NewPipelineWithRoot()
	recs := kafkaio.Read(s, "", b.bootstrap, []string{in}, kafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"}))
	mapped := beam.ParDo(s.Scope(benchMapScope), upperValue, recs)
	kafkaio.Write(s, "", b.bootstrap, out, mapped)

	name := fmt.Sprintf("bench-kafka-%s-%s-%d", b.nonce, variant, b.runs)
	*jobopts.Endpoint = b.endpoints[variant]
	flag.Set("job_name", name)
	beam.PipelineOptions.Set("application_id", name)
	var stopProfile func() error
	if profile != "" {
		if stopProfile, err = startCPUProfile(profile); err != nil {
			return nil, err
		}
	}
	jobCtx, stopJob := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := universal.Execute(jobCtx, p)
		done <- err
	}()
	endpoint := *jobopts.Endpoint
	return func() error {
		defer stopJob()
		err := cancelBenchJob(ctx, endpoint, name, done)
		if stopProfile != nil {
			if perr := stopProfile(); err == nil {
				err = perr
			}
		}
		return err
	}, nil
}

// cancelBenchJob cancels the job named name and waits for its Execute to
// return (done).
func cancelBenchJob(ctx context.Context, endpoint, name string, done <-chan error) error {
	id, err := host.CancelNamed(ctx, endpoint, name)
	if errors.Is(err, host.ErrNoSuchJob) {
		select {
		case err := <-done:
			return fmt.Errorf("job %s ended before it was cancelled: %v", name, err)
		default:
		}
	}
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("job %s: not ended after Cancel: %w", id, ctx.Err())
	}
}

// startCopy runs the copy loop: a GroupTransactSession consuming in
// (read_committed) and producing each record's key and value to out (the
// default partitioner: by key), one transaction per commit interval.
func (b *kafkaBench) startCopy(ctx context.Context, in, out string) (func() error, error) {
	name := fmt.Sprintf("bench-kafka-%s-copy-%d", b.nonce, b.runs)
	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(b.bootstrap, ",")...),
		kgo.TransactionalID(name), kgo.ConsumerGroup(name), kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1_000_000),
	)
	if err != nil {
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	interval := time.Duration(b.cfg.CommitMs) * time.Millisecond
	go func() {
		done <- func() error {
			for loopCtx.Err() == nil {
				if err := s.Begin(); err != nil {
					return fmt.Errorf("copy loop: begin: %w", err)
				}
				end := time.Now().Add(interval)
				var produceErr error
				var mu sync.Mutex
				for time.Now().Before(end) {
					pctx, pcancel := context.WithDeadline(loopCtx, end)
					fs := s.PollFetches(pctx)
					pcancel()
					fs.EachError(func(t string, p int32, err error) {
						mu.Lock()
						if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && produceErr == nil {
							produceErr = fmt.Errorf("copy loop: fetching %s partition %d: %w", t, p, err)
						}
						mu.Unlock()
					})
					fs.EachRecord(func(r *kgo.Record) {
						s.Produce(loopCtx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
							if err != nil {
								mu.Lock()
								if produceErr == nil {
									produceErr = fmt.Errorf("copy loop: producing to %s: %w", out, err)
								}
								mu.Unlock()
							}
						})
					})
					if loopCtx.Err() != nil {
						break
					}
				}
				commit := kgo.TryCommit
				if loopCtx.Err() != nil {
					commit = kgo.TryAbort
				}
				// End flushes: the produce callbacks have all run.
				if _, err := s.End(context.Background(), commit); err != nil {
					return fmt.Errorf("copy loop: end transaction: %w", err)
				}
				if produceErr != nil {
					return produceErr
				}
			}
			return nil
		}()
	}()
	return func() error {
		cancel()
		err := <-done
		s.Close()
		return err
	}, nil
}

// endMarker is the key of the records produced to each output partition
// after a variant stops: the read is complete at them.
const endMarker = "\x00end"

// outputReader reads an output topic read_committed from its start and
// checks each record: record seq at most once, with its expected value.
type outputReader struct {
	cl         *kgo.Client
	topic      string
	mapped     bool
	valueBytes int

	mu    sync.Mutex
	cond  *sync.Cond
	times []int64 // seq -> log-append time (ms); 0: not yet read
	count int     // records read (times not 0)
	ended map[int32]bool
	err   error
	done  bool
}

func newOutputReader(bootstrap, topic string, total int, mapped bool, valueBytes int) (*outputReader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	r := &outputReader{cl: cl, topic: topic, mapped: mapped, valueBytes: valueBytes, times: make([]int64, total), ended: map[int32]bool{}}
	r.cond = sync.NewCond(&r.mu)
	return r, nil
}

func (r *outputReader) close() { r.cl.Close() }

func (r *outputReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// run reads until ctx ends or a record is wrong.
func (r *outputReader) run(ctx context.Context) {
	defer func() {
		r.mu.Lock()
		r.done = true
		r.cond.Broadcast()
		r.mu.Unlock()
	}()
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			r.mu.Lock()
			r.fail(fmt.Errorf("reading %s: %w", r.topic, ctx.Err()))
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		fs.EachError(func(t string, p int32, err error) { r.fail(fmt.Errorf("reading %s partition %d: %w", t, p, err)) })
		fs.EachRecord(func(rec *kgo.Record) { r.check(rec) })
		r.cond.Broadcast()
		failed := r.err != nil
		r.mu.Unlock()
		if failed {
			return
		}
	}
}

// check records rec (r.mu held).
func (r *outputReader) check(rec *kgo.Record) {
	if string(rec.Key) == endMarker {
		r.ended[rec.Partition] = true
		return
	}
	at := func() string { return fmt.Sprintf("%s partition %d offset %d", r.topic, rec.Partition, rec.Offset) }
	if r.ended[rec.Partition] {
		r.fail(fmt.Errorf("%s: a record after the end marker", at()))
		return
	}
	seq := parseKey(rec.Key)
	if seq < 0 || seq >= len(r.times) {
		r.fail(fmt.Errorf("%s: key %q is no input record's", at(), rec.Key))
		return
	}
	if r.times[seq] != 0 {
		r.fail(fmt.Errorf("%s: record %d written twice (exactly once broken)", at(), seq))
		return
	}
	if !isValue(rec.Value, seq, r.valueBytes, r.mapped) {
		want := benchValue(seq, r.valueBytes)
		if r.mapped {
			_, want = upperValue(nil, want)
		}
		r.fail(fmt.Errorf("%s: record %d has value %q, want %q", at(), seq, rec.Value, want))
		return
	}
	r.times[seq] = max(rec.Timestamp.UnixMilli(), 1)
	r.count++
}

// waitFor waits until records [lo, hi) have all been read.
func (r *outputReader) waitFor(ctx context.Context, lo, hi int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.err != nil {
			return r.err
		}
		if !slices.Contains(r.times[lo:hi], 0) {
			return nil
		}
		if r.done {
			return fmt.Errorf("%s: %d of %d records read when the reader stopped", r.topic, r.count, len(r.times))
		}
		r.cond.Wait()
	}
}

// waitEnd waits for the end marker of every partition: then every record
// of the topic has been read, and checked.
func (r *outputReader) waitEnd(ctx context.Context, parts int32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.ended) < int(parts) {
		if r.err != nil {
			return r.err
		}
		if r.done {
			return fmt.Errorf("%s: end markers of %d of %d partitions read when the reader stopped", r.topic, len(r.ended), parts)
		}
		r.cond.Wait()
	}
	if r.err != nil {
		return r.err
	}
	if r.count != len(r.times) {
		return fmt.Errorf("%s: %d records, want %d", r.topic, r.count, len(r.times))
	}
	return nil
}

// span is the first and last log-append time of records [lo, hi).
func (r *outputReader) span(lo, hi int) (first, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, l := slices.Min(r.times[lo:hi]), slices.Max(r.times[lo:hi])
	return time.UnixMilli(f), time.UnixMilli(l)
}

// waitDue paces a producer at rate records/s from start: it waits until
// record n (counting from 0) is due, at start + n/rate. Callers call it
// every rate/100 records or so, so records go out in 10 ms steps.
func waitDue(ctx context.Context, start time.Time, n, rate int) error {
	due := start.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// inputTimes reads records [0, n) of topic (not transactional) and returns
// their log-append times (ms) by sequence number.
func (b *kafkaBench) inputTimes(ctx context.Context, topic string, n int) ([]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.bootstrap, ",")...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	times := make([]int64, n)
	left := n
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s back: %d records left: %w", topic, left, ctx.Err())
		}
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("reading %s back: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seq := parseKey(r.Key)
			if seq >= 0 && seq < n && times[seq] == 0 {
				times[seq] = r.Timestamp.UnixMilli()
				left--
			}
		})
	}
	return times, nil
}
