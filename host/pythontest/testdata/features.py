"""A Python pipeline over the Beam model's main features, for ksrunner's
Python tests (usage as windowfns.py): multiple outputs, side inputs (list,
dict, singleton), CombineGlobally and CombinePerKey, Flatten, Reshuffle,
CoGroupByKey, fixed and sliding windows, sessions, and a stateful DoFn with
bag state and an event-time timer, a GroupByKey of one 3 MB group, and a
splittable DoFn with a windowed side input that defers its remainders.
Results are deterministic."""
import random
import sys
import threading

import apache_beam as beam
from apache_beam.coders import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.transforms import window
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import Timestamp
from script_exit import exit_now


class SplitParity(beam.DoFn):
    def process(self, kv):
        k, v = kv
        if v % 2:
            yield beam.pvalue.TaggedOutput("odd", (k, v))
        else:
            yield (k, v)


class BufferUntilWindowEnd(beam.DoFn):
    """Stateful: buffers each key's values and emits their count and sum
    when an event-time timer at the end of the window fires."""
    BUF = userstate.BagStateSpec("buf", coders.VarIntCoder())
    END = userstate.TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam,
                buf=beam.DoFn.StateParam(BUF), end=beam.DoFn.TimerParam(END)):
        buf.add(kv[1])
        end.set(w.max_timestamp())

    @userstate.on_timer(END)
    def flush(self, key=beam.DoFn.KeyParam, buf=beam.DoFn.StateParam(BUF)):
        vals = list(buf.read())
        buf.clear()
        yield (key, (len(vals), sum(vals)))


class SummarizeGroupOnce(beam.DoFn):
    """Stateful, reading a GroupByKey's groups: summarizes a key's group
    and marks the key seen (ksrunner runs it beside the GroupByKey and
    pages the group to it)."""
    SEEN = userstate.ReadModifyWriteStateSpec("seen", coders.BooleanCoder())

    def process(self, kv, seen=beam.DoFn.StateParam(SEEN)):
        first = not seen.read()
        seen.write(True)
        yield (kv[0], first, sum(1 for _ in kv[1]), sum(int(v[:6]) for v in kv[1]))


class OrderedUntilEnd(beam.DoFn):
    """Ordered list state: adds each value under its index and, when the
    input ends, reads the list whole and one range of it (3 MB and 1 MB:
    ksrunner serves them in pages) and emits what it saw."""
    LIST = userstate.OrderedListStateSpec("list", coders.StrUtf8Coder())
    END = userstate.TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam,
                lst=beam.DoFn.StateParam(LIST), end=beam.DoFn.TimerParam(END)):
        lst.add((Timestamp(micros=int(kv[1][:6])), kv[1]))
        end.set(w.max_timestamp())

    @userstate.on_timer(END)
    def report(self, key=beam.DoFn.KeyParam, lst=beam.DoFn.StateParam(LIST)):
        whole = [v for _, v in lst.read()]
        part = [v for _, v in lst.read_range(Timestamp(micros=1000), Timestamp(micros=2000))]
        yield (key, len(whole), whole == sorted(whole), sum(len(v) for v in whole),
               len(part), part[0][:6], part[-1][:6])


class PositionsRestriction(beam.transforms.core.RestrictionProvider):
    """Element (k, v) has the positions [0, v % 5 + 2), split in pairs."""
    def initial_restriction(self, element):
        return OffsetRange(0, element[1] % 5 + 2)

    def split(self, element, restriction):
        return restriction.split(2)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class PositionsWithSide(beam.DoFn):
    """Splittable: emits each position of its element with the side input's
    value for the element's key in the element's window, and defers the
    rest of its restriction after each position, so that resumed
    remainders read the side input too."""
    def process(self, kv, maxes, tracker=beam.DoFn.RestrictionParam(PositionsRestriction())):
        pos = tracker.current_restriction().start
        if tracker.try_claim(pos):
            yield (kv[0], kv[1], pos, maxes[kv[0]])
            if pos + 1 < tracker.current_restriction().stop:
                tracker.defer_remainder()


def data():
    rnd = random.Random(11)
    return [("k%02d" % rnd.randrange(25), rnd.randrange(1000), rnd.randrange(300)) for _ in range(2000)]


_lock = threading.Lock()


def main():
    out_file = sys.argv[1]
    open(out_file, "w").close()

    def write(name):
        def w(x):
            with _lock, open(out_file, "a") as f:
                f.write("%s %r\n" % (name, x))
        return w

    def sorted_values(kv):
        return (kv[0], sorted(kv[1]))

    with beam.Pipeline(options=PipelineOptions(sys.argv[2:])) as p:
        raw = p | beam.Create(data())
        kvs = raw | "KV" >> beam.Map(lambda e: (e[0], e[1]))
        stamped = raw | "Stamp" >> beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))

        parts = kvs | beam.ParDo(SplitParity()).with_output_types(beam.typehints.Tuple[str, int]).with_outputs("odd", main="even")
        parts.even | "CountEven" >> beam.combiners.Count.PerKey() | "WCountEven" >> beam.Map(write("count-even"))
        parts.odd | "SumOdd" >> beam.CombinePerKey(sum) | "WSumOdd" >> beam.Map(write("sum-odd"))

        total = kvs | "Values" >> beam.Values() | "Total" >> beam.CombineGlobally(sum)
        keys = kvs | "Keys" >> beam.Keys() | "Distinct" >> beam.Distinct()
        maxes = kvs | "Max" >> beam.CombinePerKey(max)
        (kvs
         | "Reshuffle" >> beam.Reshuffle()
         | "Side" >> beam.Map(lambda kv, total, keys, maxes: (kv[0], kv[1] * 1000 // total, kv[1] == maxes[kv[0]], len(keys)),
                              total=beam.pvalue.AsSingleton(total),
                              keys=beam.pvalue.AsList(keys),
                              maxes=beam.pvalue.AsDict(maxes))
         | "FilterMax" >> beam.Filter(lambda r: r[2])
         | "WSide" >> beam.Map(write("side")))

        merged = (parts.even, parts.odd) | beam.Flatten()
        ({"all": merged, "max": maxes}
         | beam.CoGroupByKey()
         | "Cogbk" >> beam.MapTuple(lambda k, g: (k, len(list(g["all"])), list(g["max"])))
         | "WCogbk" >> beam.Map(write("cogbk")))

        (stamped
         | "Fixed" >> beam.WindowInto(window.FixedWindows(60))
         | "FixedSum" >> beam.CombinePerKey(sum)
         | "FixedWin" >> beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv, str(w)))
         | "WFixed" >> beam.Map(write("fixed")))
        (stamped
         | "Sliding" >> beam.WindowInto(window.SlidingWindows(60, 20))
         | "SlidingCount" >> beam.combiners.Count.PerKey()
         | "SlidingWin" >> beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv, str(w)))
         | "WSliding" >> beam.Map(write("sliding")))
        (stamped
         | "Sessions" >> beam.WindowInto(window.Sessions(10))
         | "SessionGroup" >> beam.GroupByKey()
         | "SessionWin" >> beam.Map(lambda kv, w=beam.DoFn.WindowParam: (sorted_values(kv), str(w)))
         | "WSessions" >> beam.Map(write("sessions")))
        (stamped
         | "StateWindows" >> beam.WindowInto(window.FixedWindows(100))
         | "Stateful" >> beam.ParDo(BufferUntilWindowEnd())
         | "StateWin" >> beam.Map(lambda kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam: (kv, str(w), ts.micros // 1000))
         | "WState" >> beam.Map(write("state")))
        # A group of 3 MB on one key: ksrunner pages it (its values past
        # 1 MiB reach the SDK through the state API); each value counts once.
        (p
         | "HotIndices" >> beam.Create(list(range(3000)))
         | "HotPair" >> beam.Map(lambda i: ("hot", "%06d%s" % (i, "v" * 1000)))
         | "HotGroup" >> beam.GroupByKey()
         | "HotSummary" >> beam.Map(lambda kv: (kv[0], sum(1 for _ in kv[1]), sum(int(v[:6]) for v in kv[1]), sum(len(v) for v in kv[1])))
         | "WHot" >> beam.Map(write("hotkey")))
        # The same group read by a ParDo with a side input, then by a
        # stateful one, each the group's only reader: ksrunner runs them
        # beside their GroupByKey and pages the group to them.
        (p
         | "HotSideIndices" >> beam.Create(list(range(3000)))
         | "HotSidePair" >> beam.Map(lambda i: ("hot", "%06d%s" % (i, "v" * 1000)))
         | "HotSideGroup" >> beam.GroupByKey()
         | "HotSideSummary" >> beam.Map(lambda kv, side: (kv[0], sorted(side), sum(1 for _ in kv[1]), sum(int(v[:6]) for v in kv[1])),
                                        beam.pvalue.AsList(p | "HotSideValues" >> beam.Create(["y", "x"])))
         | "WHotSide" >> beam.Map(write("hotside")))
        # The same group read by a ParDo with a side input and by another
        # ParDo: the first heads a sub-topology of its own, and ksrunner
        # sends it the group across a topic in pieces.
        shared = (p
                  | "HotSharedIndices" >> beam.Create(list(range(3000)))
                  | "HotSharedPair" >> beam.Map(lambda i: ("hot", "%06d%s" % (i, "v" * 1000)))
                  | "HotSharedGroup" >> beam.GroupByKey())
        (shared
         | "HotSharedSummary" >> beam.Map(lambda kv, side: (kv[0], sorted(side), sum(1 for _ in kv[1]), sum(int(v[:6]) for v in kv[1])),
                                          beam.pvalue.AsList(p | "HotSharedValues" >> beam.Create(["q", "p"])))
         | "WHotShared" >> beam.Map(write("hotshared")))
        (shared
         | "HotSharedCount" >> beam.Map(lambda kv: (kv[0], sum(1 for _ in kv[1])))
         | "WHotSharedCount" >> beam.Map(write("hotsharedcount")))
        # Two GroupByKeys' groups flattened, then read by one ParDo: the
        # Flatten heads a sub-topology of its own, and ksrunner sends it
        # each group across the Flatten's topic in pieces.
        flat1 = (p
                 | "HotFlatIndices1" >> beam.Create(list(range(3000)))
                 | "HotFlatPair1" >> beam.Map(lambda i: ("hot1", "%06d%s" % (i, "v" * 1000)))
                 | "HotFlatGroup1" >> beam.GroupByKey())
        flat2 = (p
                 | "HotFlatIndices2" >> beam.Create(list(range(1500)))
                 | "HotFlatPair2" >> beam.Map(lambda i: ("hot2", "%06d%s" % (i, "w" * 1000)))
                 | "HotFlatGroup2" >> beam.GroupByKey())
        ((flat1, flat2)
         | "HotFlatten" >> beam.Flatten()
         | "HotFlatSummary" >> beam.Map(lambda kv: (kv[0], sum(1 for _ in kv[1]), sum(int(v[:6]) for v in kv[1]), sum(len(v) for v in kv[1])))
         | "WHotFlatten" >> beam.Map(write("hotflatten")))
        (p
         | "HotStateIndices" >> beam.Create(list(range(3000)))
         | "HotStatePair" >> beam.Map(lambda i: ("hot", "%06d%s" % (i, "v" * 1000)))
         | "HotStateGroup" >> beam.GroupByKey()
         | "HotStateSummary" >> beam.ParDo(SummarizeGroupOnce())
         | "WHotState" >> beam.Map(write("hotstate")))
        (p
         | "OrderedIndices" >> beam.Create(random.Random(5).sample(range(3000), 3000))
         | "OrderedPair" >> beam.Map(lambda i: ("ordered", "%06d%s" % (i, "v" * 1000)))
         | "Ordered" >> beam.ParDo(OrderedUntilEnd())
         | "WOrdered" >> beam.Map(write("ordered")))
        fixed = stamped | "SdfWindows" >> beam.WindowInto(window.FixedWindows(100))
        window_maxes = fixed | "WindowMax" >> beam.CombinePerKey(max)
        (fixed
         | "SdfSome" >> beam.Filter(lambda kv: kv[1] % 7 == 0)
         | "SdfSide" >> beam.ParDo(PositionsWithSide(), beam.pvalue.AsDict(window_maxes))
         | "SdfWin" >> beam.Map(lambda r, w=beam.DoFn.WindowParam: (r, str(w)))
         | "WSdfSide" >> beam.Map(write("sdfside")))


if __name__ == "__main__":
    main()
    exit_now(0)
