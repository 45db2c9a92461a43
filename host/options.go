package host

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/host/internal/runtime"
	"github.com/ksrunner/ksrunner/host/internal/task"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
)

// Options are the job-scoped settings. The job server's configuration gives
// their defaults; a job's pipeline options override them.
type Options struct {
	// BootstrapServers is a Kafka broker list, or "embedded" for an in-process
	// broker that keeps data in memory only.
	BootstrapServers string `koanf:"bootstrap_servers"`
	// ApplicationID is the consumer group and internal topic prefix. Unset,
	// a job gets one made from its name for this submission only (an
	// unbounded job is warned: nothing can find it again).
	ApplicationID string `koanf:"application_id"`
	// InternalParallelism is the partition count of repartition topics.
	InternalParallelism int `koanf:"internal_parallelism"`
	// TopicReplicationFactor of internal topics (-1: the broker's default).
	TopicReplicationFactor int `koanf:"topic_replication_factor"`
	// MaxBundleSize closes a bundle after this many input elements.
	MaxBundleSize int `koanf:"max_bundle_size"`
	// MaxBundleTimeMs closes a bundle that has been open this long, at the
	// next batch of input handed to its stage (Beam's maxBundleTimeMills).
	// A commit closes every bundle anyway; this cuts a long commit cycle
	// (a slow stage, a poll of many records) into bundles, so that
	// per-bundle work in user code (FinishBundle, batching DoFns) and the
	// SDK's memory stay bounded.
	MaxBundleTimeMs int `koanf:"max_bundle_time_ms"`
	// RecordPackBytes packs the elements a task writes to an internal data
	// topic (repartition, redistribute/main, flatten, side input) into
	// records of up to this many bytes, one per destination partition
	// (DATA_PACKED): Kafka's per-record cost, not bytes, bounds a
	// shuffle's speed. 0: one element per record. Changelogs and the
	// user's topics keep one value per record whatever it is.
	RecordPackBytes int `koanf:"record_pack_bytes"`
	// InternalMaxMessageBytes is the max.message.bytes of the topics a
	// job creates (repartition, redistribute, flatten, side input,
	// changelog and status topics): the largest element that can cross a
	// topic whole (a group read by a ParDo with side inputs, state or
	// stable input, or used as a side input) and the largest stored value
	// (a user state value, input parked for side inputs). Topics an
	// earlier run created keep theirs.
	InternalMaxMessageBytes int `koanf:"internal_max_message_bytes"`
	// CommitIntervalMs is how often a task commits (closing its bundles).
	CommitIntervalMs int `koanf:"commit_interval_ms"`
	// SourceIdleTimeoutMs is how long a Kafka read's partition that is
	// caught up must stay idle before its watermark advances with wall time.
	SourceIdleTimeoutMs int `koanf:"source_idle_timeout_ms"`
	// SourceMaxDelayMs is how far a Kafka read's watermark stays behind
	// the largest record timestamp of its partition: records up to this
	// much out of order within a partition are on time. 0 is Java
	// KafkaIO's for every policy a cross-language read can name
	// (withCreateTime(Duration.ZERO); LogAppendTime and ProcessingTime
	// hold none).
	SourceMaxDelayMs int `koanf:"source_max_delay_ms"`
	// StateDir holds the Pebble stores; empty means a temporary directory
	// removed when the job ends.
	StateDir string `koanf:"state_dir"`
	// KeepInternalTopics keeps internal topics after a bounded job is DONE, and
	// their consumed records (otherwise shuffle topics are purged after each
	// commit), for inspection.
	KeepInternalTopics bool `koanf:"keep_internal_topics"`
	// ProcessingGuarantee is "exactly_once" (each commit interval is one
	// Kafka transaction: outputs, changelog and consumed offsets) or
	// "at_least_once" (produce, flush, then commit offsets). The embedded
	// broker supports transactions, so the default is exactly_once there too.
	ProcessingGuarantee string `koanf:"processing_guarantee"`

	// StageWASM maps transforms to WASM modules, one "PATTERN=MODULE[#DOFN]"
	// per entry: PATTERN is a transform's unique name or a path.Match glob
	// over unique names (a composite's name maps all of its leaves), MODULE
	// a file path, a file: URL or "artifact:NAME" (a file staged with the
	// job under NAME), DOFN the name the DoFn is registered under in the
	// module (default: the last "/" segment of the transform's unique name).
	// A job's pipeline option replaces the server's list.
	StageWASM []string `koanf:"stage_wasm"`
	// WASMInterruptible (the default) compiles WASM modules so that a
	// bundle past WASMBundleDeadline, or of a cancelled job, is stopped
	// inside guest code (package wasmabi/internal/interrupt: about 1.2x on
	// bench wasm). Off is the fast mode for trusted modules only: a guest
	// that spins then holds up the whole process (see WASMBundleDeadline).
	WASMInterruptible bool `koanf:"wasm_interruptible"`
	// WASMMemoryLimitMB caps the linear memory of every WASM instance (one
	// per task and stage), in MiB; a guest growing past it fails its job
	// with "out of memory", naming the module and stage.
	WASMMemoryLimitMB int `koanf:"wasm_memory_limit_mb"`
	// WASMBundleDeadline bounds a WASM bundle. Past it an interruptible
	// guest is stopped and the bundle fails; a non-interruptible guest
	// cannot be stopped, so the process logs the stage and module and exits
	// (Kafka moves its partitions elsewhere). Zero: no deadline.
	WASMBundleDeadline time.Duration `koanf:"wasm_bundle_deadline"`

	// DeserializationErrorPolicy is what a Kafka read does with a record its
	// key or value deserializer cannot decode, and a Kafka write with an
	// element it cannot produce: "fail" (Kafka Streams' LogAndFail: the
	// job fails naming the record, whose offset stays uncommitted),
	// "dead_letter" (the raw record goes to DeadLetterTopic, in the cycle's
	// transaction, with KIP-1034's headers) or "skip" (dropped, counted).
	DeserializationErrorPolicy string `koanf:"deserialization_error_policy"`
	// DeadLetterTopic is where dead_letter sends bad records; empty means
	// the application's own, __beam_<application_id>_dead-letter, which
	// ksrunner creates. A topic named here must exist.
	DeadLetterTopic string `koanf:"dead_letter_topic"`
	// ReadMaxElementsPerPoll is the most elements one commit cycle takes
	// from the consumer (a packed record of an internal topic counts its
	// elements; a cycle may pass it by a quarter before it is cut); below
	// 100,000 also the most stored groups a GroupByKey fires in one cycle.
	ReadMaxElementsPerPoll int `koanf:"read_max_elements_per_poll"`
	// ReadMaxPollTimeMs is how long a poll waits for records before the
	// cycle goes on to commit what it has; 0 means commit_interval_ms.
	ReadMaxPollTimeMs int `koanf:"read_max_poll_time_ms"`
	// TransactionTimeoutMs is the producer's transaction timeout under
	// exactly_once: the longest one commit cycle may take, and how long a
	// process killed inside a cycle holds read_committed readers when no
	// restart on its state_dir fences it. It must exceed commit_interval_ms
	// and be allowed by the broker's transaction.max.timeout.ms.
	TransactionTimeoutMs int `koanf:"transaction_timeout_ms"`
	// NumStandbyReplicas is how many other instances of the application
	// keep a warm copy of each stateful task's store by following its
	// changelog, so that a task moving to one of them restores only the
	// changelog's tail. Zero: none (a moved task restores from its last
	// local position, or all of its changelog).
	NumStandbyReplicas int `koanf:"num_standby_replicas"`
	// SDKWorkerParallelism is how many workers an environment gets whose
	// SDK runs one bundle at a time per process (it does not declare
	// beam:protocol:multi_core_bundle_processing:v1: Python's bundles
	// share an interpreter); each task runs its bundles on one of them.
	// 0: one per CPU core. SDKs that use every core in one worker (Go,
	// Java) get one whatever it is. Beam's own option of that name.
	SDKWorkerParallelism int `koanf:"sdk_worker_parallelism"`

	// GroupProtocol is the consumer-group protocol of the application's
	// instances: "classic" (JoinGroup/SyncGroup with the cooperative-sticky
	// balancer, Kafka Streams' own) or "consumer" (KIP-848: the broker
	// assigns partitions, incrementally; Kafka 4.0+). Every instance of an
	// application must use the same one.
	GroupProtocol string `koanf:"group_protocol"`
	// SessionTimeoutMs is how long the group waits for a silent instance
	// (killed, paused, cut off) before it moves that instance's tasks to the
	// others. classic: the member's session.timeout.ms, within the broker's
	// group.min/max.session.timeout.ms. consumer: the broker owns the
	// session (group.consumer.session.timeout.ms); a value other than the
	// default is set as the group's consumer.session.timeout.ms, within the
	// broker's group.consumer.min/max.session.timeout.ms.
	SessionTimeoutMs int `koanf:"session_timeout_ms"`
	// BrokerUnavailableTimeoutMs is how long a job goes on without
	// reaching any of its Kafka brokers before it fails, naming them.
	// Until then it retries (with backoff), tells the client in job
	// messages, and resumes by itself when they are back, redoing a commit
	// cycle the outage aborted.
	BrokerUnavailableTimeoutMs int `koanf:"broker_unavailable_timeout_ms"`
}

// DefaultOptions are the built-in defaults.
func DefaultOptions() Options {
	return Options{
		BootstrapServers:       "embedded",
		InternalParallelism:    4,
		TopicReplicationFactor: -1,
		MaxBundleSize:          100000,
		MaxBundleTimeMs:        1000,
		RecordPackBytes:        DefaultRecordPackBytes,
		CommitIntervalMs:       100,
		SourceIdleTimeoutMs:    1000,
		ProcessingGuarantee:    ExactlyOnce,
		SDKWorkerParallelism:   1,
		WASMInterruptible:      true,
		WASMMemoryLimitMB:      DefaultWASMMemoryLimitMB,
		WASMBundleDeadline:     5 * time.Minute,

		DeserializationErrorPolicy: string(task.PolicyFail),
		InternalMaxMessageBytes:    DefaultInternalMaxMessageBytes,
		ReadMaxElementsPerPoll:     250000,
		TransactionTimeoutMs:       int(runtime.DefaultTransactionTimeout / time.Millisecond),
		GroupProtocol:              runtime.GroupProtocolClassic,
		SessionTimeoutMs:           int(runtime.DefaultSessionTimeout / time.Millisecond),
		BrokerUnavailableTimeoutMs: int(runtime.DefaultBrokerUnavailableTimeout / time.Millisecond),
	}
}

// DefaultRecordPackBytes is record_pack_bytes' default, and
// MaxRecordPackBytes its largest value: a pack must fit under the broker's
// message size limit (1 MiB by default) and the producer's.
const (
	DefaultRecordPackBytes = 64 << 10
	MaxRecordPackBytes     = 512 << 10
)

// DefaultInternalMaxMessageBytes is internal_max_message_bytes' default,
// MinInternalMaxMessageBytes and MaxInternalMaxMessageBytes its bounds.
// The default takes groups and state values of a few MiB, as Beam users
// expect, while keeping to what hosted Kafka services allow (some cap a
// topic's max.message.bytes at 8 MiB); the least is Kafka's
// own default (message.max.bytes), and the largest stays well inside the
// client's request limits (franz-go's 100 MiB BrokerMaxWriteBytes and
// BrokerMaxReadBytes).
const (
	DefaultInternalMaxMessageBytes = 8 << 20
	MinInternalMaxMessageBytes     = 1 << 20
	MaxInternalMaxMessageBytes     = topics.MaxRecordLimit
)

// DefaultWASMMemoryLimitMB is wasm_memory_limit_mb's default (wasmabi's
// default too): room for a Go guest's runtime and a few 1 MiB input batches
// with plenty to spare, while internal_parallelism tasks' instances of a
// runaway stage still fit a machine. MaxWASMMemoryLimitMB is all that a
// 32-bit WASM memory can address.
const (
	DefaultWASMMemoryLimitMB = 256
	MaxWASMMemoryLimitMB     = 4096
)

// The values of option processing_guarantee.
const (
	ExactlyOnce = "exactly_once"
	AtLeastOnce = "at_least_once"
)

// exactlyOnce reports whether commit cycles are Kafka transactions.
func (o Options) exactlyOnce() bool { return o.ProcessingGuarantee != AtLeastOnce }

// Validate reports the first invalid option, naming it.
func (o Options) Validate() error {
	switch {
	case o.BootstrapServers == "":
		return fmt.Errorf("option bootstrap_servers: empty (use \"embedded\" or a broker list)")
	case o.InternalParallelism < 1:
		return fmt.Errorf("option internal_parallelism: %d, must be at least 1", o.InternalParallelism)
	case o.TopicReplicationFactor == 0 || o.TopicReplicationFactor < -1:
		return fmt.Errorf("option topic_replication_factor: %d, must be -1 (broker default) or at least 1", o.TopicReplicationFactor)
	case o.MaxBundleSize < 1:
		return fmt.Errorf("option max_bundle_size: %d, must be at least 1", o.MaxBundleSize)
	case o.MaxBundleTimeMs < 1:
		return fmt.Errorf("option max_bundle_time_ms: %d, must be at least 1", o.MaxBundleTimeMs)
	case o.CommitIntervalMs < 1:
		return fmt.Errorf("option commit_interval_ms: %d, must be at least 1", o.CommitIntervalMs)
	case o.SourceIdleTimeoutMs < 1:
		return fmt.Errorf("option source_idle_timeout_ms: %d, must be at least 1", o.SourceIdleTimeoutMs)
	case o.SourceMaxDelayMs < 0:
		return fmt.Errorf("option source_max_delay_ms: %d, must not be negative", o.SourceMaxDelayMs)
	case o.ProcessingGuarantee != ExactlyOnce && o.ProcessingGuarantee != AtLeastOnce:
		return fmt.Errorf("option processing_guarantee: %q, must be %s or %s", o.ProcessingGuarantee, ExactlyOnce, AtLeastOnce)
	case o.NumStandbyReplicas < 0:
		return fmt.Errorf("option num_standby_replicas: %d, must not be negative", o.NumStandbyReplicas)
	case o.SDKWorkerParallelism < 0:
		return fmt.Errorf("option sdk_worker_parallelism: %d, must not be negative (0: one worker per CPU core)", o.SDKWorkerParallelism)
	}
	if _, err := o.stageWASM(); err != nil {
		return err
	}
	if err := o.validateBadRecords("option"); err != nil {
		return err
	}
	if err := o.validateTransactionTimeout("option"); err != nil {
		return err
	}
	if err := o.validateRecordPack("option"); err != nil {
		return err
	}
	if err := o.validateWASM("option"); err != nil {
		return err
	}
	if err := o.validateGroup("option"); err != nil {
		return err
	}
	if err := checkStateDir("option", o.StateDir); err != nil {
		return err
	}
	if o.ApplicationID != "" && sanitizeID(o.ApplicationID) != o.ApplicationID {
		return fmt.Errorf("option application_id: %q has characters Kafka topic names do not allow (use [a-zA-Z0-9._-])", o.ApplicationID)
	}
	return nil
}

// maxBundleTime is MaxBundleTimeMs as a duration.
func (o Options) maxBundleTime() time.Duration {
	return time.Duration(o.MaxBundleTimeMs) * time.Millisecond
}

func (o Options) commitInterval() time.Duration {
	return time.Duration(o.CommitIntervalMs) * time.Millisecond
}

// validateBadRecords checks the options of bad records and of the poll
// loop; src says where the values came from ("option": the job server's
// flags, configuration file or environment; "pipeline option": the job's).
func (o Options) validateBadRecords(src string) error {
	switch p := task.ErrorPolicy(o.DeserializationErrorPolicy); {
	case p != task.PolicyFail && p != task.PolicyDeadLetter && p != task.PolicySkip:
		return fmt.Errorf("%s deserialization_error_policy: %q, must be %s, %s or %s", src, o.DeserializationErrorPolicy, task.PolicyFail, task.PolicyDeadLetter, task.PolicySkip)
	case o.DeadLetterTopic != "" && !validTopicName(o.DeadLetterTopic):
		return fmt.Errorf("%s dead_letter_topic: %q is not a Kafka topic name (at most 249 of [a-zA-Z0-9._-], not \".\" or \"..\")", src, o.DeadLetterTopic)
	case o.ReadMaxElementsPerPoll < 1:
		return fmt.Errorf("%s read_max_elements_per_poll: %d, must be at least 1", src, o.ReadMaxElementsPerPoll)
	case o.ReadMaxPollTimeMs < 0:
		return fmt.Errorf("%s read_max_poll_time_ms: %d, must not be negative (0: commit_interval_ms)", src, o.ReadMaxPollTimeMs)
	}
	return nil
}

// minTransactionTimeoutMs is the least transaction_timeout_ms: the
// broker's own floor for a transaction timeout is 1 ms, but a cycle that
// short would abort under any load.
const minTransactionTimeoutMs = 1000

// validateTransactionTimeout checks transaction_timeout_ms; src says where
// the values came from (see validateBadRecords). The broker's upper limit,
// transaction.max.timeout.ms, is checked when the producer starts.
func (o Options) validateTransactionTimeout(src string) error {
	switch {
	case o.TransactionTimeoutMs < minTransactionTimeoutMs:
		return fmt.Errorf("%s transaction_timeout_ms: %d, must be at least %d", src, o.TransactionTimeoutMs, minTransactionTimeoutMs)
	case o.TransactionTimeoutMs <= o.CommitIntervalMs:
		return fmt.Errorf("%s transaction_timeout_ms: %d, must be more than commit_interval_ms (%d): a commit cycle must fit in one transaction", src, o.TransactionTimeoutMs, o.CommitIntervalMs)
	}
	return nil
}

// validateRecordPack checks record_pack_bytes; src says where the value
// came from (see validateBadRecords).
func (o Options) validateRecordPack(src string) error {
	if o.RecordPackBytes < 0 || o.RecordPackBytes > MaxRecordPackBytes {
		return fmt.Errorf("%s record_pack_bytes: %d, must be 0 (no packing) to %d", src, o.RecordPackBytes, MaxRecordPackBytes)
	}
	if o.InternalMaxMessageBytes < MinInternalMaxMessageBytes || o.InternalMaxMessageBytes > MaxInternalMaxMessageBytes {
		return fmt.Errorf("%s internal_max_message_bytes: %d, must be %d to %d", src, o.InternalMaxMessageBytes, MinInternalMaxMessageBytes, MaxInternalMaxMessageBytes)
	}
	return nil
}

// validateWASM checks the WASM limits; src says where the values came from
// (see validateBadRecords).
func (o Options) validateWASM(src string) error {
	switch {
	case o.WASMBundleDeadline < 0:
		return fmt.Errorf("%s wasm_bundle_deadline: %v, must not be negative", src, o.WASMBundleDeadline)
	case o.WASMMemoryLimitMB < 1 || o.WASMMemoryLimitMB > MaxWASMMemoryLimitMB:
		return fmt.Errorf("%s wasm_memory_limit_mb: %d, must be 1 to %d (MiB of linear memory per WASM instance)", src, o.WASMMemoryLimitMB, MaxWASMMemoryLimitMB)
	}
	return nil
}

// wasmMemoryLimitPages is wasm_memory_limit_mb in 64 KiB WASM pages.
func (o Options) wasmMemoryLimitPages() uint32 { return uint32(o.WASMMemoryLimitMB) * 16 }

// validateGroup checks the consumer-group options; src says where the
// values came from (see validateBadRecords). The broker's limits on
// session_timeout_ms are checked when the instance joins the group.
func (o Options) validateGroup(src string) error {
	switch {
	case o.GroupProtocol != runtime.GroupProtocolClassic && o.GroupProtocol != runtime.GroupProtocolConsumer:
		return fmt.Errorf("%s group_protocol: %q, must be %s or %s", src, o.GroupProtocol, runtime.GroupProtocolClassic, runtime.GroupProtocolConsumer)
	case o.SessionTimeoutMs < 1:
		return fmt.Errorf("%s session_timeout_ms: %d, must be positive (and within the broker's limits, 6000 to 1800000 by default)", src, o.SessionTimeoutMs)
	case o.BrokerUnavailableTimeoutMs < MinBrokerUnavailableTimeoutMs:
		return fmt.Errorf("%s broker_unavailable_timeout_ms: %d, must be at least %d", src, o.BrokerUnavailableTimeoutMs, MinBrokerUnavailableTimeoutMs)
	}
	return nil
}

// MinBrokerUnavailableTimeoutMs is the least broker_unavailable_timeout_ms
// (of a job, or of a worker's pipeline-topic reads):
// a client takes about a second to notice a lost connection and retry it.
const MinBrokerUnavailableTimeoutMs = 1000

// checkStateDir refuses a state_dir whose parent directory does not
// exist: ksrunner creates state_dir, not the directories above it (a typo
// would otherwise put state somewhere nobody looks, or create directories
// wherever a pipeline option says). src says where the value came from
// (see validateBadRecords).
func checkStateDir(src, dir string) error {
	if dir == "" {
		return nil
	}
	parent := filepath.Dir(filepath.Clean(dir))
	fi, err := os.Stat(parent)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s state_dir: %q: its parent directory %s does not exist (ksrunner creates state_dir, not its parents)", src, dir, parent)
	case err != nil:
		return fmt.Errorf("%s state_dir: %q: %w", src, dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s state_dir: %q: %s is not a directory", src, dir, parent)
	}
	return nil
}

// validTopicName reports whether Kafka accepts name as a topic's.
func validTopicName(name string) bool {
	return name != "" && len(name) <= 249 && name != "." && name != ".." && sanitizeID(name) == name
}

// readMaxPollTime is how long a poll waits for records.
func (o Options) readMaxPollTime() time.Duration {
	if o.ReadMaxPollTimeMs == 0 {
		return o.commitInterval()
	}
	return time.Duration(o.ReadMaxPollTimeMs) * time.Millisecond
}

// deadLetterTopic is the Kafka name of the dead-letter topic, and whether
// ksrunner creates it (the application's own) rather than requires it.
func (o Options) deadLetterTopic() (name string, create bool) {
	if o.DeadLetterTopic != "" {
		return o.DeadLetterTopic, false
	}
	return shuffle.TopicName(o.ApplicationID, topics.DeadLetterName), true
}

// pipelineOption finds a pipeline option by name: the Go SDK sends its flags
// as {"beam:option:go_options:v1": {"options": {name: value}}} (older forms:
// a top-level "options"); Python and Java send "beam:option:<name>:v1".
func pipelineOption(opts *structpb.Struct, name string) (string, bool) {
	f := opts.GetFields()
	var v *structpb.Value
	if o := f["beam:option:go_options:v1"].GetStructValue().GetFields()["options"].GetStructValue(); o != nil {
		v = o.GetFields()[name]
	}
	if o := f["options"].GetStructValue(); v == nil && o != nil {
		v = o.GetFields()[name]
	}
	if v == nil {
		v = f["beam:option:"+name+":v1"]
	}
	if v == nil {
		v = f[name]
	}
	if v == nil {
		return "", false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue, k.StringValue != ""
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(k.NumberValue, 'f', -1, 64), true
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(k.BoolValue), true
	}
	return "", false
}

// pipelineOptionList finds a list-valued pipeline option: a list value, or
// a string of entries separated by commas or newlines (how a Go SDK pipeline
// sends a flag, e.g. one set with beam.PipelineOptions.Set or a repeatable
// flag whose String joins its values with commas).
func pipelineOptionList(opts *structpb.Struct, name string) ([]string, bool) {
	f := opts.GetFields()
	goOpts := f["beam:option:go_options:v1"].GetStructValue().GetFields()["options"].GetStructValue().GetFields()
	for _, v := range []*structpb.Value{goOpts[name], f["options"].GetStructValue().GetFields()[name], f["beam:option:"+name+":v1"], f[name]} {
		if l := v.GetListValue(); l != nil {
			var out []string
			for _, e := range l.GetValues() {
				if s := strings.TrimSpace(e.GetStringValue()); s != "" {
					out = append(out, s)
				}
			}
			return out, true
		}
	}
	s, ok := pipelineOption(opts, name)
	if !ok {
		return nil, false
	}
	return splitList(s), true
}

// splitList splits a list given as one string: entries separated by commas
// or newlines, surrounding brackets (a printed Go slice) dropped.
func splitList(s string) []string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	var out []string
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// stageWASM parses StageWASM into translate's pattern -> module reference
// map, checking each entry's form and glob syntax.
func (o Options) stageWASM() (map[string]string, error) {
	if len(o.StageWASM) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, e := range o.StageWASM {
		pat, ref, ok := strings.Cut(strings.TrimSpace(e), "=")
		pat, ref = strings.TrimSpace(pat), strings.TrimSpace(ref)
		if !ok || pat == "" || ref == "" {
			return nil, fmt.Errorf("option stage_wasm: %q: want PATTERN=MODULE[#DOFN] (e.g. 'Split*=file:///path/split.wasm')", e)
		}
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("option stage_wasm: %q: bad pattern %q: %w", e, pat, err)
		}
		if old, dup := m[pat]; dup && old != ref {
			return nil, fmt.Errorf("option stage_wasm: pattern %q is mapped twice (%s and %s)", pat, old, ref)
		}
		m[pat] = ref
	}
	return m, nil
}

// sdkDefaultBootstrapServers is the default of the bootstrap_servers option
// the Beam Python and Java SDKs declare for their Kafka Streams runner. Those
// SDKs send every option with its default, so a pipeline carries this value
// whether or not its user set it; it cannot override the job server's own
// setting. (A job server meant for localhost:9092 is configured so.)
const sdkDefaultBootstrapServers = "localhost:9092"

// sdkDefaultWorkerParallelism is the Python SDK's declared default of its
// sdk_worker_parallelism option, which it sends with every job like
// bootstrap_servers': it cannot override the job server's setting.
const sdkDefaultWorkerParallelism = "1"

// WithPipelineOptions returns o overridden by a job's pipeline options.
func (o Options) WithPipelineOptions(opts *structpb.Struct) (Options, error) {
	str := func(name string, dst *string) {
		if v, ok := pipelineOption(opts, name); ok {
			*dst = v
		}
	}
	num := func(name string, dst *int) error {
		if v, ok := pipelineOption(opts, name); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("pipeline option %s: %q is not an integer", name, v)
			}
			*dst = n
		}
		return nil
	}
	if v, ok := pipelineOption(opts, "bootstrap_servers"); ok && v != sdkDefaultBootstrapServers {
		o.BootstrapServers = v
	}
	if v, ok := pipelineOption(opts, "sdk_worker_parallelism"); ok && v != sdkDefaultWorkerParallelism {
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, fmt.Errorf("pipeline option sdk_worker_parallelism: %q is not an integer", v)
		}
		o.SDKWorkerParallelism = n
	}
	str("application_id", &o.ApplicationID)
	str("state_dir", &o.StateDir)
	str("processing_guarantee", &o.ProcessingGuarantee)
	str("deserialization_error_policy", &o.DeserializationErrorPolicy)
	str("dead_letter_topic", &o.DeadLetterTopic)
	str("group_protocol", &o.GroupProtocol)
	for name, dst := range map[string]*int{
		"internal_parallelism":       &o.InternalParallelism,
		"topic_replication_factor":   &o.TopicReplicationFactor,
		"max_bundle_size":            &o.MaxBundleSize,
		"max_bundle_time_ms":         &o.MaxBundleTimeMs,
		"record_pack_bytes":          &o.RecordPackBytes,
		"internal_max_message_bytes": &o.InternalMaxMessageBytes,
		"commit_interval_ms":         &o.CommitIntervalMs,
		"source_idle_timeout_ms":     &o.SourceIdleTimeoutMs,
		"source_max_delay_ms":        &o.SourceMaxDelayMs,
		"read_max_elements_per_poll": &o.ReadMaxElementsPerPoll,
		"read_max_poll_time_ms":      &o.ReadMaxPollTimeMs,
		"transaction_timeout_ms":     &o.TransactionTimeoutMs,
		"num_standby_replicas":       &o.NumStandbyReplicas,
		"session_timeout_ms":         &o.SessionTimeoutMs,
		"wasm_memory_limit_mb":       &o.WASMMemoryLimitMB,

		"broker_unavailable_timeout_ms": &o.BrokerUnavailableTimeoutMs,
	} {
		if err := num(name, dst); err != nil {
			return o, err
		}
	}
	for name, dst := range map[string]*bool{
		"keep_internal_topics": &o.KeepInternalTopics,
		"wasm_interruptible":   &o.WASMInterruptible,
	} {
		if v, ok := pipelineOption(opts, name); ok {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return o, fmt.Errorf("pipeline option %s: %q is not a boolean", name, v)
			}
			*dst = b
		}
	}
	if v, ok := pipelineOption(opts, "wasm_bundle_deadline"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return o, fmt.Errorf("pipeline option wasm_bundle_deadline: %q is not a duration (e.g. 30s, 5m)", v)
		}
		o.WASMBundleDeadline = d
	}
	if l, ok := pipelineOptionList(opts, "stage_wasm"); ok {
		o.StageWASM = l
	}
	if err := o.validateBadRecords("pipeline option"); err != nil {
		return o, err
	}
	if err := o.validateTransactionTimeout("pipeline option"); err != nil {
		return o, err
	}
	if err := o.validateGroup("pipeline option"); err != nil {
		return o, err
	}
	if err := o.validateRecordPack("pipeline option"); err != nil {
		return o, err
	}
	if err := o.validateWASM("pipeline option"); err != nil {
		return o, err
	}
	if err := checkStateDir("pipeline option", o.StateDir); err != nil {
		return o, err
	}
	return o, o.Validate()
}

func optionDescriptors() []*jobpb.PipelineOptionDescriptor {
	d := func(name, desc string, t jobpb.PipelineOptionType_Enum, def string) *jobpb.PipelineOptionDescriptor {
		return &jobpb.PipelineOptionDescriptor{Name: name, Description: desc, Type: t, DefaultValue: def, Group: "ksrunner"}
	}
	def := DefaultOptions()
	return []*jobpb.PipelineOptionDescriptor{
		d("bootstrap_servers", "Kafka brokers, or \"embedded\" for an in-memory broker", jobpb.PipelineOptionType_STRING, def.BootstrapServers),
		d("application_id", "consumer group and internal topic prefix (default: one made per submission; give one to an unbounded pipeline so that restarts, workers and resubmissions find it)", jobpb.PipelineOptionType_STRING, ""),
		d("internal_parallelism", "partitions of repartition topics", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.InternalParallelism)),
		d("topic_replication_factor", "replication factor of internal topics (-1: broker default)", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.TopicReplicationFactor)),
		d("max_bundle_size", "input elements per bundle at most", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.MaxBundleSize)),
		d("max_bundle_time_ms", MaxBundleTimeMsHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.MaxBundleTimeMs)),
		d("record_pack_bytes", RecordPackBytesHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.RecordPackBytes)),
		d("internal_max_message_bytes", InternalMaxMessageBytesHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.InternalMaxMessageBytes)),
		d("commit_interval_ms", "how often tasks commit", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.CommitIntervalMs)),
		d("source_idle_timeout_ms", "how long a caught-up Kafka read partition stays idle before its watermark follows wall time", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.SourceIdleTimeoutMs)),
		d("source_max_delay_ms", SourceMaxDelayMsHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.SourceMaxDelayMs)),
		d("state_dir", "directory of the Pebble state stores", jobpb.PipelineOptionType_STRING, ""),
		d("processing_guarantee", "exactly_once (each commit interval is a Kafka transaction) or at_least_once (faster; output may repeat after a failure)", jobpb.PipelineOptionType_STRING, def.ProcessingGuarantee),
		d("keep_internal_topics", "keep internal topics, whole, after a bounded job is done (consumed shuffle records are otherwise purged after each commit)", jobpb.PipelineOptionType_BOOLEAN, "false"),
		d("stage_wasm", "PATTERN=MODULE[#DOFN] entries: run the transforms whose unique name matches PATTERN as WASM DoFns of MODULE (a file path, file: URL or artifact:NAME)", jobpb.PipelineOptionType_ARRAY, ""),
		d("wasm_interruptible", WASMInterruptibleHelp, jobpb.PipelineOptionType_BOOLEAN, strconv.FormatBool(def.WASMInterruptible)),
		d("wasm_memory_limit_mb", WASMMemoryLimitMBHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.WASMMemoryLimitMB)),
		d("wasm_bundle_deadline", "longest a WASM bundle may run (e.g. 30s; 0: no limit)", jobpb.PipelineOptionType_STRING, def.WASMBundleDeadline.String()),
		d("deserialization_error_policy", DeserializationErrorPolicyHelp, jobpb.PipelineOptionType_STRING, def.DeserializationErrorPolicy),
		d("dead_letter_topic", DeadLetterTopicHelp, jobpb.PipelineOptionType_STRING, ""),
		d("read_max_elements_per_poll", ReadMaxElementsPerPollHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.ReadMaxElementsPerPoll)),
		d("read_max_poll_time_ms", ReadMaxPollTimeMsHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.ReadMaxPollTimeMs)),
		d("transaction_timeout_ms", TransactionTimeoutMsHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.TransactionTimeoutMs)),
		d("num_standby_replicas", NumStandbyReplicasHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.NumStandbyReplicas)),
		d("sdk_worker_parallelism", SDKWorkerParallelismHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.SDKWorkerParallelism)),
		d("group_protocol", GroupProtocolHelp, jobpb.PipelineOptionType_STRING, def.GroupProtocol),
		d("session_timeout_ms", SessionTimeoutMsHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.SessionTimeoutMs)),
		d("broker_unavailable_timeout_ms", BrokerUnavailableTimeoutMsHelp, jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.BrokerUnavailableTimeoutMs)),
	}
}

// The descriptions of the bad-record, poll, bundle-time and transaction
// options (the job server's flags use them too).
const (
	DeserializationErrorPolicyHelp = "what a Kafka read does with a record it cannot deserialize, and a Kafka write with an element it cannot produce: fail (the job fails naming it; its offset stays uncommitted), dead_letter (the raw record goes to dead_letter_topic with KIP-1034 __streams.errors.* headers) or skip (dropped and counted in skipped_records)"
	DeadLetterTopicHelp            = "dead-letter topic of deserialization_error_policy=dead_letter (default: __beam_<application_id>_dead-letter, created by ksrunner; a topic named here must exist)"
	ReadMaxElementsPerPollHelp     = "most elements one commit cycle takes (a packed record of an internal topic counts its elements; a cycle may pass it by a quarter); below 100000 also the most stored groups a GroupByKey fires in one cycle"
	ReadMaxPollTimeMsHelp          = "how long a poll waits for records before the cycle commits (0: commit_interval_ms)"
	RecordPackBytesHelp            = "pack the elements a task writes to an internal shuffle topic into records of up to this many bytes, one per destination partition (0: one element per record; changelogs and the user's topics always keep one per record)"
	SourceMaxDelayMsHelp           = "how far a Kafka read's watermark stays behind the largest record timestamp of its partition: records out of order by up to this much are on time (0: none, as Java KafkaIO's withCreateTime(Duration.ZERO) that a cross-language read gets)"
	MaxBundleTimeMsHelp            = "a bundle open this long closes at the next batch of input handed to its stage (every bundle closes before a commit anyway)"
	SDKWorkerParallelismHelp       = "workers of each environment whose SDK runs one bundle at a time per process (Python), the tasks' bundles spread over them (0: one per CPU core; Go and Java SDKs, which use every core, get one)"
	NumStandbyReplicasHelp         = "how many other instances keep a warm copy of each stateful task's store (following its changelog), so that a task moving to one of them restores only the changelog's tail (0: none)"
	GroupProtocolHelp              = "consumer-group protocol of the application's instances: classic (cooperative-sticky balancer, as Kafka Streams) or consumer (KIP-848, the broker assigns partitions; Kafka 4.0+); the same for every instance"
	SessionTimeoutMsHelp           = "how long the group waits for a silent instance before moving its tasks to the others; classic: the member's session timeout (within the broker's group.min/max.session.timeout.ms); consumer: set, if not the default, as the group's consumer.session.timeout.ms (within group.consumer.min/max.session.timeout.ms)"
	WASMInterruptibleHelp          = "stop WASM guest code past wasm_bundle_deadline or when its job is cancelled (the default; about 1.2x guest time); false is a fast mode for trusted modules only, in which a guest that never returns holds up the whole process"
	WASMMemoryLimitMBHelp          = "most linear memory of a WASM instance (one per task and stage), in MiB; a guest that needs more fails its job with \"out of memory\", naming the module and stage"
	BrokerUnavailableTimeoutMsHelp = "how long a job goes on without reaching any of its Kafka brokers (retrying with backoff; it resumes by itself when they are back) before it fails, naming them"
	InternalMaxMessageBytesHelp    = "max.message.bytes of the topics a job creates: the largest element that crosses one whole (a group read by a ParDo with side inputs or state, a side input's element) and the largest stored state value; topics an earlier run created keep theirs"
	TransactionTimeoutMsHelp       = "exactly_once transaction timeout: the longest a commit cycle may take, and how long a process killed inside one holds read_committed readers unless restarted on the same state_dir (which fences it at once); more than commit_interval_ms, at most the broker's transaction.max.timeout.ms"
)

// topology is what in the options decides the job's topics and stages,
// for the pipeline's fingerprint (application.Spec.Topology): a
// resubmission that changes it is another pipeline.
func (o Options) topology() string {
	return fmt.Sprintf("internal_parallelism=%d stage_wasm=%q", o.InternalParallelism, o.StageWASM)
}

// wasmCacheDir is where compiled modules are cached: under state_dir, or a
// directory shared by the processes of this machine (wazero keys entries by
// the module's hash and its own version, so sharing is safe).
func (o Options) wasmCacheDir() string {
	if o.StateDir != "" {
		return filepath.Join(o.StateDir, "wasm-cache")
	}
	return filepath.Join(os.TempDir(), "ksrunner-wasm-cache")
}
