package pythontest

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestKafkaManagedPython: a Python pipeline of managed.Read(KAFKA) of
// format RAW (bytes payloads) or STRING (str payloads) of a 3-partition
// topic → a Map to rows of one bytes field →
// managed.Write(KAFKA, RAW) to a 2-partition topic, expanded by ksrunner's
// expansion service, runs on ksrunner: the output topic (read_committed)
// holds, once each, "m:" + each input value upper-cased, with null keys,
// and nothing else (an empty value included).
func TestKafkaManagedPython(t *testing.T) {
	for _, format := range []string{"RAW", "STRING"} {
		t.Run(format, func(t *testing.T) { testKafkaManaged(t, format) })
	}
}

func testKafkaManaged(t *testing.T, format string) {
	ctx, env := newKafkaEnv(t)
	bootstrap := env.bootstrap
	in, out := kafkatest.UniqueName(t, "pymin"), kafkatest.UniqueName(t, "pymout")
	kafkatest.CreateTopic(t, bootstrap, in, 3)
	kafkatest.CreateTopic(t, bootstrap, out, 2)
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]bool{}
	for i := range 30 {
		v := []byte(fmt.Sprintf("v%02d-\xff", i)) // bytes, not UTF-8
		if format == "STRING" {
			v = []byte(fmt.Sprintf("v%02d-✓", i)) // UTF-8, no case
		}
		if i == 7 {
			v = []byte{}
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: int32(i % 3), Key: []byte("k"), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want["m:"+asciiUpper(v)] = true
	}

	job := env.startKafkaScript(ctx, t, "kafka_managed.py", in, out, kafkatest.UniqueName(t, "pymanaged"), []string{format})
	readDistinct(ctx, t, bootstrap, out, len(want), job)
	job.end(ctx, t, false, jobpb.JobState_CANCELLED)
	// Nothing more once cancelled: the whole topic is what was awaited.
	all := readDistinct(ctx, t, bootstrap, out, -1, job)
	for v, r := range all {
		if !want[v] {
			t.Errorf("unexpected value %q in %s", v, out)
		}
		if r.Key != nil {
			t.Errorf("value %q: key %q, want null", v, r.Key)
		}
	}
	for v := range want {
		if all[v] == nil {
			t.Errorf("value %q missing from %s", v, out)
		}
	}
}

// asciiUpper is Python's bytes.upper: ASCII letters only, other bytes
// (\xff) as they are.
func asciiUpper(b []byte) string {
	out := bytes.Clone(b)
	for i, c := range out {
		if 'a' <= c && c <= 'z' {
			out[i] = c - 'a' + 'A'
		}
	}
	return string(out)
}

// TestKafkaManagedPythonBounded: managed.Read(KAFKA, RAW) with
// max_read_time_seconds is a bounded read: the job ends DONE by itself,
// and the output (read_committed) holds each value of the 2-partition
// input, prefixed "b:", exactly once.
func TestKafkaManagedPythonBounded(t *testing.T) {
	ctx, env := newKafkaEnv(t)
	py, bootstrap, endpoint, expansion := env.py, env.bootstrap, env.endpoint, env.expansion
	in, out := kafkatest.UniqueName(t, "pymbin"), kafkatest.UniqueName(t, "pymbout")
	kafkatest.CreateTopic(t, bootstrap, in, 2)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]bool{}
	for i := range 20 {
		v := fmt.Sprintf("v%02d", i)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: int32(i % 2), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want["b:"+v] = true
	}
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "kafka_managed_bounded.py"), in, out, bootstrap, expansion, "8",
		"--runner=PortableRunner", "--job_endpoint="+endpoint, "--environment_type=LOOPBACK", "--streaming",
		"--application_id="+kafkatest.UniqueName(t, "pymbounded"), "--bootstrap_servers="+bootstrap)
	cmd.Env = append(os.Environ(), "PYTHONFAULTHANDLER=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kafka_managed_bounded.py: %v\n%s", err, b)
	}
	got := map[string]int{}
	kafkatest.ReadTopic(ctx, t, bootstrap, out, nil, func(r *kgo.Record) { got[string(r.Value)]++ })
	for v, n := range got {
		if !want[v] || n != 1 {
			t.Errorf("value %q written %d times (want once, if an input value)", v, n)
		}
	}
	for v := range want {
		if got[v] == 0 {
			t.Errorf("value %q missing from %s", v, out)
		}
	}
}

// TestKafkaManagedPythonJSON: a Python pipeline of managed.Read(KAFKA) of
// format JSON (a JSON schema with required and optional properties, an
// array, a nested object through a $ref) → a Map to another row →
// managed.Write(KAFKA, JSON) runs on ksrunner under
// deserialization_error_policy=skip: the output topic (read_committed)
// holds exactly the JSON objects of the input's good records, once each;
// the records that are not the schema's JSON (not JSON, a string count, a
// missing required property) are skipped, not written and not fatal.
func TestKafkaManagedPythonJSON(t *testing.T) {
	var cases []managedRowCase
	for _, c := range []struct{ in, out string }{
		{`{"name":"apple","count":3,"price":1.5,"tags":["red","fruit"],"address":{"city":"Oslo","zip":null}}`,
			`{"name":"APPLE","total":6,"price":1.5,"tags":["red","fruit"],"city":"Oslo"}`},
		{`{"count":-4,"name":"b\u00e9e \"q\""}`, // optional ones missing, keys out of order
			`{"name":"BÉE \"Q\"","total":-8,"price":null,"tags":null,"city":null}`},
		{`{"name":"c","count":9007199254740993,"price":2,"tags":[],"address":null,"extra":{"x":1}}`, // beyond a double's integers; unknown property ignored
			`{"name":"C","total":18014398509481986,"price":2.0,"tags":[],"city":null}`},
		{`{"name":"d","count":0,"address":{"city":"Rome"}}`,
			`{"name":"D","total":0,"price":null,"tags":null,"city":"Rome"}`},
		{`not json`, ""},
		{`{"name":"e","count":"1"}`, ""},
		{`{"name":"f"}`, ""},
		{`{"name":"g","count":1.5}`, ""},
		{`{"name":"h","count":1,"address":{"zip":"1"}}`, ""},
	} {
		cases = append(cases, managedRowCase{[]byte(c.in), c.out})
	}
	testKafkaManagedRows(t, "JSON", cases, func(t *testing.T, v []byte) string { return string(v) })
}

// TestKafkaManagedPythonAvro: the pipeline of TestKafkaManagedPythonJSON
// with format AVRO: datums hamba/avro encodes of an Avro schema with
// nullable fields, an array and a nested record are read, and the output
// topic holds exactly the datums of the good records, each decoding (with
// the Avro schema Java's AvroUtils derives from the output rows) to its
// Out; a truncated datum and one with a union branch out of range are
// skipped.
func TestKafkaManagedPythonAvro(t *testing.T) {
	order := avro.MustParse(`{"type":"record","name":"Order","fields":[
		{"name":"name","type":"string"},{"name":"count","type":"long"},
		{"name":"price","type":["null","double"]},
		{"name":"tags","type":["null",{"type":"array","items":"string"}]},
		{"name":"address","type":["null",{"type":"record","name":"Address","fields":[
			{"name":"city","type":"string"},{"name":"zip","type":["null","string"]}]}]}]}`)
	out := avro.MustParse(`{"type":"record","name":"topLevelRecord","fields":[
		{"name":"name","type":"string"},{"name":"total","type":"long"},
		{"name":"price","type":["null","double"]},
		{"name":"tags","type":["null",{"type":"array","items":"string"}]},
		{"name":"city","type":["null","string"]}]}`)
	datum := func(v map[string]any) []byte {
		b, err := avro.Marshal(order, v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	full := datum(map[string]any{"name": "apple", "count": int64(3), "price": map[string]any{"double": 1.5},
		"tags": map[string]any{"array": []string{"red", "fruit"}}, "address": map[string]any{"Address": map[string]any{"city": "Oslo", "zip": nil}}})
	cases := []managedRowCase{
		// hamba/avro decodes a union's array into a map of its name.
		{full, "map[city:Oslo name:APPLE price:1.5 tags:map[array:[red fruit]] total:6]"},
		{datum(map[string]any{"name": "bée", "count": int64(-4), "price": nil, "tags": nil, "address": nil}),
			"map[city:<nil> name:BÉE price:<nil> tags:<nil> total:-8]"},
		{datum(map[string]any{"name": "c", "count": int64(9007199254740993), "price": map[string]any{"double": 2.0},
			"tags": map[string]any{"array": []string{}}, "address": nil}),
			"map[city:<nil> name:C price:2 tags:map[array:[]] total:18014398509481986]"},
		{full[:len(full)-3], ""},
		{[]byte{2, 'x', 4, 8}, ""}, // price's union branch 4
	}
	testKafkaManagedRows(t, "AVRO", cases, func(t *testing.T, v []byte) string {
		var m map[string]any
		if err := avro.Unmarshal(out, v, &m); err != nil {
			t.Errorf("output %x is not a datum of %s: %v", v, out, err)
		}
		return fmt.Sprint(m)
	})
}

// TestKafkaManagedPythonAvroRegistry: managed.Read(KAFKA) of format AVRO
// through a schema registry (subject IN-value) → Map → managed.Write(KAFKA,
// JSON): values written with an older schema (no price) and with the
// latest both read into rows of the latest, by field name; a value of a
// schema id the job's rows cannot come from (a field lost) and one not in
// the wire format are skipped.
func TestKafkaManagedPythonAvroRegistry(t *testing.T) {
	reg := testkit.NewSchemaRegistry(t)
	const (
		older = `{"type":"record","name":"Order","fields":[{"name":"count","type":"long"},{"name":"name","type":"string"}]}`
		lost  = `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"}]}`
	)
	latest := `{"type":"record","name":"Order","fields":[
		{"name":"name","type":"string"},{"name":"count","type":"long"},
		{"name":"price","type":["null","double"],"default":null},
		{"name":"tags","type":["null",{"type":"array","items":"string"}],"default":null},
		{"name":"address","type":["null",{"type":"record","name":"Address","fields":[
			{"name":"city","type":"string"},{"name":"zip","type":["null","string"]}]}],"default":null}]}`
	var in string
	testKafkaManagedRowsIn(t, func(topic string) string {
		in = topic
		return "AVRO@" + reg.URL
	}, func() []managedRowCase {
		ids := map[string]int{}
		for _, s := range []string{lost, older, latest} {
			ids[s] = reg.Register(in+"-value", s)
		}
		value := func(s string, v map[string]any) []byte {
			b, err := avro.Marshal(avro.MustParse(s), v)
			if err != nil {
				t.Fatal(err)
			}
			return testkit.WireFormat(ids[s], b)
		}
		return []managedRowCase{
			{value(older, map[string]any{"count": int64(3), "name": "apple"}),
				`{"name":"APPLE","total":6,"price":null,"tags":null,"city":null}`},
			{value(latest, map[string]any{"name": "b", "count": int64(-4), "price": map[string]any{"double": 1.5}, "tags": nil,
				"address": map[string]any{"Address": map[string]any{"city": "Oslo", "zip": nil}}}),
				`{"name":"B","total":-8,"price":1.5,"tags":null,"city":"Oslo"}`},
			{value(lost, map[string]any{"name": "c"}), ""},
			{[]byte("not avro"), ""},
		}
	}, func(t *testing.T, v []byte) string { return string(v) })
}

// TestKafkaManagedPythonErrorHandling: managed.Read(KAFKA) of format JSON
// with error_handling {output: errors} → the rows to JSON as in
// TestKafkaManagedPythonJSON, and the errors output → a Map to
// "error_message: failed_row" → managed.Write(KAFKA, RAW) to a topic of
// its own. Under deserialization_error_policy=fail (the default), the job
// runs on: the good records' outputs are written once each, and each bad
// record's value is in the errors topic once, with a message naming what
// is wrong with it.
func TestKafkaManagedPythonErrorHandling(t *testing.T) {
	ctx, env := newKafkaEnv(t)
	bootstrap := env.bootstrap
	in, out, errs := kafkatest.UniqueName(t, "pyein"), kafkatest.UniqueName(t, "pyeout"), kafkatest.UniqueName(t, "pyeerr")
	kafkatest.CreateTopic(t, bootstrap, in, 2)
	kafkatest.CreateTopic(t, bootstrap, out, 1)
	kafkatest.CreateTopic(t, bootstrap, errs, 1)
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	inputs := []struct{ in, out, err string }{
		{`{"name":"a","count":1}`, `{"name":"A","total":2,"price":null,"tags":null,"city":null}`, ""},
		{`not json`, "", `not JSON`},
		{`{"name":"b","count":"2"}`, "", `property "count": a JSON string "2", want an integer`},
		{`{"name":"c","count":3,"address":{"city":"Rome"}}`, `{"name":"C","total":6,"price":null,"tags":null,"city":"Rome"}`, ""},
		{`{"count":4}`, "", `property "name": missing or null`},
	}
	wantOut, wantErr := map[string]bool{}, map[string]string{}
	for i, c := range inputs {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: int32(i % 2), Value: []byte(c.in)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if c.out != "" {
			wantOut[c.out] = true
		} else {
			wantErr[c.in] = c.err
		}
	}
	job := env.startKafkaScript(ctx, t, "kafka_managed_rows.py", in, out, kafkatest.UniqueName(t, "pymerr"), []string{"JSON>" + errs})
	readDistinct(ctx, t, bootstrap, out, len(wantOut), job)
	readDistinct(ctx, t, bootstrap, errs, len(wantErr), job)
	job.end(ctx, t, false, jobpb.JobState_CANCELLED)
	gotOut := readDistinct(ctx, t, bootstrap, out, -1, job)
	if len(gotOut) != len(wantOut) {
		t.Errorf("%s holds %d values, want %d", out, len(gotOut), len(wantOut))
	}
	for v := range wantOut {
		if gotOut[v] == nil {
			t.Errorf("output %s missing from %s", v, out)
		}
	}
	gotErr := readDistinct(ctx, t, bootstrap, errs, -1, job)
	if len(gotErr) != len(wantErr) {
		t.Errorf("%s holds %d values, want %d: %q", errs, len(gotErr), len(wantErr), slices.Collect(maps.Keys(gotErr)))
	}
	for value, msg := range wantErr {
		found := false
		for e := range gotErr {
			found = found || (strings.HasSuffix(e, ": "+value) && strings.Contains(e, msg))
		}
		if !found {
			t.Errorf("%s has no error for %q saying %q; it has %q", errs, value, msg, slices.Collect(maps.Keys(gotErr)))
		}
	}
}

// TestKafkaManagedPythonProto: the pipeline of TestKafkaManagedPythonJSON
// with format PROTO: messages shop.Order of a FileDescriptorSet file read,
// their rows mapped, written as messages shop.Out of the same file; the
// output topic holds exactly the good messages' Outs (decoded with
// protobuf's own library), and a value that is not a message is skipped.
func TestKafkaManagedPythonProto(t *testing.T) {
	set, order := testkit.OrderProto(t)
	path := filepath.Join(t.TempDir(), "shop.pb")
	if err := os.WriteFile(path, set, 0o644); err != nil {
		t.Fatal(err)
	}
	outMD := order.ParentFile().Messages().ByName("Out")
	message := func(set func(m *dynamicpb.Message, f func(protoreflect.Name) protoreflect.FieldDescriptor)) []byte {
		m := dynamicpb.NewMessage(order)
		set(m, order.Fields().ByName)
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	str := protoreflect.ValueOfString
	cases := []managedRowCase{
		{message(func(m *dynamicpb.Message, f func(protoreflect.Name) protoreflect.FieldDescriptor) {
			m.Set(f("name"), str("apple"))
			m.Set(f("count"), protoreflect.ValueOfInt64(3))
			m.Set(f("price"), protoreflect.ValueOfFloat64(1.5))
			tags := m.Mutable(f("tags")).List()
			tags.Append(str("red"))
			tags.Append(str("fruit"))
			home := m.Mutable(f("home")).Message()
			home.Set(home.Descriptor().Fields().ByName("city"), str("Oslo"))
		}), "name:APPLE total:6 price:1.5 tags:[red fruit] city:Oslo"},
		{message(func(m *dynamicpb.Message, f func(protoreflect.Name) protoreflect.FieldDescriptor) {
			m.Set(f("name"), str("b"))
			m.Set(f("count"), protoreflect.ValueOfInt64(-4))
		}), "name:B total:-8 price:<nil> tags:[] city:<nil>"},
		{[]byte{0x0a, 0x05, 'x'}, ""}, // name's length beyond the value
	}
	testKafkaManagedRows(t, "PROTO@"+path, cases, func(t *testing.T, v []byte) string {
		m := dynamicpb.NewMessage(outMD)
		if err := proto.Unmarshal(v, m); err != nil {
			t.Errorf("output %x is not a shop.Out: %v", v, err)
		}
		f := outMD.Fields().ByName
		opt := func(name string) any {
			if !m.Has(f(protoreflect.Name(name))) {
				return nil
			}
			return m.Get(f(protoreflect.Name(name))).Interface()
		}
		var tags []string
		l := m.Get(f("tags")).List()
		for i := range l.Len() {
			tags = append(tags, l.Get(i).String())
		}
		return fmt.Sprintf("name:%s total:%d price:%v tags:%v city:%v", m.Get(f("name")).String(), m.Get(f("total")).Int(), opt("price"), tags, opt("city"))
	})
}

// managedRowCase is an input value of kafka_managed_rows.py and its
// output, as the test shows it; "": a bad record, skipped.
type managedRowCase struct {
	in   []byte
	want string
}

// testKafkaManagedRows runs kafka_managed_rows.py in format on cases'
// inputs (over 2 partitions) under deserialization_error_policy=skip and
// checks that the output topic (read_committed) holds, as show shows its
// values, exactly the good cases' outputs, once each.
func testKafkaManagedRows(t *testing.T, format string, cases []managedRowCase, show func(*testing.T, []byte) string) {
	testKafkaManagedRowsIn(t, func(string) string { return format }, func() []managedRowCase { return cases }, show)
}

// testKafkaManagedRowsIn is testKafkaManagedRows with the format and the
// cases made for the input topic's name.
func testKafkaManagedRowsIn(t *testing.T, formatFor func(in string) string, casesFor func() []managedRowCase, show func(*testing.T, []byte) string) {
	ctx, env := newKafkaEnv(t)
	bootstrap := env.bootstrap
	in, out := kafkatest.UniqueName(t, "pyrin"), kafkatest.UniqueName(t, "pyrout")
	format := formatFor(in)
	cases := casesFor()
	kafkatest.CreateTopic(t, bootstrap, in, 2)
	kafkatest.CreateTopic(t, bootstrap, out, 2)
	cl := kafkatest.Client(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]bool{}
	for i, c := range cases {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: int32(i % 2), Value: c.in}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if c.want != "" {
			want[c.want] = true
		}
	}
	job := env.startKafkaScript(ctx, t, "kafka_managed_rows.py", in, out, kafkatest.UniqueName(t, "pymrows"), []string{format},
		"--deserialization_error_policy=skip")
	readDistinct(ctx, t, bootstrap, out, len(want), job)
	job.end(ctx, t, false, jobpb.JobState_CANCELLED)
	got := map[string]int{}
	for v := range readDistinct(ctx, t, bootstrap, out, -1, job) {
		got[show(t, []byte(v))]++
	}
	for v, n := range got {
		if !want[v] || n != 1 {
			t.Errorf("output %s written %d times (want once, if a good input's)", v, n)
		}
	}
	for v := range want {
		if got[v] == 0 {
			t.Errorf("output %s missing from %s", v, out)
		}
	}
}

// A registry read of a value whose schema id the registry does not have
// fails the job, naming the registry, the id and the record, and writes
// nothing: a schema it cannot get says nothing about the record, which
// must not be skipped even under deserialization_error_policy=skip.
func TestKafkaManagedPythonAvroRegistryMissingSchema(t *testing.T) {
	ctx, env := newKafkaEnv(t)
	reg := testkit.NewSchemaRegistry(t)
	in, out := kafkatest.UniqueName(t, "pyrin"), kafkatest.UniqueName(t, "pyrout")
	kafkatest.CreateTopic(t, env.bootstrap, in, 1)
	kafkatest.CreateTopic(t, env.bootstrap, out, 1)
	reg.Register(in+"-value", `{"type":"record","name":"Order","fields":[{"name":"name","type":"string"},{"name":"count","type":"long"}]}`)
	cl := kafkatest.Client(t, env.bootstrap)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Value: testkit.WireFormat(42, []byte{2, 'a', 2})}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	job := env.startKafkaScript(ctx, t, "kafka_managed_rows.py", in, out, kafkatest.UniqueName(t, "pymreg"), []string{"AVRO@" + reg.URL},
		"--deserialization_error_policy=skip")
	r, err := jobtest.Wait(ctx, job.jobs, job.id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != jobpb.JobState_FAILED {
		t.Fatalf("job ended %v (errors %q), want FAILED", r.State, r.Errors)
	}
	want := []string{"schema registry " + reg.URL, "schema id 42", "topic " + in + " partition 0 offset 0"}
	if !slices.ContainsFunc(r.Errors, func(e string) bool {
		return !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(e, w) })
	}) {
		t.Errorf("errors %q: none says all of %q", r.Errors, want)
	}
	if got := readDistinct(ctx, t, env.bootstrap, out, -1, job); len(got) != 0 {
		t.Errorf("%s holds %d records, want none", out, len(got))
	}
}

// TestKafkaManagedPythonWriteErrors: managed.Write(KAFKA, JSON) with
// error_handling, of rows made in the pipeline, two of them with a price
// JSON cannot hold (NaN, +Inf): the bounded job ends DONE, the output
// topic (read_committed) holds exactly the other two rows' JSON, and the
// errors, mapped to "error_message | name" and written RAW, name the two
// rows and why.
func TestKafkaManagedPythonWriteErrors(t *testing.T) {
	ctx, env := newKafkaEnv(t)
	out, errs := kafkatest.UniqueName(t, "pywout"), kafkatest.UniqueName(t, "pywerr")
	kafkatest.CreateTopic(t, env.bootstrap, out, 2)
	kafkatest.CreateTopic(t, env.bootstrap, errs, 1)
	cmd := exec.CommandContext(ctx, env.py, filepath.Join("testdata", "kafka_write_errors.py"), out, errs, env.bootstrap, env.expansion,
		"--runner=PortableRunner", "--job_endpoint="+env.endpoint, "--environment_type=LOOPBACK", "--streaming",
		"--application_id="+kafkatest.UniqueName(t, "pywerrors"), "--bootstrap_servers="+env.bootstrap)
	cmd.Env = append(os.Environ(), "PYTHONFAULTHANDLER=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kafka_write_errors.py: %v\n%s", err, b)
	}
	got := map[string]int{}
	kafkatest.ReadTopic(ctx, t, env.bootstrap, out, nil, func(r *kgo.Record) { got[string(r.Value)]++ })
	want := map[string]int{`{"name":"a","total":1,"price":1.5}`: 1, `{"name":"c","total":3,"price":null}`: 1}
	if !maps.Equal(got, want) {
		t.Errorf("%s holds %v, want %v", out, got, want)
	}
	var gotErrs []string
	kafkatest.ReadTopic(ctx, t, env.bootstrap, errs, nil, func(r *kgo.Record) { gotErrs = append(gotErrs, string(r.Value)) })
	slices.Sort(gotErrs)
	want2 := []string{`field "price": +Inf has no JSON number | d`, `field "price": NaN has no JSON number | b`}
	if !slices.Equal(gotErrs, want2) {
		t.Errorf("%s holds %q, want %q", errs, gotErrs, want2)
	}
}
