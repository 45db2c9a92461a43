package kafkaio

import (
	"bytes"
	"encoding/base64"
	"math"
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx/schema"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// sdkRow is the encoding of v (a struct) by the Go SDK's row coder, and
// the coders of its schema.
func sdkRow(t *testing.T, v any) ([]byte, map[string]*pipepb.Coder) {
	t.Helper()
	s, err := schema.FromType(reflect.TypeOf(v))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := coder.RowEncoderForStruct(reflect.TypeOf(v))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := enc(v, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), rowCoders(t, s)
}

// A write's error about a row's value names it by its path through the
// row's nested rows, lists and maps.
func TestWriteErrorPaths(t *testing.T) {
	t.Run("JSON", func(t *testing.T) {
		type inner struct{ Scores []float64 }
		type row struct {
			Name  string
			Homes []inner
		}
		b, coders := sdkRow(t, row{Name: "a", Homes: []inner{{Scores: []float64{1}}, {Scores: []float64{2, math.NaN()}}}})
		dec, err := NewJSONPayloadDecoder(coders, "row")
		if err != nil {
			t.Fatal(err)
		}
		if _, err = dec(b); err == nil {
			t.Fatal("a NaN written as JSON")
		}
		errorSays(t, "JSON", err, `field "Homes[1].Scores[1]"`, "NaN has no JSON number")
	})
	t.Run("PROTO", func(t *testing.T) {
		type inner struct {
			X string  `beam:"x"`
			U []int64 `beam:"u"`
		}
		type row struct {
			S string          `beam:"s"`
			M map[int64]inner `beam:"m"`
		}
		rowSchema := base64.StdEncoding.EncodeToString(compileTestProto(t, fuzzProtoSources["fz3.P3"]))
		for _, c := range []struct {
			row  row
			want []string
		}{
			{row{S: "\xff"}, []string{`field "s"`, "invalid UTF-8"}},
			{row{S: "ok", M: map[int64]inner{-2: {X: "\xfe"}}}, []string{`field "m[-2].x"`, "invalid UTF-8"}},
		} {
			b, coders := sdkRow(t, c.row)
			dec, err := NewProtoPayloadDecoder(coders, "row", rowSchema, "fz3.P3")
			if err != nil {
				t.Fatal(err)
			}
			if _, err = dec(b); err == nil {
				t.Fatalf("%+v written", c.row)
			}
			errorSays(t, "PROTO", err, c.want...)
		}
	})
}
