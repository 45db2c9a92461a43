package executor

import (
	"runtime"
	"slices"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/harness"
)

// Only an SDK that runs one bundle at a time per process gets several
// workers; 0 means one per core.
func TestWorkersOf(t *testing.T) {
	python := &pipepb.Environment{Capabilities: []string{"beam:coder:bytes:v1"}}
	goSDK := &pipepb.Environment{Capabilities: []string{"beam:coder:bytes:v1", URNMultiCore}}
	for _, c := range []struct {
		name    string
		env     *pipepb.Environment
		workers int
		want    int
	}{
		{"single-core SDK, 1", python, 1, 1},
		{"single-core SDK, 3", python, 3, 3},
		{"single-core SDK, 0: one per core", python, 0, runtime.NumCPU()},
		{"multi-core SDK, 3", goSDK, 3, 1},
		{"multi-core SDK, 0", goSDK, 0, 1},
	} {
		if got := workersOf(c.env, c.workers); got != c.want {
			t.Errorf("%s: %d workers, want %d", c.name, got, c.want)
		}
	}
	if workerEnvID("env", 0) != "env" || workerEnvID("env", 2) == workerEnvID("env", 1) {
		t.Errorf("worker environment ids %q %q %q: the first must be the environment's, all distinct", workerEnvID("env", 0), workerEnvID("env", 1), workerEnvID("env", 2))
	}
}

// The tasks of a stage take its workers in turn; one worker is a plain
// harness executor.
func TestHarnessWorkersSpreadTasks(t *testing.T) {
	stages := []*harness.Stage{{}, {}, {}}
	e := harnessWorkers(stages)
	var got []*harness.Stage
	for range 7 {
		got = append(got, ForTask(e).(workerTaskExecutor).stage)
	}
	for i, s := range got {
		if s != stages[i%3] {
			t.Errorf("task %d got worker %d's stage, want worker %d's", i, slices.Index(stages, s), i%3)
		}
	}
	if _, ok := harnessWorkers(stages[:1]).(harnessExecutor); !ok {
		t.Errorf("one worker: %T, want a harnessExecutor", harnessWorkers(stages[:1]))
	}
}
