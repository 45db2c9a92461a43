"""A splittable DoFn that never checkpoints itself, for ksrunner's test of
the checkpoints the host asks for (usage as windowfns.py): each of three
elements is a restriction of 400 positions, claimed and written one every
5 ms, so each runs about 2 s in one DoFn call. Results are deterministic."""
import sys
import threading
import time

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from script_exit import exit_now

POSITIONS = 400


class Positions(beam.transforms.core.RestrictionProvider):
    """Element e's restriction: positions(e) positions, never split."""

    def __init__(self, positions):
        self._positions = positions

    def initial_restriction(self, element):
        return OffsetRange(0, self._positions(element))

    def split(self, element, restriction):
        yield restriction

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


def slow_positions(positions):
    """A splittable DoFn over Positions(positions) that claims and emits
    (element, position) one every 5 ms and never checkpoints itself."""

    class SlowPositions(beam.DoFn):
        def process(self, element, tracker=beam.DoFn.RestrictionParam(Positions(positions))):
            pos = tracker.current_restriction().start
            while tracker.try_claim(pos):
                time.sleep(0.005)
                yield (element, pos)
                pos += 1

    return SlowPositions()


_lock = threading.Lock()


def main():
    out_file = sys.argv[1]
    open(out_file, "w").close()

    def write(x):
        with _lock, open(out_file, "a") as f:
            f.write("longsdf %r\n" % (x,))

    with beam.Pipeline(options=PipelineOptions(sys.argv[2:])) as p:
        (p
         | beam.Create([7, 8, 9])
         | beam.ParDo(slow_positions(lambda _: POSITIONS))
         | beam.Map(write))


if __name__ == "__main__":
    main()
    exit_now(0)
