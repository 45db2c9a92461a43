package shuffle

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A DATA_PACKED record (KindDataPacked) carries whole windowed values bound
// for one partition, so that a shuffle pays Kafka's per-record cost once
// per pack instead of once per element (DESIGN.md §4):
//
//	KindDataPacked | uvarint count | count windowed values, concatenated
//
// The values are in the wire coder of the topic's PCollection, exactly as
// a KindData record carries one; the count lets a reader that has no coder
// (a test counting elements) count them, and lets a decoder check that the
// values it parsed are the ones packed. A topic may hold both kinds (a job
// restarted with another record_pack_bytes): readers take either.

// PackIndexBits is how many low bits of a Position number a value within
// its record, so MaxPackedValues is the most values a record may hold.
const (
	PackIndexBits   = 20
	MaxPackedValues = 1 << PackIndexBits
)

// Position orders the values of a topic partition: value index of the
// record at offset (index 0 for a KindData record). Later values have
// larger positions whatever the mix of record kinds, so it stands in for a
// record offset wherever state orders or deduplicates values by arrival
// (a GroupByKey's buffered runs, a side input's entries). Offsets below
// 2^43 fit, which no partition reaches.
func Position(offset int64, index int) int64 { return offset<<PackIndexBits | int64(index) }

// packHeader is room for the kind byte and the count: the count is known
// only when the pack is taken, so its varint is written right-aligned into
// this room and the value starts wherever the kind byte lands.
const packHeader = 1 + binary.MaxVarintLen32

// Pack fills one DATA_PACKED record. The zero Pack is empty and ready.
type Pack struct {
	buf []byte // packHeader bytes of room, then the values
	n   int
}

// Add appends one whole windowed value (it copies raw).
func (p *Pack) Add(raw []byte) {
	if p.buf == nil {
		p.buf = make([]byte, packHeader, packHeader+max(4096, len(raw)))
	}
	p.buf = append(p.buf, raw...)
	p.n++
}

// Size is the bytes of the values added so far.
func (p *Pack) Size() int { return max(0, len(p.buf)-packHeader) }

// Count is how many values were added since the last Take.
func (p *Pack) Count() int { return p.n }

// Take returns the record value of the values added, and empties p. The
// value is the caller's: p starts a new buffer. It returns nil when p is
// empty.
func (p *Pack) Take() []byte {
	if p.n == 0 {
		return nil
	}
	var cnt [binary.MaxVarintLen32]byte
	c := binary.PutUvarint(cnt[:], uint64(p.n))
	start := packHeader - c - 1
	p.buf[start] = KindDataPacked
	copy(p.buf[start+1:], cnt[:c])
	v := p.buf[start:]
	p.buf, p.n = nil, 0
	return v
}

// DecodePacked splits the value of a KindDataPacked record into the count
// of its values and the values, concatenated.
func DecodePacked(value []byte) (count int, values []byte, err error) {
	if len(value) == 0 || value[0] != KindDataPacked {
		return 0, nil, errors.New("not a packed data record")
	}
	n, l := binary.Uvarint(value[1:])
	switch {
	case l <= 0:
		return 0, nil, fmt.Errorf("packed data record: bad value count (%d bytes)", len(value))
	case n == 0 || n > MaxPackedValues:
		return 0, nil, fmt.Errorf("packed data record: %d values, want 1 to %d", n, MaxPackedValues)
	}
	return int(n), value[1+l:], nil
}

// EachPacked calls f with the index and bytes of each windowed value of the
// KindDataPacked record value, in order. It fails when the values do not
// parse in c, or their number is not the record's count: a pack is whole
// or refused.
func (c *ElementCodec) EachPacked(value []byte, f func(index int, raw []byte) error) error {
	n, b, err := DecodePacked(value)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if len(b) == 0 {
			return fmt.Errorf("packed data record: %d values, want %d", i, n)
		}
		l, err := c.Locate(b)
		if err != nil {
			return fmt.Errorf("packed data record: value %d of %d: %w", i, n, err)
		}
		if err := f(i, b[:l.End]); err != nil {
			return err
		}
		b = b[l.End:]
	}
	if len(b) > 0 {
		return fmt.Errorf("packed data record: %d bytes after its %d values", len(b), n)
	}
	return nil
}
