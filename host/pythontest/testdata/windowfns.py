"""Python pipelines with custom WindowFns, for ksrunner's Python tests.

Usage: windowfns.py OUT_FILE [PIPELINE ARGS...]

Runs the pipeline with the given pipeline arguments (e.g. --runner=PortableRunner
--job_endpoint=... --environment_type=LOOPBACK, or none for the Python
DirectRunner, the reference) and writes every result as one line to OUT_FILE.
The results are deterministic: they do not depend on bundling or on the
order elements arrive in.
"""
import random
import sys
import threading

import apache_beam as beam
from apache_beam.coders import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Duration
from script_exit import exit_now


class ValueSizedWindows(window.NonMergingWindowFn):
    """Non-merging: fixed windows whose size depends on the element (10s
    for even values, 30s for odd ones): only the SDK can assign them."""

    def assign(self, ctx):
        size = 10 if ctx.element[1] % 2 == 0 else 30
        start = ctx.timestamp - (ctx.timestamp % size)
        return [window.IntervalWindow(start, start + size)]

    def get_window_coder(self):
        return coders.IntervalWindowCoder()


class ValueGapSessions(window.WindowFn):
    """Merging: sessions whose gap depends on the element (2-5s), merged
    when they overlap."""

    def assign(self, ctx):
        gap = 2 + ctx.element[1] % 4
        return [window.IntervalWindow(ctx.timestamp, ctx.timestamp + Duration.of(gap))]

    def get_window_coder(self):
        return coders.IntervalWindowCoder()

    def merge(self, merge_context):
        group, end = [], None
        for w in sorted(merge_context.windows, key=lambda w: (w.start, w.end)):
            if group and w.start < end:
                group.append(w)
                end = max(end, w.end)
                continue
            if len(group) > 1:
                merge_context.merge(group, window.IntervalWindow(group[0].start, end))
            group, end = [w], w.end
        if len(group) > 1:
            merge_context.merge(group, window.IntervalWindow(group[0].start, end))


class Record(beam.DoFn):
    """Formats each result with its window and timestamp."""

    def __init__(self, name):
        self.name = name

    def process(self, kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
        k, v = kv
        if not isinstance(v, int):
            v = sorted(v)
        yield "%s %s %s [%s, %s) ts=%s" % (self.name, k, v, w.start.micros // 1000, w.end.micros // 1000, ts.micros // 1000)


def data():
    rnd = random.Random(7)
    out = []
    for i in range(3000):
        key = "k%02d" % rnd.randrange(40)
        out.append((key, rnd.randrange(1000), rnd.randrange(600)))  # key, value, second
    return out


_lock = threading.Lock()


def main():
    out_file = sys.argv[1]
    open(out_file, "w").close()

    def write(line):
        with _lock, open(out_file, "a") as f:
            f.write(line + "\n")

    opts = PipelineOptions(sys.argv[2:])
    with beam.Pipeline(options=opts) as p:
        ts = (p
              | beam.Create(data())
              | beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2])))
        fixed = ts | "ValueSized" >> beam.WindowInto(ValueSizedWindows())
        sessions = ts | "ValueGap" >> beam.WindowInto(ValueGapSessions())
        grouped = sessions | "GroupSessions" >> beam.GroupByKey()
        results = {
            "group-fixed": fixed | "GroupFixed" >> beam.GroupByKey(),
            "sum-fixed": fixed | "SumFixed" >> beam.CombinePerKey(sum),
            "group-sessions": grouped,
            "sum-sessions": sessions | "SumSessions" >> beam.CombinePerKey(sum),
            # A second GroupByKey over the merged (ALREADY_MERGED) windows.
            "regroup-sessions": (grouped
                                 | "Sizes" >> beam.MapTuple(lambda k, vs: (k[:2], len(vs)))
                                 | "Regroup" >> beam.GroupByKey()),
        }
        for name, pc in results.items():
            pc | "Record " + name >> beam.ParDo(Record(name)) | "Write " + name >> beam.Map(write)

if __name__ == "__main__":
    main()
    exit_now(0)
