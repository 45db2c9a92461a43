package abi

import (
	"encoding/binary"
	"errors"
)

// Stage is the stage description the host passes to ksr_setup. Its encoding
// is a sequence of fields in declaration order; a string is a little-endian
// u32 length and the bytes, a list a little-endian u32 count and the items.
type Stage struct {
	ID    string
	Input string // PCollection id of the stage input
	// Outputs are the PCollection ids leaving the stage; an output record's
	// output index is a position in this list.
	Outputs []string
	// Transforms in topological order: a transform's input is Input or an
	// output of an earlier transform.
	Transforms []Transform
}

// Transform is one ParDo of the stage.
type Transform struct {
	ID      string // pipeline transform id (metrics and errors are attributed to it)
	DoFn    string // name the DoFn is registered under in the module
	Input   string // PCollection id
	Outputs []TaggedOutput
}

// TaggedOutput maps a transform's local output tag to a PCollection id.
type TaggedOutput struct {
	Tag, PCollection string
}

// AppendStage appends the encoding of s to dst.
func AppendStage(dst []byte, s *Stage) []byte {
	dst = appendString(dst, s.ID)
	dst = appendString(dst, s.Input)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s.Outputs)))
	for _, o := range s.Outputs {
		dst = appendString(dst, o)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s.Transforms)))
	for _, t := range s.Transforms {
		dst = appendString(dst, t.ID)
		dst = appendString(dst, t.DoFn)
		dst = appendString(dst, t.Input)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(t.Outputs)))
		for _, o := range t.Outputs {
			dst = appendString(dst, o.Tag)
			dst = appendString(dst, o.PCollection)
		}
	}
	return dst
}

// ParseStage decodes a stage description encoded by AppendStage.
func ParseStage(b []byte) (*Stage, error) {
	r := reader{b: b}
	s := &Stage{ID: r.str(), Input: r.str()}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		s.Outputs = append(s.Outputs, r.str())
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		t := Transform{ID: r.str(), DoFn: r.str(), Input: r.str()}
		for m := r.count(); m > 0 && r.err == nil; m-- {
			t.Outputs = append(t.Outputs, TaggedOutput{Tag: r.str(), PCollection: r.str()})
		}
		s.Transforms = append(s.Transforms, t)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return nil, errors.New("malformed stage description: " + r.err.Error())
	}
	return s, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) count() uint32 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 4 {
		r.err = errors.New("truncated")
		return 0
	}
	n := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return n
}

func (r *reader) str() string {
	n := r.count()
	if r.err != nil {
		return ""
	}
	if uint32(len(r.b)) < n {
		r.err = errors.New("truncated")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
