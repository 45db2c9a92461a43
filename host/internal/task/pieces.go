package task

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// Groups crossing a topic in pieces.
//
// A GroupByKey's group that its root pages (gbkpages.go), bound for a topic
// whose one reader parks its input for side inputs (Sink.PagedGroups), is
// written as pieces of whole values, each at most about maxStoredValue
// bytes, then an end record with the element and no value inline
// (shuffle/pieces.go has the records). The reader stores each piece as it
// comes where a parked group's copy lives (gatepages.go):
//
//	Pieces | producer                →  seq (8) | next (8) | gate seq (8)
//	GatePages | stage | gate seq | n  →  piece n's values
//
// The Pieces entry is the group a producer is sending: the producer's seq,
// the next piece expected and the gate sequence number its pieces are
// stored under. The end record parks the element under that gate sequence
// number with a parked token, and removes the entry; from there on it is a
// parked group like any other, released by the gate (in a later cycle) and
// read in pages from its copy.
//
// Invariants:
//   - A producer sends a group's pieces and end record to one partition,
//     contiguous among its own records there, so a task has at most one
//     unfinished group per producer, and its pieces come in order.
//   - Piece 0 starts a group, dropping an unfinished one of the same
//     producer: without transactions, a producer that failed mid-group
//     sends the group again from piece 0 (under exactly_once a
//     read_committed reader sees a group's records all or none).
//   - Every other record of a group that is not the next one expected is a
//     redelivery of what the task took already (its state committed ahead
//     of its offsets, at_least_once only) and is skipped. Under
//     exactly_once nothing is redelivered, so such a record fails the
//     task, naming it, rather than hiding a fault.
//   - Stored pieces and the entry are in the task's state with the offsets
//     that brought them, so a group may span commit cycles and restarts.
//   - A parked token's gate sequence number is unique in the task:
//     loadGateSeq continues after those of the Pieces entries too.

// sinkIfPaged writes raw, an element of pcoll, to s's topic in pieces if
// it is a paged group, and reports whether it was.
func (t *Task) sinkIfPaged(s *translate.Sink, pcoll string, raw []byte) (bool, error) {
	codec := t.env.Codecs[pcoll]
	wv, err := codec.Next(raw)
	if err != nil {
		return false, fmt.Errorf("pcollection %s: %w", t.pcollName(pcoll), err)
	}
	iterAt, tokenAt, err := pagedGroupAt(codec, wv)
	if err != nil {
		return false, fmt.Errorf("pcollection %s: %w", t.pcollName(pcoll), err)
	}
	if tokenAt < 0 {
		return false, nil
	}
	key, _, err := codec.SplitKV(wv.Elem)
	if err != nil {
		return false, fmt.Errorf("pcollection %s: %w", t.pcollName(pcoll), err)
	}
	return true, t.sinkPieces(s, codec, wv.Raw, key, iterAt, tokenAt)
}

// sinkPieces writes the paged group raw (its iterable at iterAt, its token
// at tokenAt) of pcoll to s's topic in pieces, all to the partition its key
// goes to.
func (t *Task) sinkPieces(s *translate.Sink, codec *shuffle.ElementCodec, raw []byte, key []byte, iterAt, tokenAt int) error {
	topic := t.env.Topics.Full(s.Topic)
	p := shuffle.KeyPartition(key, t.env.Topics.Partitions[s.Topic])
	seq := t.pieceSeq
	t.pieceSeq++
	limit := int(t.env.Topics.RecordLimit(topic))
	var n uint64
	err := t.groupValues(codec, raw, iterAt, tokenAt, func(data []byte) error {
		v := shuffle.EncodeGroupPiece(shuffle.KindGroupPiece, t.producer, seq, n, data)
		if len(v)+recordOverhead > limit {
			// Only a single value larger than the limit makes a piece
			// this large: a piece is whole values up to maxStoredValue.
			return fmt.Errorf("a piece of %d bytes does not fit in a record of the topic, which takes at most %d bytes (its max.message.bytes: internal_max_message_bytes for the topics a job creates, at most 67108864); a piece holds whole values, and one value larger than that cannot cross", len(v), limit)
		}
		t.env.Produce(&kgo.Record{Topic: topic, Partition: p, Value: v})
		n++
		return nil
	})
	if err != nil {
		return fmt.Errorf("pcollection %s: sending a group in pieces to %s: %w", t.pcollName(s.PCollection), topic, err)
	}
	// The writer's token is meaningless to the reader, which puts its own
	// in its place: zeros.
	el := withToken(raw, iterAt, make([]byte, pageTokenLen))
	t.env.Produce(&kgo.Record{Topic: topic, Partition: p, Value: shuffle.EncodeGroupPiece(shuffle.KindGroupEnd, t.producer, seq, n, el)})
	return nil
}

// piecesReader is the stage that reads the root's output, a topic of
// pieced groups: the one stage translate allows there.
func (t *Task) piecesReader() (*stageRun, error) {
	if t.piecesTo != nil {
		return t.piecesTo, nil
	}
	var reader *stageRun
	for _, c := range t.consumers[t.sub.Root.Output] {
		if c.stage == nil || reader != nil || !c.stage.stage.PagedGroups || !c.stage.gated {
			return nil, fmt.Errorf("sub-topology %d: groups in pieces on %s, whose reader is not one stage parking paged groups for side inputs", t.sub.ID, t.sub.Input)
		}
		reader = c.stage
	}
	if reader == nil {
		return nil, fmt.Errorf("sub-topology %d: groups in pieces on %s, which no stage reads", t.sub.ID, t.sub.Input)
	}
	t.piecesTo = reader
	return reader, nil
}

// groupPiece takes a KindGroupPiece or KindGroupEnd record.
func (t *Task) groupPiece(r *kgo.Record) error {
	p, err := shuffle.DecodeGroupPiece(r.Value)
	if err != nil {
		return err
	}
	sr, err := t.piecesReader()
	if err != nil {
		return err
	}
	end := r.Value[0] == shuffle.KindGroupEnd
	ik := t.key(state.Pieces, []byte(p.Producer))
	var seq, next uint64
	var gateSeq []byte
	v, closer, err := t.batch.Get(ik)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return err
	default:
		if len(v) != 24 {
			closer.Close()
			return fmt.Errorf("task %s: the pieces entry of producer %s has %d bytes, want 24", t.producer, p.Producer, len(v))
		}
		seq, next, gateSeq = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), bytes.Clone(v[16:])
		closer.Close()
	}
	if !end && p.N == 0 {
		if gateSeq != nil {
			// The producer gave up a group (it failed before its end).
			lower := t.key(state.GatePages, []byte{sr.idx}, gateSeq)
			if err := state.DeleteRange(t.batch, lower, state.PrefixEnd(lower)); err != nil {
				return err
			}
		}
		seq, next, gateSeq = p.Seq, 0, t.nextGateSeq()
	}
	if gateSeq == nil || p.Seq != seq || p.N != next {
		if !t.env.ExactlyOnce {
			return nil // a redelivery of what this task took already
		}
		what := "piece"
		if end {
			what = "end"
		}
		if gateSeq == nil {
			return fmt.Errorf("the %s of group %d (piece %d) from producer %s, of which no piece 0 came: a record out of line under exactly_once", what, p.Seq, p.N, p.Producer)
		}
		return fmt.Errorf("the %s of group %d (piece %d) from producer %s, while its group %d awaits piece %d: a record out of line under exactly_once", what, p.Seq, p.N, p.Producer, seq, next)
	}
	if !end {
		k := t.key(state.GatePages, []byte{sr.idx}, gateSeq, binary.BigEndian.AppendUint64(nil, p.N))
		if err := t.batch.Set(k, p.Data, nil); err != nil {
			return err
		}
		e := binary.BigEndian.AppendUint64(nil, seq)
		e = binary.BigEndian.AppendUint64(e, next+1)
		return t.batch.Set(ik, append(e, gateSeq...), nil)
	}
	if err := t.batch.Delete(ik, nil); err != nil {
		return err
	}
	return t.parkPieced(sr, bytes.Clone(p.Data), gateSeq)
}

// parkPieced parks el, the element of a group whose values are stored
// under gateSeq, with a parked token for them.
func (t *Task) parkPieced(sr *stageRun, el, gateSeq []byte) error {
	codec := t.env.Codecs[sr.stage.Input]
	wv, err := codec.Next(el)
	if err != nil {
		return fmt.Errorf("the end of a group in pieces: %w", err)
	}
	_, at, err := pagedGroupAt(codec, wv)
	if err == nil && (at < 0 || len(wv.Raw) != len(el)) {
		err = errors.New("not one element with a runner token")
	}
	if err != nil {
		return fmt.Errorf("the end of a group in pieces: %w", err)
	}
	copy(el[at:], parkedTokenPrefix)
	copy(el[at+len(parkedTokenPrefix):], gateSeq)
	if sr.expiring {
		live, dropped, err := t.liveWindows(sr, el)
		if err != nil {
			return err
		}
		sr.droppedLate += int64(dropped)
		if live == nil {
			lower := t.key(state.GatePages, []byte{sr.idx}, gateSeq)
			return state.DeleteRange(t.batch, lower, state.PrefixEnd(lower))
		}
		el = live
		if wv, err = codec.Next(el); err != nil {
			return err
		}
	}
	wins, err := codec.SplitWindows(wv)
	if err != nil {
		return fmt.Errorf("the end of a group in pieces: %w", err)
	}
	maxWin := minWatermark
	for _, w := range wins {
		ts, err := windowMaxTimestamp(w)
		if err != nil {
			return err
		}
		maxWin = max(maxWin, ts)
	}
	// Its copy is in the batch only: not before the next cycle.
	t.pages.park(gateSeq)
	return t.parkAt(sr, gateSeq, el, 1, wv.Timestamp, maxWin, true)
}

// loadPiecesSeq continues the gate sequence after those the unfinished
// groups in pieces store their pieces under.
func (t *Task) loadPiecesSeq() error {
	lower := t.key(state.Pieces)
	it, err := t.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: state.PrefixEnd(lower)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if v := it.Value(); len(v) == 24 {
			t.gateSeq = max(t.gateSeq, binary.BigEndian.Uint64(v[16:])+1)
		}
	}
	return it.Error()
}
