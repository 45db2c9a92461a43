package host

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A stage that reads side inputs only gets input whose windows every side
// input has completed: each chunk of its input is parked in the task's store
// under the largest maximum timestamp of its elements' windows, and released
// once every side input's watermark has passed that timestamp. Parked input
// is durable with the task's state (its offsets are committed with it) and
// holds the task's output watermark at its smallest element timestamp.

// gate parks in and returns the parked chunks that are ready, deleting them.
func (t *task) gate(sr *stageRun, in []chunk) ([]chunk, error) {
	codec := t.inst.codecs[sr.stage.Input]
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
		ready = min(ready, t.inst.side.watermark(si.Topic))
	}
	lower := t.key(storeGate, []byte{sr.idx})
	upper := binary.BigEndian.AppendUint64(append([]byte(nil), lower...), eventTimeBits(ready))
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
func (t *task) park(sr *stageRun, data []byte, n int, minTs, maxWin int64) error {
	k := t.key(storeGate, []byte{sr.idx})
	k = binary.BigEndian.AppendUint64(k, eventTimeBits(maxWin))
	k = binary.BigEndian.AppendUint64(k, t.gateSeq)
	t.gateSeq++
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(data)), uint64(minTs))
	v = binary.BigEndian.AppendUint64(v, uint64(n))
	return t.batch.Set(k, append(v, data...), nil)
}

// gateHold is the smallest timestamp of parked input, or the maximum
// watermark when none is parked.
func (t *task) gateHold() (int64, error) {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(storeGate), UpperBound: t.key(storeGate + 1)})
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
func (t *task) loadGateSeq() error {
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: t.key(storeGate), UpperBound: t.key(storeGate + 1)})
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
