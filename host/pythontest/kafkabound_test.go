package pythontest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestKafkaIOPythonBounded: a Python ReadFromKafka with max_num_records
// (expanded by ksrunner's expansion service) over a topic of 4 partitions
// holding more ends DONE, and the output holds exactly that many records,
// a prefix of each input partition; a second job of the same application
// reads exactly the rest.
func TestKafkaIOPythonBounded(t *testing.T) {
	ctx, env := newKafkaEnv(t)
	py, bootstrap, endpoint, expansion := env.py, env.bootstrap, env.endpoint, env.expansion
	in, out := kafkatest.UniqueName(t, "pybin"), kafkatest.UniqueName(t, "pybout")
	kafkatest.CreateTopic(t, bootstrap, in, 4)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	counts := []int{30, 10, 20, 0}
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p, n := range counts {
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: int32(p), Key: fmt.Appendf(nil, "%d/%d", p, i), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	appID := kafkatest.UniqueName(t, "pybounded")
	run := func(n int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "kafka_bounded.py"), in, out, bootstrap, expansion, strconv.Itoa(n),
			"--runner=PortableRunner", "--job_endpoint="+endpoint, "--environment_type=LOOPBACK", "--streaming",
			"--application_id="+appID, "--bootstrap_servers="+bootstrap)
		cmd.Env = append(os.Environ(), "PYTHONFAULTHANDLER=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kafka_bounded.py %d: %v\n%s", n, err, b)
		}
	}
	// per reads out to its end: how many records of each input partition
	// it holds, checking they are the partition's first ones, each once.
	per := func() []int {
		t.Helper()
		got := make([]int, len(counts))
		seen := map[string]bool{}
		kafkatest.ReadTopic(ctx, t, bootstrap, out, nil, func(r *kgo.Record) {
			seen[string(r.Key)] = true
			var p, i int
			if _, err := fmt.Sscanf(string(r.Key), "%d/%d", &p, &i); err != nil || p < 0 || p >= len(counts) {
				t.Errorf("output key %q is not an input key", r.Key)
				return
			}
			got[p]++
		})
		total := 0
		for p, n := range got {
			total += n
			for i := range n {
				if !seen[fmt.Sprintf("%d/%d", p, i)] {
					t.Errorf("input partition %d: %d records out but not record %d: not a prefix (or a record twice)", p, n, i)
					break
				}
			}
		}
		if total != len(seen) {
			t.Errorf("%d records out, %d distinct", total, len(seen))
		}
		return got
	}
	run(35)
	got := per()
	if total := got[0] + got[1] + got[2] + got[3]; total != 35 {
		t.Fatalf("first job: %d records out (per partition %v), want 35", total, got)
	}
	run(25)
	if got := per(); fmt.Sprint(got) != fmt.Sprint(counts) {
		t.Errorf("both jobs: per partition %v, want the whole input %v", got, counts)
	}
}
