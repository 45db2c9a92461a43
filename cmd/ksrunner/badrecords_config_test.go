package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bad-record and poll options come from flags, the environment and the
// config file like the others; a bad value fails at startup naming the
// option, the value and that it came from the server's configuration.
func TestBadRecordOptionsConfig(t *testing.T) {
	cfg, err := loadServerConfig([]string{"--deserialization_error_policy=skip", "--read_max_elements_per_poll=500", "--read_max_poll_time_ms=40"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DeserializationErrorPolicy != "skip" || cfg.ReadMaxElementsPerPoll != 500 || cfg.ReadMaxPollTimeMs != 40 {
		t.Errorf("flags: %q %d %d", cfg.DeserializationErrorPolicy, cfg.ReadMaxElementsPerPoll, cfg.ReadMaxPollTimeMs)
	}
	t.Setenv("KSRUNNER_DEAD_LETTER_TOPIC", "bad-records")
	t.Setenv("KSRUNNER_DESERIALIZATION_ERROR_POLICY", "dead_letter")
	if cfg, err = loadServerConfig(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.DeadLetterTopic != "bad-records" || cfg.DeserializationErrorPolicy != "dead_letter" {
		t.Errorf("env: %q %q", cfg.DeadLetterTopic, cfg.DeserializationErrorPolicy)
	}
	os.Unsetenv("KSRUNNER_DEAD_LETTER_TOPIC")
	os.Unsetenv("KSRUNNER_DESERIALIZATION_ERROR_POLICY")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("read_max_elements_per_poll: 0\n"), 0o644)
	wantConfigErrors(t, []configError{
		{[]string{"--config", file}, "option read_max_elements_per_poll: 0, must be at least 1"},
		{[]string{"--deserialization_error_policy=continue"}, `option deserialization_error_policy: "continue", must be fail, dead_letter or skip`},
		{[]string{"--read_max_poll_time_ms=-1"}, "option read_max_poll_time_ms: -1, must not be negative"},
	})
}

// TestTransactionTimeoutConfig: transaction_timeout_ms comes from a flag,
// the environment or the configuration file, and a bad value is an error
// of the job server's configuration naming it.
func TestTransactionTimeoutConfig(t *testing.T) {
	cfg, err := loadServerConfig([]string{"--transaction_timeout_ms=20000"})
	if err != nil || cfg.TransactionTimeoutMs != 20000 {
		t.Fatalf("flag: %d, %v", cfg.TransactionTimeoutMs, err)
	}
	t.Setenv("KSRUNNER_TRANSACTION_TIMEOUT_MS", "30000")
	if cfg, err := loadServerConfig(nil); err != nil || cfg.TransactionTimeoutMs != 30000 {
		t.Fatalf("env: %d, %v", cfg.TransactionTimeoutMs, err)
	}
	os.Unsetenv("KSRUNNER_TRANSACTION_TIMEOUT_MS")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("transaction_timeout_ms: 50\n"), 0o644)
	wantConfigErrors(t, []configError{
		{[]string{"--config", file}, "option transaction_timeout_ms: 50, must be at least 1000"},
		{[]string{"--transaction_timeout_ms=5000", "--commit_interval_ms=6000"}, "option transaction_timeout_ms: 5000, must be more than commit_interval_ms (6000)"},
	})
}

// TestMaxBundleTimeConfig: max_bundle_time_ms comes from a flag or the
// environment, and a bad value is an error of the job server's
// configuration naming it.
func TestMaxBundleTimeConfig(t *testing.T) {
	cfg, err := loadServerConfig([]string{"--max_bundle_time_ms=250"})
	if err != nil || cfg.MaxBundleTimeMs != 250 {
		t.Fatalf("flag: %d, %v", cfg.MaxBundleTimeMs, err)
	}
	t.Setenv("KSRUNNER_MAX_BUNDLE_TIME_MS", "500")
	if cfg, err := loadServerConfig(nil); err != nil || cfg.MaxBundleTimeMs != 500 {
		t.Fatalf("env: %d, %v", cfg.MaxBundleTimeMs, err)
	}
	os.Unsetenv("KSRUNNER_MAX_BUNDLE_TIME_MS")
	_, err = loadServerConfig([]string{"--max_bundle_time_ms=0"})
	if err == nil || !strings.Contains(err.Error(), "option max_bundle_time_ms: 0, must be at least 1") || !strings.Contains(err.Error(), "job server configuration") {
		t.Errorf("--max_bundle_time_ms=0: %v, want an error of the job server configuration naming the option", err)
	}
}

// TestGroupOptionsConfig: group_protocol and session_timeout_ms come from
// flags, the environment or the configuration file, default to classic and
// Kafka Streams' 45 s, and a bad value is an error of the job server's
// configuration naming the option.
func TestGroupOptionsConfig(t *testing.T) {
	cfg, err := loadServerConfig(nil)
	if err != nil || cfg.GroupProtocol != "classic" || cfg.SessionTimeoutMs != 45000 {
		t.Fatalf("defaults: %q %d, %v", cfg.GroupProtocol, cfg.SessionTimeoutMs, err)
	}
	if cfg, err = loadServerConfig([]string{"--group_protocol=consumer", "--session_timeout_ms=10000"}); err != nil || cfg.GroupProtocol != "consumer" || cfg.SessionTimeoutMs != 10000 {
		t.Fatalf("flags: %q %d, %v", cfg.GroupProtocol, cfg.SessionTimeoutMs, err)
	}
	t.Setenv("KSRUNNER_SESSION_TIMEOUT_MS", "7000")
	if cfg, err = loadServerConfig(nil); err != nil || cfg.SessionTimeoutMs != 7000 {
		t.Fatalf("env: %d, %v", cfg.SessionTimeoutMs, err)
	}
	os.Unsetenv("KSRUNNER_SESSION_TIMEOUT_MS")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("group_protocol: streams\n"), 0o644)
	wantConfigErrors(t, []configError{
		{[]string{"--config", file}, `option group_protocol: "streams", must be classic or consumer`},
		{[]string{"--session_timeout_ms=0"}, "option session_timeout_ms: 0, must be positive"},
	})
}

// configError is a job server's arguments and the configuration error they
// must make.
type configError struct {
	args []string
	want string
}

// wantConfigErrors checks that each case's arguments fail with an error of
// the job server's configuration containing its want.
func wantConfigErrors(t *testing.T, cases []configError) {
	t.Helper()
	for _, tc := range cases {
		_, err := loadServerConfig(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "job server configuration") {
			t.Errorf("%q: %v, want an error of the job server configuration with %q", tc.args, err, tc.want)
		}
	}
}

// TestRecordPackBytesConfig: record_pack_bytes comes from a flag or the
// environment, and a bad value is an error of the job server's
// configuration naming it.
func TestRecordPackBytesConfig(t *testing.T) {
	cfg, err := loadServerConfig([]string{"--record_pack_bytes=0"})
	if err != nil || cfg.RecordPackBytes != 0 {
		t.Fatalf("flag: %d, %v", cfg.RecordPackBytes, err)
	}
	t.Setenv("KSRUNNER_RECORD_PACK_BYTES", "8192")
	if cfg, err := loadServerConfig(nil); err != nil || cfg.RecordPackBytes != 8192 {
		t.Fatalf("env: %d, %v", cfg.RecordPackBytes, err)
	}
	os.Unsetenv("KSRUNNER_RECORD_PACK_BYTES")
	wantConfigErrors(t, []configError{
		{[]string{"--record_pack_bytes=-1"}, "option record_pack_bytes: -1, must be 0 (no packing) to 524288"},
		{[]string{"--internal_max_message_bytes=1000"}, "option internal_max_message_bytes: 1000, must be 1048576 to 67108864"},
	})
	if cfg, err := loadServerConfig([]string{"--internal_max_message_bytes=2097152"}); err != nil || cfg.InternalMaxMessageBytes != 2<<20 {
		t.Fatalf("flag internal_max_message_bytes: %d, %v", cfg.InternalMaxMessageBytes, err)
	}
}
