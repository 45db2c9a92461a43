package task

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/translate"

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

// gatesInput reports whether stage s of sub parks its input: for side
// inputs its root does not wait for, or, reading groups that cross a topic
// in pieces (translate's Stage.PagedGroups behind a passthrough root), to
// hold each such group until the cycle after its last piece, when its copy
// is in the store (pieces.go). Such a stage without side inputs parks
// nothing else.
func gatesInput(sub *translate.SubTopology, s *translate.Stage) bool {
	return !sub.Root.WaitsForSides(s) || s.PagedGroups && sub.Root.Kind == translate.RootPassthrough
}

// gate parks in and returns the parked chunks that are ready, deleting them.
// A paged group (a stage reading a GroupByKey's output in pages) that is
// ready as it comes goes on at once; one that is not is parked alone, with
// the rest of its values copied into the store (gatepages.go).
func (t *Task) gate(sr *stageRun, in []chunk) ([]chunk, error) {
	codec := t.env.Codecs[sr.stage.Input]
	ready := maxWatermark
	for _, si := range sr.stage.SideInputs {
		ready = min(ready, t.env.SideWatermark(si.Topic))
	}
	var now []chunk
	if len(sr.stage.SideInputs) == 0 {
		// Gated only for groups in pieces (gatesInput), which groupPiece
		// parks: the rest goes on at once.
		now, in = in, nil
	}
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
			elemMax := minWatermark
			for _, w := range wins {
				ts, err := windowMaxTimestamp(w)
				if err != nil {
					return nil, err
				}
				elemMax = max(elemMax, ts)
			}
			iterAt, tokenAt := -1, -1
			if sr.stage.PagedGroups {
				if iterAt, tokenAt, err = pagedGroupAt(codec, wv); err != nil {
					return nil, fmt.Errorf("stage %s: input: %w", sr.stage.ID, err)
				}
			}
			b = b[len(wv.Raw):]
			if tokenAt >= 0 {
				if n > 0 {
					if err := t.park(sr, c.data[start:off], n, minTs, maxWin, true); err != nil {
						return nil, err
					}
					minTs, maxWin, n = maxWatermark, minWatermark, 0
				}
				if elemMax < ready {
					now = append(now, chunk{data: wv.Raw, elements: 1})
				} else if err := t.parkPaged(sr, codec, wv.Raw, iterAt, tokenAt, wv.Timestamp, elemMax); err != nil {
					return nil, fmt.Errorf("stage %s: %w", sr.stage.ID, err)
				}
				off += len(wv.Raw)
				start = off
				continue
			}
			maxWin = max(maxWin, elemMax)
			minTs = min(minTs, wv.Timestamp)
			n++
			off += len(wv.Raw)
			if len(b) == 0 || off-start >= maxStoredValue {
				if err := t.park(sr, c.data[start:off], n, minTs, maxWin, true); err != nil {
					return nil, err
				}
				minTs, maxWin, start, n = maxWatermark, minWatermark, off, 0
			}
		}
	}
	// A parked piece is keyed by the largest maximum timestamp of its
	// windows: it is released once ready is past it (the same test
	// sidesReady's groups pass).
	lower := t.key(state.Gate, []byte{sr.idx})
	out, err := t.unpark(sr, lower, binary.BigEndian.AppendUint64(append([]byte(nil), lower...), state.EventTimeBits(ready)))
	if err != nil {
		return nil, err
	}
	if sr.stage.PagedGroups {
		for i := range out {
			if out[i].data, err = t.unparkPaged(sr, codec, out[i].data); err != nil {
				return nil, fmt.Errorf("stage %s: %w", sr.stage.ID, err)
			}
		}
	}
	return append(out, now...), nil
}

// sidesReady is how far every side input the GroupByKey root waits for
// (Root.SideInputTopics) is complete: the root fires a window only when
// its end is before it, as gate releases parked input. It is the maximum
// watermark when the root waits for none.
func (t *Task) sidesReady() int64 {
	ready := maxWatermark
	for _, topic := range t.sub.Root.SideInputTopics {
		ready = min(ready, t.env.SideWatermark(topic))
	}
	return ready
}

// unpark returns the parked chunks of sr whose keys are in [lower, upper),
// in key order, deleting them (and their hold index entries), but paged
// groups parked in this cycle (gatepages.go).
func (t *Task) unpark(sr *stageRun, lower, upper []byte) ([]chunk, error) {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	var out []chunk
	var keys [][]byte
	var mins []int64
	for it.First(); it.Valid(); it.Next() {
		if t.pages.parkedNow(it.Key()[len(it.Key())-8:]) {
			continue // a paged group stays parked until its copy is in the DB
		}
		v := it.Value()
		out = append(out, chunk{data: append([]byte(nil), v[16:]...), elements: int(binary.BigEndian.Uint64(v[8:]))})
		keys = append(keys, append([]byte(nil), it.Key()...))
		mins = append(mins, int64(binary.BigEndian.Uint64(v)))
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	for i, k := range keys {
		if err := t.batch.Delete(k, nil); err != nil {
			return nil, err
		}
		if sr.gated {
			if err := t.batch.Delete(t.holdKey(sr, mins[i], k[len(k)-8:]), nil); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// park stores n whole elements of a stage's input under the time maxWin,
// their smallest timestamp being minTs. Input parked for side inputs
// (indexHold) is also indexed by minTs, so that gateHold finds the smallest
// without reading every parked value; time-sorted input is parked under its
// own timestamp (minTs == maxWin), which orders the keys already.
func (t *Task) park(sr *stageRun, data []byte, n int, minTs, maxWin int64, indexHold bool) error {
	return t.parkAt(sr, t.nextGateSeq(), data, n, minTs, maxWin, indexHold)
}

// nextGateSeq is the sequence number of the next piece of parked input.
func (t *Task) nextGateSeq() []byte {
	seq := binary.BigEndian.AppendUint64(nil, t.gateSeq)
	t.gateSeq++
	return seq
}

// parkAt is park under the sequence number seq.
func (t *Task) parkAt(sr *stageRun, seq, data []byte, n int, minTs, maxWin int64, indexHold bool) error {
	k := t.key(state.Gate, []byte{sr.idx}, binary.BigEndian.AppendUint64(nil, state.EventTimeBits(maxWin)), seq)
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(data)), uint64(minTs))
	v = binary.BigEndian.AppendUint64(v, uint64(n))
	if err := t.batch.Set(k, append(v, data...), nil); err != nil {
		return err
	}
	if indexHold {
		return t.batch.Set(t.holdKey(sr, minTs, seq), nil, nil)
	}
	return nil
}

// holdKey is the hold index entry of the input parked with sequence seq.
func (t *Task) holdKey(sr *stageRun, minTs int64, seq []byte) []byte {
	return t.key(state.GateHold, []byte{sr.idx}, binary.BigEndian.AppendUint64(nil, state.EventTimeBits(minTs)), seq)
}

// gateHold is the smallest timestamp of parked input, or the maximum
// watermark when none is parked: per stage, the first key of its parked
// input (time-sorted input) and of its hold index (input parked for side
// inputs, whose keys order by window rather than timestamp); without
// sorted, of input parked for side inputs only.
func (t *Task) gateHold(sorted bool) (int64, error) {
	hold := maxWatermark
	first := func(kind state.Kind, idx byte) error {
		lower := t.key(kind, []byte{idx})
		it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: state.PrefixEnd(lower)})
		if err != nil {
			return err
		}
		if it.First() {
			k := it.Key()
			hold = min(hold, int64(binary.BigEndian.Uint64(k[len(lower):])^(1<<63)))
		}
		return it.Close()
	}
	for _, sr := range t.stages {
		if sorted && sr.sorted {
			if err := first(state.Gate, sr.idx); err != nil {
				return 0, err
			}
		}
		if sr.gated {
			if err := first(state.GateHold, sr.idx); err != nil {
				return 0, err
			}
		}
	}
	return hold, nil
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

// loadSortedUpTo reads each time-sorted stage's committed release point.
func (t *Task) loadSortedUpTo() error {
	for _, sr := range t.stages {
		if !sr.sorted {
			continue
		}
		v, closer, err := t.batch.Get(t.key(state.SortedUpTo, []byte{sr.idx}))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("stage %s: reading the time-sorted release point: %w", sr.stage.ID, err)
		}
		sr.sortedUpTo = int64(binary.BigEndian.Uint64(v))
		closer.Close()
	}
	return nil
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
// lateness. The release point is state (state.SortedUpTo): it survives an
// aborted cycle, a restart and a move to another instance as committed.
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
			} else if err := t.park(sr, b[:l.End], 1, l.Timestamp, l.Timestamp, false); err != nil {
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
	parked, err := t.unpark(sr, lower, upper)
	if err != nil {
		return nil, err
	}
	if ready > sr.sortedUpTo {
		sr.sortedUpTo = ready
		if err := t.batch.Set(t.key(state.SortedUpTo, []byte{sr.idx}), binary.BigEndian.AppendUint64(nil, uint64(ready)), nil); err != nil {
			return nil, fmt.Errorf("stage %s: recording the time-sorted release point: %w", sr.stage.ID, err)
		}
	}
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
