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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", file}, "option read_max_elements_per_poll: 0, must be at least 1"},
		{[]string{"--deserialization_error_policy=continue"}, `option deserialization_error_policy: "continue", must be fail, dead_letter or skip`},
		{[]string{"--read_max_poll_time_ms=-1"}, "option read_max_poll_time_ms: -1, must not be negative"},
	} {
		_, err := loadServerConfig(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "job server configuration") {
			t.Errorf("%q: %v, want an error of the job server configuration with %q", tc.args, err, tc.want)
		}
	}
}
