// Package metrics aggregates a job's Beam metrics (MonitoringInfos) as the
// Job API reports them, attempted and committed.
package metrics

import (
	"bytes"
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
// payloads by type (sums add, distributions combine, anything else keeps the
// latest).
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
	}
	return nil, false
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
