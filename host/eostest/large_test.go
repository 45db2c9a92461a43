package eostest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

func init() {
	register.Function1x2(toLargeKV)
	register.Function3x1(summarizeLarge)
}

// largeValues is how many values of about 1 KiB toLargeKV makes: nearly
// all on one key, a group of about 4 MB.
const largeValues = 4000

// toLargeKV keys i to "hot", or one of three cold keys, with a value that
// starts with i and goes on in random letters (seeded by i: the same on
// every retry), which compress no better than Kafka's limits count them.
func toLargeKV(i int) (string, string) {
	k := "hot"
	if i%100 == 0 {
		k = fmt.Sprintf("cold%d", i/100%3)
	}
	r := rand.New(rand.NewPCG(uint64(i), 2))
	b := []byte(fmt.Sprintf("%06d", i))
	for range 1000 {
		b = append(b, byte('a'+r.IntN(26)))
	}
	return k, string(b)
}

// summarizeLarge counts a group's values and sums their indices (a value
// lost or read twice shows), with the side input's elements.
func summarizeLarge(k string, vs func(*string) bool, side func(*string) bool) string {
	var n, sum int
	var v string
	for vs(&v) {
		i, err := strconv.Atoi(v[:6])
		if err != nil {
			panic(err)
		}
		n, sum = n+1, sum+i
	}
	var sides []string
	for side(&v) {
		sides = append(sides, v)
	}
	slices.Sort(sides)
	return fmt.Sprintf("%s %d %d %s", k, n, sum, strings.Join(sides, ","))
}

// TestLargeGroupsUnderAbortedCycles: groups read by a ParDo with a side
// input cross its main-input topic whole, the hot one (about 4 MB) a record
// of its own, and are parked for the side input in the store, a changelog
// record as large. With every other commit cycle aborted after its records
// reached the broker, each group is summarized exactly once, complete.
func TestLargeGroupsUnderAbortedCycles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	aborted := abortCycles(t)
	out := filepath.Join(t.TempDir(), "groups.txt")
	p, s := beam.NewPipelineWithRoot()
	in := make([]int, largeValues)
	for i := range in {
		in[i] = i
	}
	groups := beam.GroupByKey(s, beam.ParDo(s, toLargeKV, beam.CreateList(s, in)))
	side := beam.CreateList(s, []string{"x", "y"})
	textio.Write(s, out, beam.ParDo(s, summarizeLarge, groups, beam.SideInput{Input: side}))
	id, r := env.Run(ctx, t, env.Marshal(t, p), map[string]string{
		"bootstrap_servers":    kafkatest.Broker(t),
		"application_id":       kafkatest.UniqueName(t, "app"),
		"processing_guarantee": "exactly_once",
		"commit_interval_ms":   "20",
	})
	if r.State != jobpb.JobState_DONE {
		t.Fatalf("job %s ended %v, want DONE; errors: %q", id, r.State, r.Errors)
	}
	if n := aborted(); n < 3 {
		t.Fatalf("only %d commit cycles were aborted, want at least 3", n)
	}
	n, sum := map[string]int{}, map[string]int{}
	for i := range largeValues {
		k, _ := toLargeKV(i)
		n[k]++
		sum[k] += i
	}
	var want []string
	for k := range n {
		want = append(want, fmt.Sprintf("%s %d %d x,y", k, n[k], sum[k]))
	}
	slices.Sort(want)
	files, _ := filepath.Glob(out + "*")
	var got []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if l := strings.TrimSpace(string(b)); l != "" {
			got = append(got, strings.Split(l, "\n")...)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("after %d aborted cycles: groups %q, want %q", aborted(), got, want)
	}
}
