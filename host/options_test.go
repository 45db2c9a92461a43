package host

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// The pipeline options as each SDK sends them (the Go SDK's as built by
// runnerlib.Prepare: runtime.RawOptionsWrapper through JSON).
func TestWithPipelineOptionsPerSDK(t *testing.T) {
	for name, js := range map[string]string{
		"go":     `{"beam:option:go_options:v1": {"options": {"internal_parallelism": "7", "endpoint": "x"}}, "beam:option:runner:v1": "universal"}`,
		"flat":   `{"options": {"internal_parallelism": "7"}}`,
		"python": `{"beam:option:internal_parallelism:v1": 7}`,
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		o, err := DefaultOptions().WithPipelineOptions(&s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o.InternalParallelism != 7 {
			t.Errorf("%s: internal_parallelism %d, want 7", name, o.InternalParallelism)
		}
	}
}

// The Python and Java SDKs send bootstrap_servers with its declared default
// whether or not the user set it: that value keeps the job server's broker,
// any other value overrides it.
func TestBootstrapServersSDKDefault(t *testing.T) {
	for _, tc := range []struct{ server, job, want string }{
		{"embedded", `{"beam:option:bootstrap_servers:v1": "localhost:9092"}`, "embedded"},
		{"broker:9092", `{"beam:option:bootstrap_servers:v1": "localhost:9092"}`, "broker:9092"},
		{"embedded", `{"beam:option:bootstrap_servers:v1": "other:9093"}`, "other:9093"},
		{"embedded", `{"beam:option:go_options:v1": {"options": {"bootstrap_servers": "g:1"}}}`, "g:1"},
		{"localhost:9092", `{}`, "localhost:9092"},
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.job), &s); err != nil {
			t.Fatal(err)
		}
		def := DefaultOptions()
		def.BootstrapServers = tc.server
		o, err := def.WithPipelineOptions(&s)
		if err != nil {
			t.Fatal(err)
		}
		if o.BootstrapServers != tc.want {
			t.Errorf("server %s, job %s: bootstrap_servers %q, want %q", tc.server, tc.job, o.BootstrapServers, tc.want)
		}
	}
}

func TestProcessingGuaranteeOption(t *testing.T) {
	if d := DefaultOptions(); d.ProcessingGuarantee != ExactlyOnce || !d.exactlyOnce() {
		t.Errorf("default processing_guarantee %q, want %q", d.ProcessingGuarantee, ExactlyOnce)
	}
	for js, want := range map[string]string{
		`{"beam:option:go_options:v1": {"options": {"processing_guarantee": "at_least_once"}}}`: AtLeastOnce,
		`{"beam:option:processing_guarantee:v1": "exactly_once"}`:                               ExactlyOnce,
		`{}`: ExactlyOnce,
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		o, err := DefaultOptions().WithPipelineOptions(&s)
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if o.ProcessingGuarantee != want {
			t.Errorf("%s: processing_guarantee %q, want %q", js, o.ProcessingGuarantee, want)
		}
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:processing_guarantee:v1": "at_most_once"}`), &s); err != nil {
		t.Fatal(err)
	}
	if _, err := DefaultOptions().WithPipelineOptions(&s); err == nil {
		t.Error("processing_guarantee at_most_once was accepted")
	}
}

// The bad-record and poll options: defaults as before (fail; 100,000
// records per poll, waiting commit_interval_ms), a job's pipeline options
// override them, and a bad value is an error naming the option, the value
// and where it came from.
func TestBadRecordAndPollOptions(t *testing.T) {
	d := DefaultOptions()
	if d.DeserializationErrorPolicy != "fail" || d.ReadMaxElementsPerPoll != 250000 || d.readMaxPollTime() != d.commitInterval() {
		t.Errorf("defaults: policy %q, %d per poll, poll time %v; want fail, 100000, %v", d.DeserializationErrorPolicy, d.ReadMaxElementsPerPoll, d.readMaxPollTime(), d.commitInterval())
	}
	d.ApplicationID = "app"
	if name, create := d.deadLetterTopic(); name != "__beam_app_dead-letter" || !create {
		t.Errorf("default dead-letter topic %q (create %v), want __beam_app_dead-letter, created", name, create)
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:go_options:v1": {"options": {"deserialization_error_policy": "dead_letter", "dead_letter_topic": "bad.ones", "read_max_elements_per_poll": "10", "read_max_poll_time_ms": "250"}}}`), &s); err != nil {
		t.Fatal(err)
	}
	o, err := d.WithPipelineOptions(&s)
	if err != nil {
		t.Fatal(err)
	}
	if name, create := o.deadLetterTopic(); o.DeserializationErrorPolicy != "dead_letter" || name != "bad.ones" || create || o.ReadMaxElementsPerPoll != 10 || o.readMaxPollTime().Milliseconds() != 250 {
		t.Errorf("from pipeline options: %+v", o)
	}
	for _, tc := range []struct{ js, want string }{
		{`{"beam:option:deserialization_error_policy:v1": "ignore"}`, `pipeline option deserialization_error_policy: "ignore", must be fail, dead_letter or skip`},
		{`{"beam:option:dead_letter_topic:v1": "bad topic"}`, `pipeline option dead_letter_topic: "bad topic" is not a Kafka topic name`},
		{`{"beam:option:read_max_elements_per_poll:v1": 0}`, `pipeline option read_max_elements_per_poll: 0, must be at least 1`},
		{`{"beam:option:read_max_poll_time_ms:v1": -5}`, `pipeline option read_max_poll_time_ms: -5, must not be negative`},
		{`{"beam:option:read_max_poll_time_ms:v1": "soon"}`, `pipeline option read_max_poll_time_ms: "soon" is not an integer`},
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.js), &s); err != nil {
			t.Fatal(err)
		}
		if _, err := DefaultOptions().WithPipelineOptions(&s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.js, err, tc.want)
		}
	}
	bad := DefaultOptions()
	bad.DeserializationErrorPolicy = "Skip"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `option deserialization_error_policy: "Skip"`) {
		t.Errorf("Validate: %v, want an error naming deserialization_error_policy and \"Skip\"", err)
	}
}

// TestTransactionTimeoutOption: transaction_timeout_ms defaults well under
// the old five minutes, above commit_interval_ms; a job's pipeline option
// sets it; bad values are refused naming the option and where it came from.
func TestTransactionTimeoutOption(t *testing.T) {
	d := DefaultOptions()
	if d.TransactionTimeoutMs != 60000 || d.Validate() != nil {
		t.Errorf("default transaction_timeout_ms %d (valid: %v), want 60000", d.TransactionTimeoutMs, d.Validate())
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:transaction_timeout_ms:v1": "300000"}`), &s); err != nil {
		t.Fatal(err)
	}
	if o, err := d.WithPipelineOptions(&s); err != nil || o.TransactionTimeoutMs != 300000 {
		t.Errorf("pipeline option transaction_timeout_ms=300000: %d, %v", o.TransactionTimeoutMs, err)
	}
	wantPipelineOptionErrors(t, []pipelineOptionError{
		{`{"beam:option:transaction_timeout_ms:v1": 10}`, `pipeline option transaction_timeout_ms: 10, must be at least 1000`},
		{`{"beam:option:transaction_timeout_ms:v1": 2000, "beam:option:commit_interval_ms:v1": 2000}`, `pipeline option transaction_timeout_ms: 2000, must be more than commit_interval_ms (2000)`},
		{`{"beam:option:transaction_timeout_ms:v1": "1m"}`, `pipeline option transaction_timeout_ms: "1m" is not an integer`},
	})
	bad := DefaultOptions()
	bad.CommitIntervalMs = 90000
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "option transaction_timeout_ms: 60000, must be more than commit_interval_ms (90000)") {
		t.Errorf("Validate: %v, want an error naming transaction_timeout_ms", err)
	}
}

// TestMaxBundleTimeOption: max_bundle_time_ms defaults to Beam's 1000 ms
// and reaches the runtime as a duration; a job's pipeline option sets it;
// a value under 1 is refused naming the option; the job server describes
// it to SDKs.
func TestMaxBundleTimeOption(t *testing.T) {
	d := DefaultOptions()
	if d.MaxBundleTimeMs != 1000 || d.maxBundleTime() != time.Second {
		t.Errorf("default max_bundle_time_ms %d (%v), want 1000 (1s)", d.MaxBundleTimeMs, d.maxBundleTime())
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:go_options:v1": {"options": {"max_bundle_time_ms": "250"}}}`), &s); err != nil {
		t.Fatal(err)
	}
	if o, err := d.WithPipelineOptions(&s); err != nil || o.maxBundleTime() != 250*time.Millisecond {
		t.Errorf("pipeline option max_bundle_time_ms=250: %v, %v", o.maxBundleTime(), err)
	}
	for _, tc := range []struct{ js, want string }{
		{`{"beam:option:max_bundle_time_ms:v1": 0}`, `option max_bundle_time_ms: 0, must be at least 1`},
		{`{"beam:option:max_bundle_time_ms:v1": "1s"}`, `pipeline option max_bundle_time_ms: "1s" is not an integer`},
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.js), &s); err != nil {
			t.Fatal(err)
		}
		if _, err := DefaultOptions().WithPipelineOptions(&s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.js, err, tc.want)
		}
	}
	found := false
	for _, od := range optionDescriptors() {
		if od.GetName() == "max_bundle_time_ms" {
			found = od.GetDefaultValue() == "1000"
		}
	}
	if !found {
		t.Error("no descriptor of max_bundle_time_ms with default 1000")
	}
}

// TestGroupOptions: group_protocol defaults to classic and session_timeout_ms
// to Kafka Streams' 45 s; a job's pipeline options set them; bad values are
// refused naming the option and where it came from; both are described to
// the SDKs.
func TestGroupOptions(t *testing.T) {
	d := DefaultOptions()
	if d.GroupProtocol != "classic" || d.SessionTimeoutMs != 45000 || d.Validate() != nil {
		t.Errorf("defaults: group_protocol %q, session_timeout_ms %d (valid: %v)", d.GroupProtocol, d.SessionTimeoutMs, d.Validate())
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:go_options:v1": {"options": {"group_protocol": "consumer", "session_timeout_ms": "10000"}}}`), &s); err != nil {
		t.Fatal(err)
	}
	if o, err := d.WithPipelineOptions(&s); err != nil || o.GroupProtocol != "consumer" || o.SessionTimeoutMs != 10000 {
		t.Errorf("pipeline options: %q %d, %v", o.GroupProtocol, o.SessionTimeoutMs, err)
	}
	wantPipelineOptionErrors(t, []pipelineOptionError{
		{`{"beam:option:group_protocol:v1": "streams"}`, `pipeline option group_protocol: "streams", must be classic or consumer`},
		{`{"beam:option:session_timeout_ms:v1": -5}`, `pipeline option session_timeout_ms: -5, must be positive`},
		{`{"beam:option:session_timeout_ms:v1": "45s"}`, `pipeline option session_timeout_ms: "45s" is not an integer`},
	})
	bad := DefaultOptions()
	bad.GroupProtocol = "eager"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `option group_protocol: "eager"`) {
		t.Errorf("Validate: %v, want an error naming group_protocol", err)
	}
	described := map[string]string{}
	for _, o := range optionDescriptors() {
		described[o.GetName()] = o.GetDefaultValue()
	}
	if described["group_protocol"] != "classic" || described["session_timeout_ms"] != "45000" {
		t.Errorf("descriptors: group_protocol %q, session_timeout_ms %q", described["group_protocol"], described["session_timeout_ms"])
	}
}

// pipelineOptionError is a job's pipeline options (JSON) and the error they
// must make.
type pipelineOptionError struct{ js, want string }

// wantPipelineOptionErrors checks that each case's pipeline options over
// the defaults fail with an error containing its want.
func wantPipelineOptionErrors(t *testing.T, cases []pipelineOptionError) {
	t.Helper()
	for _, tc := range cases {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.js), &s); err != nil {
			t.Fatal(err)
		}
		if _, err := DefaultOptions().WithPipelineOptions(&s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.js, err, tc.want)
		}
	}
}

// TestBrokerUnavailableTimeoutOption: broker_unavailable_timeout_ms
// defaults to three minutes; a job's pipeline option sets it; a value
// under a second is refused naming the option and where it came from.
func TestBrokerUnavailableTimeoutOption(t *testing.T) {
	d := DefaultOptions()
	if d.BrokerUnavailableTimeoutMs != 180000 || d.Validate() != nil {
		t.Errorf("default broker_unavailable_timeout_ms %d (valid: %v), want 180000", d.BrokerUnavailableTimeoutMs, d.Validate())
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{"beam:option:broker_unavailable_timeout_ms:v1": "30000"}`), &s); err != nil {
		t.Fatal(err)
	}
	if o, err := d.WithPipelineOptions(&s); err != nil || o.BrokerUnavailableTimeoutMs != 30000 {
		t.Errorf("pipeline option broker_unavailable_timeout_ms=30000: %d, %v", o.BrokerUnavailableTimeoutMs, err)
	}
	wantPipelineOptionErrors(t, []pipelineOptionError{
		{`{"beam:option:broker_unavailable_timeout_ms:v1": 500}`, `pipeline option broker_unavailable_timeout_ms: 500, must be at least 1000`},
		{`{"beam:option:broker_unavailable_timeout_ms:v1": "3m"}`, `pipeline option broker_unavailable_timeout_ms: "3m" is not an integer`},
	})
	bad := DefaultOptions()
	bad.BrokerUnavailableTimeoutMs = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "option broker_unavailable_timeout_ms: 0, must be at least 1000") {
		t.Errorf("Validate: %v, want an error naming broker_unavailable_timeout_ms", err)
	}
}

// TestRecordPackBytesOption: record_pack_bytes defaults to 64 KiB and
// reaches the runtime; a job's pipeline option sets it (0 turns packing
// off); values outside 0 to MaxRecordPackBytes are refused naming the
// option and where it came from; the job server describes it to SDKs.
func TestRecordPackBytesOption(t *testing.T) {
	d := DefaultOptions()
	if d.RecordPackBytes != 64<<10 || d.Validate() != nil {
		t.Errorf("default record_pack_bytes %d (valid: %v), want 65536", d.RecordPackBytes, d.Validate())
	}
	for js, want := range map[string]int{
		`{"beam:option:go_options:v1": {"options": {"record_pack_bytes": "0"}}}`: 0,
		`{"beam:option:record_pack_bytes:v1": 4096}`:                             4096,
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		if o, err := d.WithPipelineOptions(&s); err != nil || o.RecordPackBytes != want {
			t.Errorf("%s: record_pack_bytes %d, %v; want %d", js, o.RecordPackBytes, err, want)
		}
	}
	wantPipelineOptionErrors(t, []pipelineOptionError{
		{`{"beam:option:record_pack_bytes:v1": -1}`, `pipeline option record_pack_bytes: -1, must be 0 (no packing) to 524288`},
		{`{"beam:option:record_pack_bytes:v1": 1048576}`, `pipeline option record_pack_bytes: 1048576, must be 0 (no packing) to 524288`},
		{`{"beam:option:record_pack_bytes:v1": "64k"}`, `pipeline option record_pack_bytes: "64k" is not an integer`},
	})
	bad := DefaultOptions()
	bad.RecordPackBytes = -5
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `option record_pack_bytes: -5`) {
		t.Errorf("Validate: %v, want an error naming record_pack_bytes", err)
	}
	described := false
	for _, o := range optionDescriptors() {
		described = described || o.GetName() == "record_pack_bytes" && o.GetDefaultValue() == "65536"
	}
	if !described {
		t.Error("no descriptor of record_pack_bytes with default 65536")
	}
}

// TestInternalMaxMessageBytesOption: internal_max_message_bytes defaults
// to 8 MiB, a job's pipeline option sets it, values outside 1 to 64 MiB
// are refused naming the option and where it came from, and the job
// server describes it to SDKs.
func TestInternalMaxMessageBytesOption(t *testing.T) {
	d := DefaultOptions()
	if d.InternalMaxMessageBytes != 8<<20 || d.Validate() != nil {
		t.Errorf("default internal_max_message_bytes %d (valid: %v), want 8388608", d.InternalMaxMessageBytes, d.Validate())
	}
	for js, want := range map[string]int{
		`{"beam:option:go_options:v1": {"options": {"internal_max_message_bytes": "1048576"}}}`: 1 << 20,
		`{"beam:option:internal_max_message_bytes:v1": 67108864}`:                               64 << 20,
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		if o, err := d.WithPipelineOptions(&s); err != nil || o.InternalMaxMessageBytes != want {
			t.Errorf("%s: internal_max_message_bytes %d, %v; want %d", js, o.InternalMaxMessageBytes, err, want)
		}
	}
	wantPipelineOptionErrors(t, []pipelineOptionError{
		{`{"beam:option:internal_max_message_bytes:v1": 1048575}`, `pipeline option internal_max_message_bytes: 1048575, must be 1048576 to 67108864`},
		{`{"beam:option:internal_max_message_bytes:v1": 67108865}`, `pipeline option internal_max_message_bytes: 67108865, must be 1048576 to 67108864`},
	})
	bad := DefaultOptions()
	bad.InternalMaxMessageBytes = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `option internal_max_message_bytes: 0`) {
		t.Errorf("Validate: %v, want an error naming internal_max_message_bytes", err)
	}
	described := false
	for _, o := range optionDescriptors() {
		described = described || o.GetName() == "internal_max_message_bytes" && o.GetDefaultValue() == "8388608"
	}
	if !described {
		t.Error("no descriptor of internal_max_message_bytes with default 8388608")
	}
}

// source_max_delay_ms: 0 by default (Java KafkaIO's withCreateTime(ZERO)),
// set by a pipeline option, negative refused naming the option.
func TestSourceMaxDelayOption(t *testing.T) {
	if d := DefaultOptions(); d.SourceMaxDelayMs != 0 {
		t.Errorf("default source_max_delay_ms %d, want 0", d.SourceMaxDelayMs)
	}
	for _, tc := range []struct {
		js   string
		want int
		err  string
	}{
		{`{"beam:option:source_max_delay_ms:v1": 1500}`, 1500, ""},
		{`{"beam:option:source_max_delay_ms:v1": -1}`, 0, `option source_max_delay_ms: -1, must not be negative`},
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.js), &s); err != nil {
			t.Fatal(err)
		}
		o, err := DefaultOptions().WithPipelineOptions(&s)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error containing %q", tc.js, err, tc.err)
		case tc.err == "" && (err != nil || o.SourceMaxDelayMs != tc.want):
			t.Errorf("%s: %d, %v; want %d", tc.js, o.SourceMaxDelayMs, err, tc.want)
		}
	}
	found := false
	for _, od := range optionDescriptors() {
		found = found || od.GetName() == "source_max_delay_ms" && od.GetDefaultValue() == "0"
	}
	if !found {
		t.Error("no descriptor of source_max_delay_ms with default 0")
	}
}

// TestSDKWorkerParallelismOption: sdk_worker_parallelism defaults to one
// worker; Python's pipeline option of that name sets it (0: one per core),
// except its declared default 1, which Python sends with every job and so
// leaves the job server's setting; a negative one is refused naming the
// option.
func TestSDKWorkerParallelismOption(t *testing.T) {
	if d := DefaultOptions(); d.SDKWorkerParallelism != 1 {
		t.Errorf("default sdk_worker_parallelism %d, want 1", d.SDKWorkerParallelism)
	}
	server := DefaultOptions()
	server.SDKWorkerParallelism = 3
	for _, tc := range []struct {
		js   string
		want int
		err  string
	}{
		{`{"beam:option:sdk_worker_parallelism:v1": 2}`, 2, ""},
		{`{"beam:option:sdk_worker_parallelism:v1": "0"}`, 0, ""},
		{`{"beam:option:sdk_worker_parallelism:v1": "1"}`, 3, ""},
		{`{}`, 3, ""},
		{`{"beam:option:sdk_worker_parallelism:v1": -1}`, 0, "option sdk_worker_parallelism: -1, must not be negative"},
		{`{"beam:option:sdk_worker_parallelism:v1": "two"}`, 0, `pipeline option sdk_worker_parallelism: "two" is not an integer`},
	} {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(tc.js), &s); err != nil {
			t.Fatal(err)
		}
		o, err := server.WithPipelineOptions(&s)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error containing %q", tc.js, err, tc.err)
		case tc.err == "" && (err != nil || o.SDKWorkerParallelism != tc.want):
			t.Errorf("%s: %d, %v; want %d", tc.js, o.SDKWorkerParallelism, err, tc.want)
		}
	}
}
