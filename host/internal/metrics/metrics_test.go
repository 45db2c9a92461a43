package metrics

import (
	"bytes"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

func info(urn, typ string, payload []byte) *pipepb.MonitoringInfo {
	return &pipepb.MonitoringInfo{Urn: urn, Type: typ, Payload: payload,
		Labels: map[string]string{"PTRANSFORM": "t", "NAMESPACE": "ns", "NAME": "m"}}
}

func stringSet(vs ...string) []byte {
	var b bytes.Buffer
	coder.EncodeInt32(int32(len(vs)), &b)
	for _, v := range vs {
		coder.EncodeStringUTF8(v, &b)
	}
	return b.Bytes()
}

func varints(vs ...int64) []byte {
	var b bytes.Buffer
	for _, v := range vs {
		coder.EncodeVarInt(v, &b)
	}
	return b.Bytes()
}

func only(t *testing.T, s *Store) []byte {
	t.Helper()
	res := s.Results()
	if len(res) != 1 {
		t.Fatalf("%d metrics, want 1: %v", len(res), res)
	}
	return res[0].GetPayload()
}

// Bundles of one step report a string set each (Python's
// Metrics.string_set, test_metrics of Beam's portable-runner suite): the
// job's set is their union, not the last bundle's.
func TestStringSetsUnite(t *testing.T) {
	s := newStore()
	const urn, typ = "beam:metric:user:set_string:v1", "beam:metrics:set_string:v1"
	s.Add([]*pipepb.MonitoringInfo{info(urn, typ, stringSet("zzz", "b"))})
	s.Add([]*pipepb.MonitoringInfo{info(urn, typ, stringSet("a", "b"))})
	got, err := decodeStringSet(only(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "zzz"}; !equal(got, want) {
		t.Fatalf("string set %q, want %q", got, want)
	}
	if _, err := decodeStringSet(append(stringSet("a"), 0)); err == nil {
		t.Error("a payload with bytes after its entries decoded")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A gauge keeps the value of the latest timestamp, whichever bundle's
// report arrives last.
func TestGaugeKeepsLatestTimestamp(t *testing.T) {
	s := newStore()
	const urn, typ = "beam:metric:user:latest_int64:v1", "beam:metrics:latest_int64:v1"
	s.Add([]*pipepb.MonitoringInfo{info(urn, typ, varints(2000, 7))})
	s.Add([]*pipepb.MonitoringInfo{info(urn, typ, varints(1000, 3))})
	if got := only(t, s); !bytes.Equal(got, varints(2000, 7)) {
		t.Fatalf("gauge payload %v, want timestamp 2000 value 7", got)
	}
}

// A distribution no element updated (a lone count of 0) adds nothing, and
// double distributions combine like int64 ones.
func TestDistributions(t *testing.T) {
	s := newStore()
	const urn, typ = "beam:metric:user:distribution_int64:v1", "beam:metrics:distribution_int64:v1"
	s.Add([]*pipepb.MonitoringInfo{info(urn, typ, varints(2, 4, 1, 3))})
	s.Add([]*pipepb.MonitoringInfo{info(urn, typ, varints(0))})
	if got := only(t, s); !bytes.Equal(got, varints(2, 4, 1, 3)) {
		t.Fatalf("distribution payload %v, want count 2 sum 4 min 1 max 3", got)
	}

	d := newStore()
	dist := func(n int64, sum, lo, hi float64) []byte {
		var b bytes.Buffer
		coder.EncodeVarInt(n, &b)
		for _, f := range []float64{sum, lo, hi} {
			coder.EncodeDouble(f, &b)
		}
		return b.Bytes()
	}
	const durn, dtyp = "beam:metric:user:distribution_double:v1", "beam:metrics:distribution_double:v1"
	d.Add([]*pipepb.MonitoringInfo{info(durn, dtyp, dist(1, 0.5, 0.5, 0.5))})
	d.Add([]*pipepb.MonitoringInfo{info(durn, dtyp, dist(2, 5, 1.5, 3.5))})
	if got := only(t, d); !bytes.Equal(got, dist(3, 5.5, 0.5, 3.5)) {
		t.Fatalf("double distribution payload %v, want count 3 sum 5.5 min 0.5 max 3.5", got)
	}
}
