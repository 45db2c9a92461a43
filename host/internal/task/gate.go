package task

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/ksrunner/ksrunner/host/internal/state"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"
)

// A stage that reads side inputs only gets input whose windows every side
// input has completed: each chunk of its input is parked in the task's store
// under the largest maximum timestamp of its elements' windows, and released
// once every side input's watermark has passed that timestamp. Parked input
// is durable with the task's state (its offsets are committed with it) and
// holds the task's output watermark at its smallest element timestamp.

// gate parks in and returns the parked chunks that are ready, deleting them.
func (t *Task) gate(sr *stageRun, in []chunk) ([]chunk, error) {
	codec := t.env.Codecs[sr.stage.Input]
	for _, c := range in {
		// Each stored piece is whole elements of at most about
		// maxStoredValue bytes: it is one changelog record.
		minTs, maxWin, start, n := maxWatermark, minWatermark, 0, 0
		for b, off := c.data, 0; len(b) > 0; {
			wv, err := codec.Next(b)
			if err != nil {
				return nil, fmt.Errorf("stage %s: input: %w", sr.stage.ID, err)
			}
			wins, err := codec.SplitWindows(wv)
			if err != nil {
				return nil, fmt.Errorf("stage %s: input: %w", sr.stage.ID, err)
			}
			for _, w := range wins {
				ts, err := windowMaxTimestamp(w)
				if err != nil {
					return nil, err
				}
				maxWin = max(maxWin, ts)
			}
			minTs = min(minTs, wv.Timestamp)
			n++
			b = b[len(wv.Raw):]
			off += len(wv.Raw)
			if len(b) == 0 || off-start >= maxStoredValue {
				if err := t.park(sr, c.data[start:off], n, minTs, maxWin); err != nil {
					return nil, err
				}
				minTs, maxWin, start, n = maxWatermark, minWatermark, off, 0
			}
		}
	}
	ready := maxWatermark
	for _, si := range sr.stage.SideInputs {
		ready = min(ready, t.env.SideWatermark(si.Topic))
	}
	lower := t.key(state.Gate, []byte{sr.idx})
	return t.unpark(lower, binary.BigEndian.AppendUint64(append([]byte(nil), lower...), state.EventTimeBits(ready)))
}

// unpark returns the parked chunks whose keys are in [lower, upper), in key
// order, deleting them.
func (t *Task) unpark(lower, upper []byte) ([]chunk, error) {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	var out []chunk
	var keys [][]byte
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		out = append(out, chunk{data: append([]byte(nil), v[16:]...), elements: int(binary.BigEndian.Uint64(v[8:]))})
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := t.batch.Delete(k, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// park stores n whole elements of a gated stage's input.
func (t *Task) park(sr *stageRun, data []byte, n int, minTs, maxWin int64) error {
	k := t.key(state.Gate, []byte{sr.idx})
	k = binary.BigEndian.AppendUint64(k, state.EventTimeBits(maxWin))
	k = binary.BigEndian.AppendUint64(k, t.gateSeq)
	t.gateSeq++
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(data)), uint64(minTs))
	v = binary.BigEndian.AppendUint64(v, uint64(n))
	return t.batch.Set(k, append(v, data...), nil)
}

// gateHold is the smallest timestamp of parked input, or the maximum
// watermark when none is parked.
func (t *Task) gateHold() (int64, error) {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(state.Gate), UpperBound: t.key(state.Gate + 1)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	hold := maxWatermark
	for it.First(); it.Valid(); it.Next() {
		hold = min(hold, int64(binary.BigEndian.Uint64(it.Value())))
	}
	return hold, it.Error()
}

// loadGateSeq continues the sequence of parked input after a restart.
func (t *Task) loadGateSeq() error {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(state.Gate), UpperBound: t.key(state.Gate + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		t.gateSeq = max(t.gateSeq, binary.BigEndian.Uint64(k[len(k)-8:])+1)
	}
	return it.Error()
}

// sortByTime parks every element of a time-sorted stage's input under the
// gate's store keys, ordered by the element's timestamp, and returns, as one
// chunk in timestamp order, those the input watermark less the allowed
// lateness has passed; later ones wait. flushStages hands it all of the
// stage's pending input, so no element can still be pending when the
// release passes its timestamp. The parked elements hold the task's output
// watermark (gateHold). An element older than what was released already
// could no longer be sorted in: it is dropped and counted in
// dropped_late_elements, as a GroupByKey drops what is past its allowed
// lateness. (The release point is kept in memory: after the task moves,
// such an element is processed, out of order, rather than dropped.)
func (t *Task) sortByTime(sr *stageRun, in []chunk, inputWM int64) ([]chunk, error) {
	ready := inputWM
	if ready < maxWatermark {
		ready = max(ready-sr.stage.TimeSortedLateness, minWatermark)
	}
	codec := t.env.Codecs[sr.stage.Input]
	dropped := int64(0)
	for _, c := range in {
		for b := c.data; len(b) > 0; {
			l, err := codec.Locate(b)
			if err != nil {
				return nil, fmt.Errorf("stage %s: input: %w", sr.stage.ID, err)
			}
			if l.Timestamp < sr.sortedUpTo {
				dropped++
			} else if err := t.park(sr, b[:l.End], 1, l.Timestamp, l.Timestamp); err != nil {
				return nil, err
			}
			b = b[l.End:]
		}
	}
	if dropped > 0 {
		t.addMetrics([]*pipepb.MonitoringInfo{hostCounter(sr.stage.Transforms[0], "dropped_late_elements", dropped)})
	}
	lower := t.key(state.Gate, []byte{sr.idx})
	upper := state.PrefixEnd(lower)
	if ready < maxWatermark {
		upper = binary.BigEndian.AppendUint64(append([]byte(nil), lower...), state.EventTimeBits(ready))
	}
	parked, err := t.unpark(lower, upper)
	if err != nil {
		return nil, err
	}
	sr.sortedUpTo = max(sr.sortedUpTo, ready)
	if len(parked) == 0 {
		return nil, nil
	}
	var out chunk // one chunk: one data message for the SDK, not one per element
	for _, c := range parked {
		out.data = append(out.data, c.data...)
		out.elements += c.elements
	}
	return []chunk{out}, nil
}

// hostCounter is n more of the host's counter ksrunner/name of transform,
// reported like a user counter.
func hostCounter(transform, name string, n int64) *pipepb.MonitoringInfo {
	var buf bytes.Buffer
	coder.EncodeVarInt(n, &buf)
	return &pipepb.MonitoringInfo{
		Urn:     "beam:metric:user:sum_int64:v1",
		Type:    "beam:metrics:sum_int64:v1",
		Payload: buf.Bytes(),
		Labels:  map[string]string{"PTRANSFORM": transform, "NAMESPACE": "ksrunner", "NAME": name},
	}
}
