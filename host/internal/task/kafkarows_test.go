package task

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	beam.RegisterType(reflect.TypeOf((*recordRow)(nil)).Elem())
	register.Function2x0(recordRowPlaceholder)
	register.Function1x0(recordRowSink)
}

// recordRow is translate.KafkaRecordSchema as a Go type (pointers where
// the row is nullable), so the Go SDK gives a PCollection of it that row.
type recordRow struct {
	Topic     string  `beam:"topic"`
	Partition int32   `beam:"partition"`
	Offset    int64   `beam:"offset"`
	Timestamp int64   `beam:"timestamp"`
	Key       *[]byte `beam:"key"`
	Value     *[]byte `beam:"value"`
	Headers   *[]struct {
		Key   string  `beam:"key"`
		Value *[]byte `beam:"value"`
	} `beam:"headers"`
	TimestampTypeID   int32  `beam:"timestampTypeId"`
	TimestampTypeName string `beam:"timestampTypeName"`
}

func recordRowPlaceholder([]byte, func(recordRow)) {}
func recordRowSink(recordRow)                      {}

// Under the ProcessingTime policy a read with metadata's element is at the
// wall clock, and its row holds the record's own timestamp and timestamp
// type (CreateTime), as Java's KafkaRecord does whatever the policy; under
// CreateTime the element is at the record's timestamp.
func TestKafkaSourceWithMetadata(t *testing.T) {
	for _, policy := range []string{translate.TimestampProcessingTime, translate.TimestampCreateTime} {
		t.Run(policy, func(t *testing.T) {
			p, s := beam.NewPipelineWithRoot()
			beam.ParDo0(s, recordRowSink, beam.ParDo(s, recordRowPlaceholder, beam.Impulse(s)))
			pp := marshal(t, p)
			rb, err := translate.EncodeKafkaRead(&translate.KafkaRead{Topics: []string{"in"}, KeyFormat: translate.KafkaByteArray,
				ValueFormat: translate.KafkaByteArray, WithMetadata: true, TimestampPolicy: policy})
			if err != nil {
				t.Fatal(err)
			}
			if err := pipelinetest.AsSource(pp, "recordRowPlaceholder", translate.URNKafkaRead, rb); err != nil {
				t.Fatal(err)
			}
			te := newTestEnv(t, pp, 2)
			te.env.Topics.Discovered(map[string]int32{"in": 3})
			now := time.UnixMilli(1_000_000)
			te.env.Now = func() time.Time { return now }
			sub := te.sub(translate.RootKafkaSource)
			var got []shuffle.WindowedValue
			te.exec(sub).setFn(func(in shuffle.WindowedValue) [][]byte {
				got = append(got, shuffle.WindowedValue{Timestamp: in.Timestamp, Elem: bytes.Clone(in.Elem)})
				return nil
			})
			tk := te.task(sub, 2)
			te.cycle(tk, &kgo.Record{Topic: "in", Partition: 2, Offset: 9, Key: []byte("k"), Value: []byte("v"),
				Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}, Timestamp: time.UnixMilli(20_000)})
			if len(got) != 1 {
				t.Fatalf("%d elements, want 1", len(got))
			}
			wantTs := int64(20_000)
			if policy == translate.TimestampProcessingTime {
				wantTs = now.UnixMilli()
			}
			if got[0].Timestamp != wantTs {
				t.Errorf("element at %d, want %d", got[0].Timestamp, wantTs)
			}
			dec, err := coder.RowDecoderForStruct(reflect.TypeOf(recordRow{}))
			if err != nil {
				t.Fatal(err)
			}
			elem := got[0].Elem
			if l, n := binary.Uvarint(elem); n > 0 && int(l) == len(elem)-n {
				elem = elem[n:] // the wire coder's length prefix
			}
			v, err := dec(bytes.NewReader(elem))
			if err != nil {
				t.Fatal(err)
			}
			r := v.(recordRow)
			if r.Topic != "in" || r.Partition != 2 || r.Offset != 9 || r.Timestamp != 20_000 || string(*r.Key) != "k" || string(*r.Value) != "v" ||
				len(*r.Headers) != 1 || (*r.Headers)[0].Key != "h" || string(*(*r.Headers)[0].Value) != "x" ||
				r.TimestampTypeID != 0 || r.TimestampTypeName != "CreateTime" {
				t.Errorf("row %+v", r)
			}
		})
	}
}
