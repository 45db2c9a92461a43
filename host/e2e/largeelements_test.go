package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestElementTooLargeForTopic: a group larger than the internal topic it
// must cross whole (hotSidePipeline's hot group of about 4 MB, with
// internal_max_message_bytes at Kafka's 1 MiB) fails the job with an error
// naming the PCollection, the transform making it, the topic and the
// option, rather than the producer's MESSAGE_TOO_LARGE naming the topic
// alone. TestMatchesPrism runs the same pipeline to completion at the
// default 8 MiB on every broker.
func TestElementTooLargeForTopic(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	errs := runFailed(ctx, t, ksrunner, marshal(t, hotSidePipeline(t.TempDir()+"/out")), map[string]string{"internal_max_message_bytes": "1048576"})
	msg := strings.Join(errs, "\n")
	for _, want := range []string{`(output of transform "CoGBK"): an element of `, "does not fit in a record of topic __beam_", "summarizeWithSide-main, which takes at most 1048576 bytes", "internal_max_message_bytes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q, want %q in them", errs, want)
		}
	}
}
