package task

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// Beam's iterable coder writes a known count, or -1 and then chunks each
// led by a varint count, ending with a zero count.
func TestSplitIterable(t *testing.T) {
	fixed2 := func(b []byte) (int, error) {
		if len(b) < 2 {
			return 0, errIterable
		}
		return 2, nil
	}
	counted := func(elems ...string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(elems)))
		for _, e := range elems {
			b = append(b, e...)
		}
		return b
	}
	chunked := func(chunks ...[]string) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF)
		for _, c := range chunks {
			b = binary.AppendUvarint(b, uint64(len(c)))
			for _, e := range c {
				b = append(b, e...)
			}
		}
		return append(b, 0)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want []string
		err  bool
	}{
		{"empty", counted(), nil, false},
		{"counted", counted("ab", "cd", "ef"), []string{"ab", "cd", "ef"}, false},
		{"chunked", chunked([]string{"ab"}, []string{"cd", "ef"}), []string{"ab", "cd", "ef"}, false},
		{"chunked empty", chunked(), nil, false},
		{"truncated count", []byte{0, 0}, nil, true},
		{"truncated element", counted("ab", "cd")[:7], nil, true},
		{"unterminated chunks", chunked([]string{"ab"})[:7], nil, true},
		{"bad count", binary.BigEndian.AppendUint32(nil, 0xFFFFFFFE), nil, true},
	} {
		if tc.err {
			if _, _, err := splitIterable(tc.in, fixed2); err == nil {
				t.Errorf("%s: no error", tc.name)
			}
			continue
		}
		got, rest, err := splitIterable(append(tc.in, "rest"...), fixed2)
		if err != nil || string(rest) != "rest" || fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
			t.Errorf("%s: %q rest %q err %v, want %q", tc.name, got, rest, err, tc.want)
		}
	}
}
