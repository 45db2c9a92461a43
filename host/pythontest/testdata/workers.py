"""Counts the numbers 0..N-1 by residue and records which process ran
each element, for ksrunner's sdk_worker_parallelism test. Usage:
workers.py OUT N [pipeline options]. Writes "count <residue> <n>" for each
residue mod 7 and "pid <pid>" for each process that ran the keying step."""
import os
import sys
import threading

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from script_exit import exit_now

_lock = threading.Lock()


def main():
    out_file, n = sys.argv[1], int(sys.argv[2])
    open(out_file, "w").close()

    def write(line):
        with _lock, open(out_file, "a") as f:
            f.write(line + "\n")

    class KeyAndNotePid(beam.DoFn):
        def process(self, i):
            yield ("pid", os.getpid())
            yield (i % 7, 1)

    with beam.Pipeline(options=PipelineOptions(sys.argv[3:])) as p:
        keyed = (p
                 | beam.Create(list(range(n)))
                 | "Spread" >> beam.Reshuffle()
                 | beam.ParDo(KeyAndNotePid()))
        (keyed
         | "Pids" >> beam.Filter(lambda kv: kv[0] == "pid")
         | "Pid" >> beam.Map(lambda kv: kv[1])
         | "Distinct" >> beam.Distinct()
         | "WPid" >> beam.Map(lambda pid: write("pid %d" % pid)))
        (keyed
         | "Counts" >> beam.Filter(lambda kv: kv[0] != "pid")
         | "Sum" >> beam.CombinePerKey(sum)
         | "WCount" >> beam.MapTuple(lambda k, c: write("count %d %d" % (k, c))))


if __name__ == "__main__":
    main()
    exit_now(0)
