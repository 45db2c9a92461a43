package kafkaio

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/translate"
)

// A registry read takes each value's fields by name from its writer's
// schema into the read's row: an older writer without a field gives null,
// one with the fields in another order or an extra one gives the same
// row; each writer's schema is fetched once. A writer whose schema cannot
// fill the row, a value not in the wire format and a datum that does not
// decode are errors about the record; a schema the registry does not have
// is a RegistryError.
func TestRegistryRead(t *testing.T) {
	reg := testkit.NewSchemaRegistry(t)
	const (
		v1     = `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"},{"name":"count","type":"long"}]}`
		v2     = `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"},{"name":"count","type":"long"},{"name":"note","type":["null","string"],"default":null}]}`
		moved  = `{"type":"record","name":"Order","fields":[{"name":"extra","type":"int"},{"name":"note","type":["null","string"]},{"name":"count","type":"long"},{"name":"name","type":"string"}]}`
		retype = `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"},{"name":"count","type":"string"}]}`
		lost   = `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"}]}`
		nulled = `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"},{"name":"count","type":["null","long"]}]}`
	)
	ids := map[string]int{}
	for _, s := range []string{v1, v2} {
		ids[s] = reg.Register("orders-value", s)
	}
	for _, s := range []string{moved, retype, lost, nulled} {
		ids[s] = reg.Register("other", s)
	}
	rs, err := translate.AvroRowSchema(v2)
	if err != nil {
		t.Fatal(err)
	}
	dec := sdkRowDecoder(t, rs)
	enc, err := NewRegistryPayloadEncoder(rowCoders(t, rs), "row", v2, reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	value := func(s string, v map[string]any) []byte {
		b, err := avro.Marshal(avro.MustParse(s), v)
		if err != nil {
			t.Fatal(err)
		}
		return testkit.WireFormat(ids[s], b)
	}
	for _, c := range []struct {
		name  string
		value []byte
		want  map[string]any
	}{
		{"older writer", value(v1, map[string]any{"name": "a", "count": int64(1)}), map[string]any{"name": "a", "count": int64(1), "note": nil}},
		{"older writer again", value(v1, map[string]any{"name": "b", "count": int64(-2)}), map[string]any{"name": "b", "count": int64(-2), "note": nil}},
		{"the read's own", value(v2, map[string]any{"name": "c", "count": int64(3), "note": map[string]any{"string": "n"}}), map[string]any{"name": "c", "count": int64(3), "note": "n"}},
		{"fields moved, one more", value(moved, map[string]any{"extra": 9, "note": "m", "count": int64(4), "name": "d"}), map[string]any{"name": "d", "count": int64(4), "note": "m"}},
		{"nullable in the writer", value(nulled, map[string]any{"name": "e", "count": int64(5)}), map[string]any{"name": "e", "count": int64(5), "note": nil}},
	} {
		b, err := enc(nil, &kgo.Record{Value: c.value})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		v, err := dec(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: the SDK cannot decode the row: %v", c.name, err)
		}
		if got := plainValue(reflect.ValueOf(v)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	if n := reg.Gets(ids[v1]); n != 1 {
		t.Errorf("schema %d fetched %d times, want once", ids[v1], n)
	}
	for _, c := range []struct {
		name  string
		value []byte
		want  []string
	}{
		{"retyped", value(retype, map[string]any{"name": "x", "count": "1"}), []string{"schema id", `"count"`, "STRING", "INT64"}},
		{"field lost", value(lost, map[string]any{"name": "x"}), []string{"schema id", `"count"`, "not in the writer's schema"}},
		{"null where required", value(nulled, map[string]any{"name": "x", "count": nil}), []string{`"count"`, "null in the writer's datum"}},
		{"no magic byte", []byte{1, 0, 0, 0, 1, 2}, []string{"wire format"}},
		{"short", []byte{0, 0, 0}, []string{"wire format"}},
		{"truncated datum", testkit.WireFormat(ids[v1], []byte{2}), []string{"not a datum", "id 1"}},
	} {
		_, err := enc(nil, &kgo.Record{Value: c.value})
		var re *RegistryError
		if err == nil || errors.As(err, &re) {
			t.Errorf("%s: %v, want an error about the record", c.name, err)
			continue
		}
		errorSays(t, c.name, err, c.want...)
	}
	_, err = enc(nil, &kgo.Record{Value: testkit.WireFormat(99, []byte{0})})
	var re *RegistryError
	if !errors.As(err, &re) || re.ID != 99 || !strings.Contains(err.Error(), reg.URL) {
		t.Errorf("an id the registry does not have: %v, want a RegistryError naming the id and the registry", err)
	}
}

// A registry behind HTTP basic authentication is read with the
// credentials in its URL (https://USER:PASSWORD@HOST); without them its
// 401 is a RegistryError.
func TestRegistryCredentialsInURL(t *testing.T) {
	reg := testkit.NewSchemaRegistry(t)
	const sch = `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`
	id := reg.Register("r-value", sch)
	reg.RequireBasicAuth("u", "p@ss")
	rs, err := translate.AvroRowSchema(sch)
	if err != nil {
		t.Fatal(err)
	}
	datum, err := avro.Marshal(avro.MustParse(sch), map[string]any{"a": int64(5)})
	if err != nil {
		t.Fatal(err)
	}
	withAuth := strings.Replace(reg.URL, "http://", "http://u:p%40ss@", 1)
	for _, c := range []struct {
		url string
		ok  bool
	}{{withAuth, true}, {reg.URL, false}} {
		enc, err := NewRegistryPayloadEncoder(rowCoders(t, rs), "row", sch, c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = enc(nil, &kgo.Record{Value: testkit.WireFormat(id, datum)})
		var re *RegistryError
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.url, err)
		case !c.ok && !errors.As(err, &re):
			t.Errorf("%s: %v, want a RegistryError", c.url, err)
		}
	}
	// Messages never show the password.
	enc, err := NewRegistryPayloadEncoder(rowCoders(t, rs), "row", sch, withAuth)
	if err != nil {
		t.Fatal(err)
	}
	_, err = enc(nil, &kgo.Record{Value: testkit.WireFormat(99, datum)})
	if err == nil || strings.Contains(err.Error(), "p@ss") || strings.Contains(err.Error(), "p%40ss") || !strings.Contains(err.Error(), "u:xxxxx@") {
		t.Errorf("an error through a URL with credentials: %v, want it with the password redacted", err)
	}
}
