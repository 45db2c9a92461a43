package host

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// Options are the job-scoped settings. The job server's configuration gives
// their defaults; a job's pipeline options override them.
type Options struct {
	// BootstrapServers is a Kafka broker list, or "embedded" for an in-process
	// broker that keeps data in memory only.
	BootstrapServers string `koanf:"bootstrap_servers"`
	// ApplicationID is the consumer group and internal topic prefix. Required
	// for unbounded pipelines; bounded ones default to one derived from the job.
	ApplicationID string `koanf:"application_id"`
	// InternalParallelism is the partition count of repartition topics.
	InternalParallelism int `koanf:"internal_parallelism"`
	// TopicReplicationFactor of internal topics (-1: the broker's default).
	TopicReplicationFactor int `koanf:"topic_replication_factor"`
	// MaxBundleSize closes a bundle after this many input elements.
	MaxBundleSize int `koanf:"max_bundle_size"`
	// CommitIntervalMs is how often a task commits (closing its bundles).
	CommitIntervalMs int `koanf:"commit_interval_ms"`
	// StateDir holds the Pebble stores; empty means a temporary directory
	// removed when the job ends.
	StateDir string `koanf:"state_dir"`
	// KeepInternalTopics keeps internal topics after a bounded job is DONE.
	KeepInternalTopics bool `koanf:"keep_internal_topics"`
}

// DefaultOptions are the built-in defaults.
func DefaultOptions() Options {
	return Options{
		BootstrapServers:       "embedded",
		InternalParallelism:    4,
		TopicReplicationFactor: -1,
		MaxBundleSize:          100000,
		CommitIntervalMs:       100,
	}
}

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
	case o.CommitIntervalMs < 1:
		return fmt.Errorf("option commit_interval_ms: %d, must be at least 1", o.CommitIntervalMs)
	}
	if o.ApplicationID != "" && sanitizeID(o.ApplicationID) != o.ApplicationID {
		return fmt.Errorf("option application_id: %q has characters Kafka topic names do not allow (use [a-zA-Z0-9._-])", o.ApplicationID)
	}
	return nil
}

func (o Options) commitInterval() time.Duration {
	return time.Duration(o.CommitIntervalMs) * time.Millisecond
}

// pipelineOption finds a pipeline option by name: the Go SDK sends its flags
// under "beam:option:go_options:v1" → "options" (some clients send that
// "options" struct at the top); Python and Java send "beam:option:<name>:v1".
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
	str("bootstrap_servers", &o.BootstrapServers)
	str("application_id", &o.ApplicationID)
	str("state_dir", &o.StateDir)
	for name, dst := range map[string]*int{
		"internal_parallelism":     &o.InternalParallelism,
		"topic_replication_factor": &o.TopicReplicationFactor,
		"max_bundle_size":          &o.MaxBundleSize,
		"commit_interval_ms":       &o.CommitIntervalMs,
	} {
		if err := num(name, dst); err != nil {
			return o, err
		}
	}
	if v, ok := pipelineOption(opts, "keep_internal_topics"); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return o, fmt.Errorf("pipeline option keep_internal_topics: %q is not a boolean", v)
		}
		o.KeepInternalTopics = b
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
		d("application_id", "consumer group and internal topic prefix (required for unbounded pipelines)", jobpb.PipelineOptionType_STRING, ""),
		d("internal_parallelism", "partitions of repartition topics", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.InternalParallelism)),
		d("topic_replication_factor", "replication factor of internal topics (-1: broker default)", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.TopicReplicationFactor)),
		d("max_bundle_size", "input elements per bundle at most", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.MaxBundleSize)),
		d("commit_interval_ms", "how often tasks commit", jobpb.PipelineOptionType_INTEGER, strconv.Itoa(def.CommitIntervalMs)),
		d("state_dir", "directory of the Pebble state stores", jobpb.PipelineOptionType_STRING, ""),
		d("keep_internal_topics", "keep internal topics after a bounded job is done", jobpb.PipelineOptionType_BOOLEAN, "false"),
	}
}
