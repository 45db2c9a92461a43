"""A splittable DoFn with restrictions of different lengths, for ksrunner's
test of work taken by idle tasks (usage as windowfns.py): element n is a
restriction of n positions, claimed and written one every 5 ms, in one
DoFn call that never checkpoints itself: 400 positions (2 s) and 8. With
KSRUNNER_TEST_METRICS_FILE set, the job's committed ksrunner
rebalanced_splits counter is written there after the run. Results are
deterministic."""
import os
import sys
import threading
import time

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from script_exit import exit_now


class ElementRange(beam.transforms.core.RestrictionProvider):
    def initial_restriction(self, element):
        return OffsetRange(0, element)

    def split(self, element, restriction):
        yield restriction

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class SlowPositions(beam.DoFn):
    def process(self, element, tracker=beam.DoFn.RestrictionParam(ElementRange())):
        pos = tracker.current_restriction().start
        while tracker.try_claim(pos):
            time.sleep(0.005)
            yield (element, pos)
            pos += 1


_lock = threading.Lock()


def main():
    out_file = sys.argv[1]
    open(out_file, "w").close()

    def write(x):
        with _lock, open(out_file, "a") as f:
            f.write("unevensdf %r\n" % (x,))

    p = beam.Pipeline(options=PipelineOptions(sys.argv[2:]))
    (p
     | beam.Create([400, 8])
     | beam.ParDo(SlowPositions())
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
