"""A splittable DoFn with restrictions of different lengths, for ksrunner's
test of work taken by idle tasks (usage as windowfns.py): longsdf.py's
DoFn, element n a restriction of n positions: 400 (2 s) and 20 (0.1 s,
longer than a bundle must run before work is taken from it). With
KSRUNNER_TEST_METRICS_FILE set, the job's committed ksrunner
rebalanced_splits counter is written there after the run. Results are
deterministic."""
import os
import sys
import threading

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from longsdf import slow_positions
from script_exit import exit_now


_lock = threading.Lock()


def main():
    out_file = sys.argv[1]
    open(out_file, "w").close()

    def write(x):
        with _lock, open(out_file, "a") as f:
            f.write("unevensdf %r\n" % (x,))

    p = beam.Pipeline(options=PipelineOptions(sys.argv[2:]))
    (p
     | beam.Create([400, 20])
     | beam.ParDo(slow_positions(lambda n: n))
     | beam.Map(write))
    result = p.run()
    result.wait_until_finish()
    metrics_file = os.environ.get("KSRUNNER_TEST_METRICS_FILE")
    if metrics_file:
        counters = result.metrics().query(
            MetricsFilter().with_namespace("ksrunner").with_name("rebalanced_splits"))["counters"]
        with open(metrics_file, "w") as f:
            f.write(str(sum(c.committed or 0 for c in counters)))


if __name__ == "__main__":
    main()
    exit_now(0)
