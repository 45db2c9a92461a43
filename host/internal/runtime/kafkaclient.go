package runtime

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaio"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/translate"
)

// The consumer and producer settings of a pipeline's Kafka reads and writes
// that the instance's client honours.
//
// An instance has one client: one consumer (of the user's topics and of the
// internal topics alike) and one transactional producer, because a commit
// cycle's offsets and output must be in one transaction. So a setting of a
// read or write is a setting of that client, and applies to the internal
// topics too. Invariants:
//   - A setting is either honoured (translated to its franz-go option
//     below) or reported (logged at Run, naming the transform and the
//     settings): none is silently dropped.
//   - Two transforms giving the same client-wide setting different values
//     fail the job at Run, naming both: the client cannot honour both.
//   - A value that does not parse fails the job at Run, naming the
//     transform, the setting and the value.
//   - Under exactly_once, acks must be all (a transactional producer is
//     idempotent, which needs acks=all, as in Kafka's Java client).
//
// auto.offset.reset and isolation.level are honoured elsewhere
// (startOffsets; translate refuses all but read_committed);
// metadata.max.age.ms is how often the client looks for partitions added
// to the topics it reads: reads giving different values get the shortest
// (metadataMaxAge), which serves every one of them;
// bootstrap.servers is checked by checkKafkaIO; the security settings
// (security.*, sasl.*, ssl.*) are the connection of every client of the
// job (kafkaio.JobSecurity).

// clientSetting maps one Kafka setting to a franz-go option.
type clientSetting struct {
	// opt parses the value; exactlyOnce says whether the job runs in
	// transactions.
	opt func(v string, exactlyOnce bool) ([]kgo.Opt, error)
}

func positiveInt(v string) (int32, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive integer")
	}
	return int32(n), nil
}

func millis(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want milliseconds, a non-negative integer")
	}
	return time.Duration(n) * time.Millisecond, nil
}

func bytesOpt(f func(int32) kgo.Opt) func(string, bool) ([]kgo.Opt, error) {
	return func(v string, _ bool) ([]kgo.Opt, error) {
		n, err := positiveInt(v)
		if err != nil {
			return nil, err
		}
		return []kgo.Opt{f(n)}, nil
	}
}

func millisOpt(f func(time.Duration) kgo.Opt) func(string, bool) ([]kgo.Opt, error) {
	return func(v string, _ bool) ([]kgo.Opt, error) {
		d, err := millis(v)
		if err != nil {
			return nil, err
		}
		return []kgo.Opt{f(d)}, nil
	}
}

func checkPositive(v string, _ bool) ([]kgo.Opt, error) {
	_, err := positiveInt(v)
	return nil, err
}

func clientID(v string, _ bool) ([]kgo.Opt, error) {
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("empty")
	}
	return []kgo.Opt{kgo.ClientID(v)}, nil
}

// consumerSettings are the consumer settings honoured, by Kafka name.
var consumerSettings = map[string]clientSetting{
	"fetch.max.bytes":           {bytesOpt(func(n int32) kgo.Opt { return kgo.FetchMaxBytes(n) })},
	"max.partition.fetch.bytes": {bytesOpt(func(n int32) kgo.Opt { return kgo.FetchMaxPartitionBytes(n) })},
	"fetch.min.bytes":           {bytesOpt(func(n int32) kgo.Opt { return kgo.FetchMinBytes(n) })},
	"fetch.max.wait.ms":         {millisOpt(func(d time.Duration) kgo.Opt { return kgo.FetchMaxWait(d) })},
	"client.id":                 {clientID},
}

// producerSettings are the producer settings honoured, by Kafka name.
var producerSettings = map[string]clientSetting{
	"compression.type": {func(v string, _ bool) ([]kgo.Opt, error) {
		c, ok := map[string]kgo.CompressionCodec{
			"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
			"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
		}[strings.ToLower(strings.TrimSpace(v))]
		if !ok {
			return nil, fmt.Errorf("want none, gzip, snappy, lz4 or zstd")
		}
		return []kgo.Opt{kgo.ProducerBatchCompression(c)}, nil
	}},
	"linger.ms": {millisOpt(func(d time.Duration) kgo.Opt { return kgo.ProducerLinger(d) })},
	"client.id": {clientID},
	// batch.size and max.request.size: see batchLimit.
	"max.request.size": {checkPositive},
	"batch.size":       {checkPositive},
	// buffer.memory: see kafkaClientConfig (it must hold the largest record).
	"buffer.memory": {checkPositive},
	"acks": {func(v string, exactlyOnce bool) ([]kgo.Opt, error) {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "all", "-1":
			return []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}, nil
		case "0", "1":
			if exactlyOnce {
				return nil, fmt.Errorf("exactly_once writes in transactions, which need acks=all (run the job with processing_guarantee=at_least_once for acks=%s)", v)
			}
			acks := kgo.LeaderAck()
			if v == "0" {
				acks = kgo.NoAck()
			}
			return []kgo.Opt{kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite()}, nil
		}
		return nil, fmt.Errorf("want all, -1, 0 or 1")
	}},
}

// givenSetting is one transform's value of a setting.
type givenSetting struct{ transform, value string }

// clientConfig is what a plan's Kafka reads and writes ask of the
// instance's client: the options honouring their settings, and the
// settings reported as not applied, per transform.
type clientConfig struct {
	opts       []kgo.Opt
	notApplied map[string][]string // transform -> settings, sorted
	// batchMaxBytes is the producer's ProducerBatchMaxBytes: the largest
	// record it sends (task.Env.MaxRecordBytes).
	batchMaxBytes int32
	// bufferBytes is the producer's MaxBufferedBytes (buffer.memory).
	bufferBytes int
	// bufferGiven is the transform whose buffer.memory set bufferBytes
	// ("": the default).
	bufferGiven string
	// metadataMaxAge is the shortest metadata.max.age.ms of the reads;
	// 0: none gave one (franz-go's default, 5 minutes).
	metadataMaxAge time.Duration
}

// kafkaClientConfig collects the settings of the plan's Kafka reads and
// writes; see the invariants above.
func kafkaClientConfig(plan *translate.Plan, exactlyOnce bool) (*clientConfig, error) {
	cc := &clientConfig{notApplied: map[string][]string{}, batchMaxBytes: defaultBatchMaxBytes}
	given := map[string]givenSetting{} // "consumer:name" or "producer:name" -> first transform's value
	add := func(kind, transform string, conf map[string]string, honoured map[string]clientSetting, handled ...string) error {
		keys := make([]string, 0, len(conf))
		for k := range conf {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := conf[k]
			s, ok := honoured[k]
			if !ok {
				// Security settings are the job's connection
				// (kafkaio.JobSecurity), not client settings.
				if !slices.Contains(handled, k) && !kafkaio.IsSecurityKey(k) {
					cc.notApplied[transform] = append(cc.notApplied[transform], k)
				}
				continue
			}
			// client.id names the one client: the same for consumer and
			// producer.
			gk := kind + ":" + k
			if k == "client.id" {
				gk = k
			}
			if g, ok := given[gk]; ok {
				if g.value != v {
					return fmt.Errorf("transforms %s and %s: %s config %s is %q and %q: an instance has one Kafka client for all its reads and writes, so they must agree", g.transform, transform, kind, k, g.value, v)
				}
				continue
			}
			given[gk] = givenSetting{transform, v}
			opts, err := s.opt(v, exactlyOnce)
			if err != nil {
				return fmt.Errorf("transform %s: %s config %s=%q: %w", transform, kind, k, v, err)
			}
			cc.opts = append(cc.opts, opts...)
		}
		return nil
	}
	for _, st := range plan.SubTopologies {
		if r := st.Root.KafkaRead; r != nil {
			if err := add("consumer", st.Root.TransformID, r.ConsumerConfig, consumerSettings, "auto.offset.reset", "isolation.level", "bootstrap.servers", "metadata.max.age.ms"); err != nil {
				return nil, err
			}
			if v, ok := r.ConsumerConfig["metadata.max.age.ms"]; ok {
				d, err := metadataMaxAge(v)
				if err != nil {
					return nil, fmt.Errorf("transform %s: consumer config metadata.max.age.ms=%q: %w", st.Root.TransformID, v, err)
				}
				if cc.metadataMaxAge == 0 || d < cc.metadataMaxAge {
					cc.metadataMaxAge = d
				}
			}
		}
		for _, sk := range st.Sinks {
			if w := sk.KafkaWrite; w != nil {
				if err := add("producer", sk.TransformID, w.ProducerConfig, producerSettings, "bootstrap.servers"); err != nil {
					return nil, err
				}
			}
		}
	}
	if limit, ok := batchLimit(given["producer:batch.size"].value, given["producer:max.request.size"].value); ok {
		cc.batchMaxBytes = limit
	}
	// The producer buffers at most buffer.memory bytes of records not yet
	// acknowledged (Produce blocks beyond), as Kafka's producer does; a
	// record larger than the buffer would fail at once, so the buffer
	// holds at least the largest record the producer sends.
	cc.bufferBytes = max(DefaultProducerBufferBytes, 2*int(cc.batchMaxBytes))
	if g, ok := given["producer:buffer.memory"]; ok {
		n, _ := positiveInt(g.value) // checked above
		if int64(n) < int64(cc.batchMaxBytes) {
			return nil, fmt.Errorf("transform %s: producer config buffer.memory=%s is less than the largest record the producer sends (%d bytes: max.request.size and batch.size)", g.transform, g.value, cc.batchMaxBytes)
		}
		cc.bufferBytes, cc.bufferGiven = int(n), g.transform
	}
	if d := cc.metadataMaxAge; d > 0 {
		// franz-go refuses a max age below its min age (5 s by default),
		// which also spaces the refreshes its errors trigger.
		cc.opts = append(cc.opts, kgo.MetadataMaxAge(d), kgo.MetadataMinAge(min(d, 5*time.Second)))
	}
	return cc, nil
}

// producerLimits completes the producer's options for the topics of ts:
// each internal topic takes batches (so records) up to its own
// max.message.bytes (internal_max_message_bytes when Create made it), a
// user's topic up to batchMaxBytes or its own max.message.bytes if lower
// (franz-go fills a batch up to its limit, and a broker refuses a batch
// over the topic's, failing the whole cycle for records that each fit).
// The buffer holds the largest record too: franz-go fails a record larger
// than its buffer at once.
func (cc *clientConfig) producerLimits(ts *topics.Set) ([]kgo.Opt, error) {
	isInternal := map[string]bool{}
	for _, name := range ts.InternalNames() {
		isInternal[name] = true
	}
	internal := map[string]int32{}
	user := map[string]int32{}
	largest := cc.batchMaxBytes
	for name := range ts.MaxMessageBytes {
		m := ts.RecordLimit(name)
		if isInternal[name] {
			internal[name] = m
			largest = max(largest, m)
		} else {
			user[name] = min(m, cc.batchMaxBytes)
		}
	}
	buffer := cc.bufferBytes
	if int64(buffer) < int64(largest) {
		if cc.bufferGiven != "" {
			return nil, fmt.Errorf("transform %s: producer config buffer.memory=%d is less than the largest record the producer may send (%d bytes: the internal topics' max.message.bytes, internal_max_message_bytes)", cc.bufferGiven, buffer, largest)
		}
		buffer = 2 * int(largest)
	}
	limit := func(topic string) int32 {
		if m, ok := internal[topic]; ok {
			return m
		}
		if m, ok := user[topic]; ok {
			return m
		}
		if isInternal[topic] {
			return topics.DefaultRecordLimit
		}
		return cc.batchMaxBytes
	}
	return []kgo.Opt{kgo.ProducerBatchMaxBytesFn(limit), kgo.MaxBufferedBytes(buffer)}, nil
}

// metadataMaxAge parses metadata.max.age.ms: how long the client keeps
// its metadata before it asks again, and so how soon it finds partitions
// added to a topic it reads (Kafka's consumer default and franz-go's: 5
// minutes). franz-go takes 10 ms to an hour.
func metadataMaxAge(v string) (time.Duration, error) {
	d, err := millis(v)
	if err != nil {
		return 0, err
	}
	if d < 10*time.Millisecond || d > time.Hour {
		return 0, fmt.Errorf("want 10 to 3600000 milliseconds")
	}
	return d, nil
}

// DefaultProducerBufferBytes is the producer's buffer when no Kafka write
// sets buffer.memory: Kafka's producer default, 32 MiB.
const DefaultProducerBufferBytes = 32 << 20

// defaultBatchMaxBytes is franz-go's default ProducerBatchMaxBytes.
const defaultBatchMaxBytes = 1_000_012

// batchLimit is the producer's batch limit for the given batch.size and
// max.request.size (either may be empty, both are valid): franz-go has one
// limit, ProducerBatchMaxBytes, which is also the largest record it
// produces. Java's max.request.size is that hard limit; its batch.size is
// only a target (a larger record goes in a batch of its own), so it raises
// the limit when larger and never lowers it below max.request.size (or
// franz-go's default), which would refuse records Java sends.
func batchLimit(batchSize, maxRequestSize string) (int32, bool) {
	if batchSize == "" && maxRequestSize == "" {
		return 0, false
	}
	limit := int32(defaultBatchMaxBytes)
	if maxRequestSize != "" {
		limit, _ = positiveInt(maxRequestSize)
	}
	if batchSize != "" {
		b, _ := positiveInt(batchSize)
		limit = max(limit, b)
	}
	return limit, true
}
