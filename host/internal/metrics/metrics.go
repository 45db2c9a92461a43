// Package metrics aggregates a job's Beam metrics (MonitoringInfos) as the
// Job API reports them, attempted and committed.
package metrics

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Job is a job's metrics as the Job API reports them: attempted
// counts every finished bundle, committed only the bundles of commit cycles
// whose transaction (exactly_once) or offset commit (at_least_once)
// succeeded. A bundle of an aborted cycle is attempted, not committed: its
// input is processed again and counted again in attempted.
type Job struct {
	Attempted, Committed *Store
}

// NewJob returns empty metrics.
func NewJob() *Job {
	return &Job{Attempted: newStore(), Committed: newStore()}
}

// Store aggregates MonitoringInfos, keyed by URN and labels, merging
// payloads by type (mergePayload; a type it does not know keeps the latest).
type Store struct {
	mu    sync.Mutex
	infos map[string]*pipepb.MonitoringInfo
}

func newStore() *Store { return &Store{infos: map[string]*pipepb.MonitoringInfo{}} }

func metricKey(m *pipepb.MonitoringInfo) string {
	keys := make([]string, 0, len(m.GetLabels()))
	for k := range m.GetLabels() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString(m.GetUrn())
	for _, k := range keys {
		b.WriteString("\x00" + k + "=" + m.GetLabels()[k])
	}
	return b.String()
}

func (s *Store) Add(infos []*pipepb.MonitoringInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range infos {
		k := metricKey(m)
		old, ok := s.infos[k]
		if !ok {
			s.infos[k] = proto.Clone(m).(*pipepb.MonitoringInfo)
			continue
		}
		if merged, ok := mergePayload(m.GetType(), old.GetPayload(), m.GetPayload()); ok {
			old.Payload = merged
		} else {
			old.Payload = m.GetPayload()
		}
	}
}

func (s *Store) Results() []*pipepb.MonitoringInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pipepb.MonitoringInfo, 0, len(s.infos))
	for _, m := range s.infos {
		out = append(out, proto.Clone(m).(*pipepb.MonitoringInfo))
	}
	sort.Slice(out, func(i, j int) bool { return metricKey(out[i]) < metricKey(out[j]) })
	return out
}

// mergePayload merges two payloads of a metric type as Beam's model
// defines it: sums add, distributions combine, string sets unite, gauges keep
// the value of the later timestamp. ok is false for a type it does not know
// (bounded tries, top/bottom N) or a payload it cannot decode: the caller
// then keeps the latest.
func mergePayload(typ string, a, b []byte) ([]byte, bool) {
	switch typ {
	case "beam:metrics:sum_int64:v1":
		x, err1 := coder.DecodeVarInt(bytes.NewReader(a))
		y, err2 := coder.DecodeVarInt(bytes.NewReader(b))
		if err1 != nil || err2 != nil {
			return nil, false
		}
		var out bytes.Buffer
		coder.EncodeVarInt(x+y, &out)
		return out.Bytes(), true
	case "beam:metrics:sum_double:v1":
		x, err1 := coder.DecodeDouble(bytes.NewReader(a))
		y, err2 := coder.DecodeDouble(bytes.NewReader(b))
		if err1 != nil || err2 != nil {
			return nil, false
		}
		var out bytes.Buffer
		coder.EncodeDouble(x+y, &out)
		return out.Bytes(), true
	case "beam:metrics:distribution_int64:v1":
		// An SDK may send a distribution nothing updated as a lone count of
		// 0, without sum, min and max: it adds nothing.
		if emptyDistribution(a) {
			return b, true
		}
		if emptyDistribution(b) {
			return a, true
		}
		da, err1 := DecodeVarInts(a, 4)
		db, err2 := DecodeVarInts(b, 4)
		if err1 != nil || err2 != nil {
			return nil, false
		}
		// count, sum, min, max
		var out bytes.Buffer
		coder.EncodeVarInt(da[0]+db[0], &out)
		coder.EncodeVarInt(da[1]+db[1], &out)
		coder.EncodeVarInt(min(da[2], db[2]), &out)
		coder.EncodeVarInt(max(da[3], db[3]), &out)
		return out.Bytes(), true
	case "beam:metrics:distribution_double:v1":
		if emptyDistribution(a) {
			return b, true
		}
		if emptyDistribution(b) {
			return a, true
		}
		ca, sa, mina, maxa, err1 := decodeDoubleDistribution(a)
		cb, sb, minb, maxb, err2 := decodeDoubleDistribution(b)
		if err1 != nil || err2 != nil {
			return nil, false
		}
		var out bytes.Buffer
		coder.EncodeVarInt(ca+cb, &out)
		coder.EncodeDouble(sa+sb, &out)
		coder.EncodeDouble(min(mina, minb), &out)
		coder.EncodeDouble(max(maxa, maxb), &out)
		return out.Bytes(), true
	case "beam:metrics:set_string:v1":
		// An iterable of UTF-8 strings: a big-endian int32 count, then each
		// string length-prefixed. Sets unite; the output is sorted so that
		// equal sets have equal payloads.
		sa, err1 := decodeStringSet(a)
		sb, err2 := decodeStringSet(b)
		if err1 != nil || err2 != nil {
			return nil, false
		}
		sa = append(sa, sb...)
		sort.Strings(sa)
		sa = slices.Compact(sa)
		var out bytes.Buffer
		coder.EncodeInt32(int32(len(sa)), &out)
		for _, v := range sa {
			coder.EncodeStringUTF8(v, &out)
		}
		return out.Bytes(), true
	case "beam:metrics:latest_int64:v1", "beam:metrics:latest_double:v1":
		// A timestamp (millis since the epoch), then the value: the later
		// timestamp wins, whichever bundle finished last.
		ta, err1 := coder.DecodeVarInt(bytes.NewReader(a))
		tb, err2 := coder.DecodeVarInt(bytes.NewReader(b))
		if err1 != nil || err2 != nil {
			return nil, false
		}
		if ta > tb {
			return a, true
		}
		return b, true
	}
	return nil, false
}

// emptyDistribution reports whether a distribution payload is a lone count
// of 0.
func emptyDistribution(p []byte) bool { return len(p) == 1 && p[0] == 0 }

func decodeDoubleDistribution(p []byte) (count int64, sum, lo, hi float64, err error) {
	r := bytes.NewReader(p)
	if count, err = coder.DecodeVarInt(r); err != nil {
		return
	}
	if sum, err = coder.DecodeDouble(r); err != nil {
		return
	}
	if lo, err = coder.DecodeDouble(r); err != nil {
		return
	}
	hi, err = coder.DecodeDouble(r)
	return
}

func decodeStringSet(p []byte) ([]string, error) {
	r := bytes.NewReader(p)
	n, err := coder.DecodeInt32(r)
	if err != nil {
		return nil, err
	}
	if n < 0 || int64(n) > int64(r.Len()) {
		return nil, fmt.Errorf("string set of %d entries in %d bytes", n, r.Len())
	}
	out := make([]string, 0, n)
	for range n {
		v, err := coder.DecodeStringUTF8(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if r.Len() > 0 {
		return nil, fmt.Errorf("string set: %d bytes after its %d entries", r.Len(), n)
	}
	return out, nil
}

// DecodeVarInts reads n varints, as the int64 payloads of Beam metrics hold them.
func DecodeVarInts(b []byte, n int) ([]int64, error) {
	r := bytes.NewReader(b)
	out := make([]int64, n)
	for i := range out {
		v, err := coder.DecodeVarInt(r)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
