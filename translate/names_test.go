package translate

import (
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// unsanitize inverts sanitizeTopicName for names that were not truncated,
// which proves the mapping injective on them.
func unsanitize(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '_' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '_' {
			b.WriteByte('_')
			i++
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

func FuzzSanitizeTopicName(f *testing.F) {
	for _, s := range []string{"", "a", "a.b", "a_b", "a__b", "_2e", "a/b", "stats.Count/CombinePerKey", "ü", strings.Repeat("x/", 100), "-", ".", ".."} {
		f.Add(s, s+"_")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		sa, sb := sanitizeTopicName(a), sanitizeTopicName(b)
		for _, s := range []string{sa, sb} {
			if !validTopicName(s+"-repartition") || len(s) > maxTopicBase {
				t.Fatalf("sanitizeTopicName gave invalid %q", s)
			}
			if strings.Contains(s, ".") {
				t.Fatalf("sanitizeTopicName gave %q with a '.', which Kafka confuses with '_'", s)
			}
		}
		if a != b && sa == sb {
			t.Fatalf("sanitizeTopicName(%q) == sanitizeTopicName(%q) == %q", a, b, sa)
		}
		if len(sa) < maxTopicBase {
			if back, ok := unsanitize(sa); !ok || back != a {
				t.Fatalf("unsanitize(%q) = %q, %v; want %q", sa, back, ok, a)
			}
		}
	})
}

func TestTopicNamesDistinctForLookalikeNames(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, pairWithOne, beam.Create(s, "a"))
	for _, scope := range []string{"a.b", "a_b", "a-b", "a/b"} {
		beam.ParDo(s, joinFn2, beam.GroupByKey(s.Scope(scope), kvs))
	}
	plan := mustTranslate(t, marshal(t, p), Options{})
	if len(plan.Topics) != 5 {
		t.Fatalf("topics %v, want impulse + 4 repartitions", topicNames(plan))
	}
}
