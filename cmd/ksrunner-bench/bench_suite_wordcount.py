"""Python wordcount for `ksrunner-bench suite` (case wordcount-py-*).

usage: bench_suite_wordcount.py WORK_DIR WORDS [pipeline options...]

Writes WORDS words (10 a line, drawn from 10,000 with a skew) to
WORK_DIR/input.txt, counts them with ReadFromText | FlatMap(split) |
Count.PerElement | WriteToText, compares every count with the one computed
while writing, and prints "wall_s SECONDS" (the pipeline's run alone) and
"checked WORDS_DISTINCT". It exits 1 on any wrong or missing count."""
import collections
import glob
import os
import random
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions


def main():
    work, n = sys.argv[1], int(sys.argv[2])
    rnd = random.Random(7)
    vocab = ["w%d" % i for i in range(10000)]
    want = collections.Counter()
    src = os.path.join(work, "input.txt")
    with open(src, "w") as f:
        line = []
        for _ in range(n):
            # the square skews the draw: low words are common
            w = vocab[int(rnd.random() ** 2 * len(vocab))]
            want[w] += 1
            line.append(w)
            if len(line) == 10:
                f.write(" ".join(line) + "\n")
                line = []
        if line:
            f.write(" ".join(line) + "\n")
    prefix = os.path.join(work, "counts")
    start = time.monotonic()
    with beam.Pipeline(options=PipelineOptions(sys.argv[3:])) as p:
        (p
         | beam.io.ReadFromText(src)
         | beam.FlatMap(str.split)
         | beam.combiners.Count.PerElement()
         | beam.MapTuple(lambda w, c: "%s %d" % (w, c))
         | beam.io.WriteToText(prefix))
    wall = time.monotonic() - start
    got = {}
    for shard in glob.glob(prefix + "*"):
        with open(shard) as f:
            for line in f:
                w, c = line.split()
                if w in got:
                    sys.exit("word %s counted twice" % w)
                got[w] = int(c)
    if got != dict(want):
        bad = [w for w in set(got) | set(want) if got.get(w) != want.get(w)]
        sys.exit("%d of %d words counted wrong, e.g. %s: %s, want %s" % (
            len(bad), len(want), bad[0], got.get(bad[0]), want.get(bad[0])))
    print("wall_s %.6f" % wall)
    print("checked %d" % len(got))


if __name__ == "__main__":
    main()
