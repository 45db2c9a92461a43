"""Python wordcount with the SDK's file IO (ReadFromText, a splittable
DoFn; WriteToText, sharded writes with a finalize step), for ksrunner's
Python tests (usage as windowfns.py). The input is generated; the output
shards are concatenated into OUT_FILE."""
import glob
import os
import random
import re
import sys
import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from script_exit import exit_now

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def main():
    out_file = sys.argv[1]
    work = tempfile.mkdtemp(prefix="ksrunner-wordcount-")
    rnd = random.Random(3)
    src = os.path.join(work, "input.txt")
    with open(src, "w") as f:
        for i in range(5000):
            f.write(" ".join(rnd.choice(WORDS) + str(rnd.randrange(30)) for _ in range(rnd.randrange(1, 12))) + "\n")
    prefix = os.path.join(work, "counts")
    with beam.Pipeline(options=PipelineOptions(sys.argv[2:])) as p:
        (p
         | beam.io.ReadFromText(src)
         | beam.FlatMap(lambda line: re.findall(r"[a-z0-9]+", line))
         | beam.combiners.Count.PerElement()
         | beam.MapTuple(lambda w, c: "count %s %d" % (w, c))
         | beam.io.WriteToText(prefix))
    with open(out_file, "w") as out:
        for shard in sorted(glob.glob(prefix + "*")):
            with open(shard) as f:
                out.write(f.read())


if __name__ == "__main__":
    main()
    exit_now(0)
