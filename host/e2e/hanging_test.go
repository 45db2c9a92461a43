package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestHangLeftByPredecessor: every partition of a job's output holds a
// transaction of the job's own producer that Kafka left open (its marker
// dropped) and that its coordinator aborted, left by the previous process
// on the job's state_dir. Nothing reads past it under read_committed, and
// the job's first transaction there would extend it and commit it with
// its own. The job's look for hanging transactions ends each with the
// coordinator's ABORT, or aborts the cycle that extended it: the output,
// read_committed, is exactly the job's counts.
func TestHangLeftByPredecessor(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bootstrap := kafkatest.OwnBroker(t, "transaction.partition.verification.enable=false")
	const partitions, n = 2, 200
	in, out := countTopics(t, bootstrap, "hang", partitions)
	data := newCountData(n, partitions)
	appID := kafkatest.UniqueName(t, "hang")

	// The state_dir of a previous process of the application: its
	// identity names the transactional id.
	stateDir := t.TempDir()
	const instanceID = "00112233445566ff"
	if err := os.MkdirAll(filepath.Join(stateDir, appID), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, appID, "instance-id"), []byte(instanceID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, v := encodeCount("hanging@0", 999)
	for p := range int32(kafkatest.CountOutPartitions) {
		h := kafkatest.HangTransaction(ctx, t, bootstrap, appID+"-"+instanceID, out, p, [][2][]byte{{k, v}}, "abort")
		t.Logf("%s/%d: a transaction of producer %d epoch %d open since offset %d, aborted at its coordinator", out, p, h.PID, h.Epoch, h.Offset)
	}

	data.produce(ctx, t, bootstrap, in, data.recs)
	want := data.fired(data.recs)
	got := runUntil(ctx, t, kafkaCountPipeline(t, in, out), appID, bootstrap, out, len(want), map[string]string{"state_dir": stateDir})
	kafkatest.CheckCounts(t, "output", got, want)
}
