package status

import (
	"sort"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/host/internal/metrics"
)

// UserMetric is one user metric (a Beam counter, distribution or gauge of
// one transform), attempted and committed.
type UserMetric struct {
	Kind      string `json:"kind"` // counter, distribution, gauge
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Transform string `json:"transform"`
	// Attempted and Committed are the values: a counter's or gauge's
	// value, a distribution's [count, sum, min, max]; nil when absent.
	Attempted []int64 `json:"attempted"`
	Committed []int64 `json:"committed"`
}

const (
	urnCounter      = "beam:metric:user:sum_int64:v1"
	urnDistribution = "beam:metric:user:distribution_int64:v1"
	urnGauge        = "beam:metric:user:latest_int64:v1"
)

// UserMetrics reads the user metrics of a job's MonitoringInfos; other
// kinds (system metrics, double sums, string sets) are left out.
func UserMetrics(attempted, committed []*pipepb.MonitoringInfo) []UserMetric {
	byKey := map[[4]string]*UserMetric{}
	add := func(infos []*pipepb.MonitoringInfo, committed bool) {
		for _, m := range infos {
			var kind string
			var vals []int64
			var err error
			switch m.GetUrn() {
			case urnCounter:
				kind = "counter"
				vals, err = metrics.DecodeVarInts(m.GetPayload(), 1)
			case urnDistribution:
				kind = "distribution"
				vals, err = metrics.DecodeVarInts(m.GetPayload(), 4)
			case urnGauge:
				kind = "gauge"
				vals, err = gauge(m.GetPayload())
			default:
				continue
			}
			if err != nil {
				continue
			}
			l := m.GetLabels()
			k := [4]string{kind, l["NAMESPACE"], l["NAME"], l["PTRANSFORM"]}
			um := byKey[k]
			if um == nil {
				um = &UserMetric{Kind: kind, Namespace: k[1], Name: k[2], Transform: k[3]}
				byKey[k] = um
			}
			if committed {
				um.Committed = vals
			} else {
				um.Attempted = vals
			}
		}
	}
	add(attempted, false)
	add(committed, true)
	out := make([]UserMetric, 0, len(byKey))
	for _, m := range byKey {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Transform != b.Transform {
			return a.Transform < b.Transform
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Kind < b.Kind
	})
	return out
}

// gauge is a latest_int64 payload: a timestamp (Unix millis) and the
// value, both varints.
func gauge(b []byte) ([]int64, error) {
	v, err := metrics.DecodeVarInts(b, 2)
	if err != nil {
		return nil, err
	}
	return v[1:], nil
}
