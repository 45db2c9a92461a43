package pythontest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/host"
)

// TestSDKWorkerParallelism: with sdk_worker_parallelism=2 a Python
// pipeline's bundles run in two worker processes (LOOPBACK with
// use_loopback_process_worker makes each worker a process of its own), the
// tasks of a stage spread over them, and the results are exact. With the
// default of 1, one process runs them all.
func TestSDKWorkerParallelism(t *testing.T) {
	py := beamPython(t)
	// Python's process workers run `python` from PATH: the venv's.
	t.Setenv("PATH", filepath.Dir(py)+string(os.PathListSeparator)+os.Getenv("PATH"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 7000
	opts := host.DefaultOptions()
	opts.InternalParallelism = 4
	endpoint := startJobServer(t, opts)
	for _, c := range []struct {
		workers string
		pids    int
	}{{"2", 2}, {"1", 1}} {
		t.Run("sdk_worker_parallelism="+c.workers, func(t *testing.T) {
			lines := runPipeline(ctx, t, py, "workers.py", fmt.Sprint(n),
				"--runner=PortableRunner", "--job_endpoint="+endpoint, "--environment_type=LOOPBACK",
				"--experiments=use_loopback_process_worker", "--sdk_worker_parallelism="+c.workers)
			var counts, pids []string
			for _, l := range lines {
				switch {
				case strings.HasPrefix(l, "count "):
					counts = append(counts, l)
				case strings.HasPrefix(l, "pid "):
					pids = append(pids, l)
				default:
					t.Errorf("unexpected line %q", l)
				}
			}
			var want []string
			for r := range 7 {
				want = append(want, fmt.Sprintf("count %d %d", r, n/7))
			}
			if !slices.Equal(counts, want) {
				t.Errorf("counts %q, want %q", counts, want)
			}
			if len(pids) != c.pids {
				t.Errorf("the keying step ran in %d processes %q, want %d", len(pids), pids, c.pids)
			}
		})
	}
}
