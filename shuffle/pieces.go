package shuffle

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A group too large to travel inline (a GroupByKey's group the host pages,
// bound for a topic) crosses the topic in pieces, so that no record, and no
// task on either side, holds it whole:
//
//	KindGroupPiece | uvarint len(producer) | producer | seq (8) | n (8) | values
//	KindGroupEnd   | uvarint len(producer) | producer | seq (8) | n (8) | element
//
// The producer (ProducerID) numbers its pieced groups with seq. Piece n
// (from 0) holds whole values of the group, concatenated as an iterable's
// values are encoded, at most about one stored value's size. The end record
// follows the last piece, n being the number of pieces, and carries the
// windowed element itself: its key, windows, timestamp and pane, with an
// iterable of unknown length that holds no value and ends in a runner token
// of the reader's choosing (the writer leaves its own token's bytes, which
// the reader overwrites).
//
// A producer writes a group's pieces and end record to one partition, one
// after the other, before anything else of its own there; so a reader sees
// each producer's pieces of one group in order, contiguous among that
// producer's records. Under exactly_once a group's records are in one
// transaction: a read_committed reader sees all or none. Without
// transactions a producer that failed mid-group writes the group again from
// piece 0 with a later seq (a reader drops the unfinished one).

// Record kinds of pieced groups.
const (
	// KindGroupPiece: some values of a pieced group (see pieces.go).
	KindGroupPiece byte = 5
	// KindGroupEnd: the element of a pieced group, after its pieces.
	KindGroupEnd byte = 6
)

// GroupPiece is a decoded KindGroupPiece or KindGroupEnd record.
type GroupPiece struct {
	Producer string
	Seq      uint64
	// N is the piece's index, or, in an end record, how many pieces came.
	N uint64
	// Data is the piece's values, or the end record's element.
	Data []byte
}

// EncodeGroupPiece returns a record value of kind (KindGroupPiece or
// KindGroupEnd).
func EncodeGroupPiece(kind byte, producer string, seq, n uint64, data []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(producer)+16+len(data))
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(producer)))
	b = append(b, producer...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, n)
	return append(b, data...)
}

// DecodeGroupPiece parses a KindGroupPiece or KindGroupEnd record's value.
// Data aliases value.
func DecodeGroupPiece(value []byte) (GroupPiece, error) {
	if len(value) == 0 || (value[0] != KindGroupPiece && value[0] != KindGroupEnd) {
		return GroupPiece{}, errors.New("not a group piece record")
	}
	b := value[1:]
	l, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < l+16 {
		return GroupPiece{}, fmt.Errorf("group piece record: truncated (%d bytes)", len(value))
	}
	b = b[w:]
	p := GroupPiece{Producer: string(b[:l])}
	b = b[l:]
	p.Seq = binary.BigEndian.Uint64(b)
	p.N = binary.BigEndian.Uint64(b[8:])
	p.Data = b[16:]
	return p, nil
}
