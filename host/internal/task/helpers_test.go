package task

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/executor"
	"github.com/ksrunner/ksrunner/host/internal/metrics"
	"github.com/ksrunner/ksrunner/host/internal/state"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/windowing"
)

// The tests of this file's helpers run tasks of real plans (a Go SDK
// pipeline through translate.Translate and topics.New) against a fake
// Env: an in-memory Pebble store, fake executors that record the bundles
// they get and emit what the test says, and a slice of produced records.

const testApp = "app"

// marshal is the pipeline proto of p as the Go SDK submits it, in a
// Docker environment (which nothing starts) that has the Go SDK's
// capabilities: translate tells the Go SDK by them (TestStream elements).
func marshal(t testing.TB, p *beam.Pipeline) *pipepb.Pipeline {
	t.Helper()
	edges, _, err := p.Build()
	if err == nil {
		var env *pipepb.Environment
		image := func(context.Context) string { return "apache/beam_go_sdk:test" }
		if env, err = graphx.CreateEnvironment(context.Background(), graphx.URNEnvDocker, image); err == nil {
			var pp *pipepb.Pipeline
			if pp, err = graphx.Marshal(edges, &graphx.Options{Environment: env}); err == nil {
				return pp
			}
		}
	}
	t.Fatalf("marshalling the pipeline: %v", err)
	return nil
}

// testEnv is an Env over a plan, with what its tasks did.
type testEnv struct {
	t     *testing.T
	plan  *translate.Plan
	env   *Env
	execs map[string]*fakeExec // by stage id

	mu        sync.Mutex
	out       []*kgo.Record    // produced, in order (but changelog records)
	changelog []*kgo.Record    // produced through ProduceWith, in order
	offsets   map[string]int64 // next offset by topic/partition
	side      map[string]int64 // side input watermarks by topic name
	fails     []error
	// failProduce, when set, fails every ProduceWith.
	failProduce error
}

// newTestEnv translates p and lays out its topics with partitions
// partitions per internal topic.
func newTestEnv(t *testing.T, p *pipepb.Pipeline, partitions int) *testEnv {
	t.Helper()
	plan, err := translate.Translate(p, translate.Options{})
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	te := &testEnv{t: t, plan: plan, execs: map[string]*fakeExec{}, offsets: map[string]int64{}, side: map[string]int64{}}
	coders := plan.Pipeline.GetComponents().GetCoders()
	codecs := map[string]*shuffle.ElementCodec{}
	for pcoll, wv := range plan.WireCoders {
		c, err := shuffle.NewElementCodec(coders, wv)
		if err != nil {
			t.Fatalf("pcollection %s: %v", pcoll, err)
		}
		codecs[pcoll] = c
	}
	timerCodecs := map[[2]string]*shuffle.TimerCodec{}
	execs := map[string]executor.Executor{}
	for _, st := range plan.SubTopologies {
		for _, s := range st.ExecutorStages() {
			fe := &fakeExec{te: te, stage: s}
			te.execs[s.ID] = fe
			execs[s.ID] = fe
			for _, f := range s.TimerFamilies {
				c, err := shuffle.NewTimerCodec(coders, f.CoderID)
				if err != nil {
					t.Fatal(err)
				}
				timerCodecs[[2]string{f.TransformID, f.FamilyID}] = c
			}
		}
	}
	te.env = &Env{
		Plan:          plan,
		Topics:        topics.New(plan, testApp, 1, partitions),
		Codecs:        codecs,
		TimerCodecs:   timerCodecs,
		Execs:         execs,
		DB:            db,
		Metrics:       metrics.NewJob(),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxBundleSize: 1000,
		Produce:       func(r *kgo.Record) { te.produce(r) },
		ProduceWith: func(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
			te.mu.Lock()
			te.setOffset(r)
			te.changelog = append(te.changelog, r)
			err := te.failProduce
			te.mu.Unlock()
			promise(r, err)
		},
		Fail: func(err error) {
			te.mu.Lock()
			defer te.mu.Unlock()
			te.fails = append(te.fails, err)
		},
		SideWatermark: func(topic string) int64 {
			te.mu.Lock()
			defer te.mu.Unlock()
			if wm, ok := te.side[topic]; ok {
				return wm
			}
			return minWatermark
		},
	}
	return te
}

// produce records r with the next offset of its partition.
func (te *testEnv) produce(r *kgo.Record) {
	te.mu.Lock()
	defer te.mu.Unlock()
	te.setOffset(r)
	te.out = append(te.out, r)
}

// setOffset gives r the next offset of its partition, under te.mu.
func (te *testEnv) setOffset(r *kgo.Record) {
	k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
	r.Offset = te.offsets[k]
	te.offsets[k]++
}

// take returns the records produced since the last take (but changelog
// records).
func (te *testEnv) take() []*kgo.Record {
	te.mu.Lock()
	defer te.mu.Unlock()
	out := te.out
	te.out = nil
	return out
}

// takeChangelog returns the changelog records produced since the last call.
func (te *testEnv) takeChangelog() []*kgo.Record {
	te.mu.Lock()
	defer te.mu.Unlock()
	out := te.changelog
	te.changelog = nil
	return out
}

// quietPebble sends Pebble's chatter to the test log only when it fails.
type quietPebble struct{ t *testing.T }

func (quietPebble) Infof(string, ...any) {}
func (q quietPebble) Errorf(format string, args ...any) {
	q.t.Errorf("pebble: "+format, args...)
}
func (q quietPebble) Fatalf(format string, args ...any) {
	q.t.Fatalf("pebble: "+format, args...)
}

func (te *testEnv) setSideWatermark(topic string, wm int64) {
	te.mu.Lock()
	defer te.mu.Unlock()
	te.side[topic] = wm
}

// sub returns the sub-topology whose root is of kind k (the first).
func (te *testEnv) sub(k translate.RootKind) *translate.SubTopology {
	te.t.Helper()
	for _, st := range te.plan.SubTopologies {
		if st.Root.Kind == k {
			return st
		}
	}
	te.t.Fatalf("no sub-topology with root kind %d", k)
	return nil
}

// subWithSideInput returns the sub-topology of the stage reading a side input.
func (te *testEnv) subWithSideInput() (*translate.SubTopology, *translate.Stage) {
	te.t.Helper()
	for _, st := range te.plan.SubTopologies {
		for _, s := range st.Stages {
			if len(s.SideInputs) > 0 {
				return st, s
			}
		}
	}
	te.t.Fatal("no stage with side inputs")
	return nil, nil
}

// task opens the task of sub for partition p.
func (te *testEnv) task(sub *translate.SubTopology, p int32) *Task {
	te.t.Helper()
	tk, err := New(te.env, sub, p)
	if err != nil {
		te.t.Fatalf("New: %v", err)
	}
	return tk
}

// exec returns the fake executor of the only stage of sub.
func (te *testEnv) exec(sub *translate.SubTopology) *fakeExec {
	te.t.Helper()
	if len(sub.Stages) != 1 {
		te.t.Fatalf("sub-topology %d has %d stages", sub.ID, len(sub.Stages))
	}
	return te.execs[sub.Stages[0].ID]
}

// cycle runs one commit cycle as the runtime does: handle the records,
// prepare, produce the changelog, commit, send the status, finalize.
func (te *testEnv) cycle(tk *Task, recs ...*kgo.Record) {
	te.t.Helper()
	ctx := context.Background()
	if len(recs) > 0 {
		if err := tk.Handle(ctx, recs); err != nil {
			te.t.Fatalf("Handle: %v", err)
		}
	}
	if err := tk.PrepareCommit(ctx); err != nil {
		te.t.Fatalf("PrepareCommit: %v", err)
	}
	if err := tk.ProduceChangelog(ctx); err != nil {
		te.t.Fatalf("ProduceChangelog: %v", err)
	}
	if err := tk.CommitState(); err != nil {
		te.t.Fatalf("CommitState: %v", err)
	}
	tk.SendStatus()
	tk.Finalize(ctx)
}

// input numbers the records of one partition of a task's input topic.
type input struct {
	topic     string
	partition int32
	next      int64
}

func (te *testEnv) input(sub *translate.SubTopology, p int32) *input {
	return &input{topic: te.env.Topics.Full(sub.Input), partition: p}
}

func (in *input) rec(v []byte) *kgo.Record {
	r := &kgo.Record{Topic: in.topic, Partition: in.partition, Offset: in.next, Value: v}
	in.next++
	return r
}

// data is a data record of each windowed value.
func (in *input) data(wvs ...[]byte) []*kgo.Record {
	var out []*kgo.Record
	for _, wv := range wvs {
		out = append(out, in.rec(append([]byte{shuffle.KindData}, wv...)))
	}
	return out
}

// wm is a watermark report of producer.
func (in *input) wm(producer string, ms int64) *kgo.Record {
	return in.rec(shuffle.EncodeWatermark(producer, ms))
}

// Encoded values, in the wire coders of the plans the tests build
// (strings, KVs of strings, global and interval windows).

func str(s string) []byte { return binary.AppendUvarint([]byte(nil), uint64(len(s))) }

func strEl(s string) []byte { return append(str(s), s...) }

func kv(k, v string) []byte { return append(strEl(k), strEl(v)...) }

// interval encodes the interval window [start, end).
func interval(start, end int64) []byte {
	b := binary.BigEndian.AppendUint64(nil, state.EventTimeBits(end))
	return binary.AppendUvarint(b, uint64(end-start))
}

var globalWindow = []byte{}

// wv encodes a windowed value with the no-firing pane.
func wv(ts int64, elem []byte, windows ...[]byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, state.EventTimeBits(ts))
	b = binary.BigEndian.AppendUint32(b, uint32(len(windows)))
	for _, w := range windows {
		b = append(b, w...)
	}
	b = append(b, noFiringPane...)
	return append(b, elem...)
}

// rewrap is the windowed value in's timestamp, windows and pane around elem.
func rewrap(in shuffle.WindowedValue, elem []byte) []byte {
	b := append([]byte(nil), in.Raw[:len(in.Raw)-len(in.Elem)]...)
	return append(b, elem...)
}

// fakeExec is a stage executor that records its bundles and emits, for
// each input element, what fn returns (windowed values of the stage's
// first output).
type fakeExec struct {
	te    *testEnv
	stage *translate.Stage

	mu       sync.Mutex
	fn       func(in shuffle.WindowedValue) [][]byte
	bundles  [][]string // the rendered input elements (and timers) of each bundle
	started  int
	finished int
	// fail, when set, fails Process.
	fail error
	// finish, when set, is the result of every bundle's Finish.
	finish func() (executor.Result, error)
	// each, when set, is called with each input element.
	each func(b *fakeBundle, in shuffle.WindowedValue) error
	// timers, when set, is called with each timer delivered.
	timers func(b *fakeBundle, transformID, familyID string, data []byte) error
}

func (f *fakeExec) StartBundle(_ context.Context, emit func(string, []byte) error, io executor.BundleIO) (executor.Bundle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started++
	f.bundles = append(f.bundles, nil)
	return &fakeBundle{f: f, idx: len(f.bundles) - 1, emit: emit, io: io}, nil
}

// takeBundles returns the bundles since the last call (open ones too).
func (f *fakeExec) takeBundles() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bundles
	f.bundles = nil
	return b
}

// inputs is every input element of the bundles since the last call.
func (f *fakeExec) inputs() []string {
	var out []string
	for _, b := range f.takeBundles() {
		out = append(out, b...)
	}
	return out
}

func (f *fakeExec) setFn(fn func(in shuffle.WindowedValue) [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
}

type fakeBundle struct {
	f    *fakeExec
	idx  int
	emit func(string, []byte) error
	io   executor.BundleIO
}

func (b *fakeBundle) record(s string) {
	f := b.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.idx < len(f.bundles) {
		f.bundles[b.idx] = append(f.bundles[b.idx], s)
	}
}

func (b *fakeBundle) Process(data []byte) error {
	f := b.f
	if f.fail != nil {
		return f.fail
	}
	codec := f.te.env.Codecs[f.stage.Input]
	var outData []byte
	for len(data) > 0 {
		in, err := codec.Next(data)
		if err != nil {
			return err
		}
		data = data[len(in.Raw):]
		b.record(f.te.render(f.stage.Input, in.Raw))
		if f.each != nil {
			if err := f.each(b, in); err != nil {
				return err
			}
		}
		f.mu.Lock()
		fn := f.fn
		f.mu.Unlock()
		if fn != nil {
			for _, o := range fn(in) {
				outData = append(outData, o...)
			}
		}
	}
	return b.emitSplit(outData)
}

// emitSplit emits data in two chunks cut inside an element, as the data
// channel may.
func (b *fakeBundle) emitSplit(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	out := b.f.stage.Outputs[0]
	cut := len(data) / 2
	if err := b.emit(out, data[:cut]); err != nil {
		return err
	}
	return b.emit(out, data[cut:])
}

func (b *fakeBundle) ProcessTimers(transformID, familyID string, data []byte) error {
	te := b.f.te
	for rest := data; len(rest) > 0; {
		tm, err := te.env.TimerCodecs[[2]string{transformID, familyID}].Next(rest)
		if err != nil {
			return err
		}
		b.record(fmt.Sprintf("timer %s %q fire %s hold %s", familyID, tm.Key, timeString(tm.Fire), timeString(tm.Hold)))
		rest = rest[len(tm.Raw):]
	}
	if b.f.timers != nil {
		return b.f.timers(b, transformID, familyID, data)
	}
	return nil
}

func (b *fakeBundle) Finish() (executor.Result, error) {
	b.f.mu.Lock()
	b.f.finished++
	b.f.mu.Unlock()
	if b.f.finish != nil {
		return b.f.finish()
	}
	return executor.Result{}, nil
}

// render shows an encoded windowed value of pcoll as
// "element @timestamp windows pane".
func (te *testEnv) render(pcoll string, raw []byte) string {
	te.t.Helper()
	coders := te.plan.Pipeline.GetComponents().GetCoders()
	codec := te.env.Codecs[pcoll]
	if codec == nil {
		te.t.Fatalf("pcollection %s has no codec", pcoll)
	}
	v, err := codec.Next(raw)
	if err != nil {
		te.t.Fatalf("pcollection %s: %v", pcoll, err)
	}
	wvc := coders[te.plan.WireCoders[pcoll]]
	elem, rest, err := renderValue(coders, wvc.GetComponentCoderIds()[0], v.Elem)
	if err != nil || len(rest) > 0 {
		te.t.Fatalf("pcollection %s: element %x: %v (%d bytes left)", pcoll, v.Elem, err, len(rest))
	}
	var wins []string
	for b := v.Windows; len(b) > 0; {
		var w string
		if w, b, err = renderValue(coders, wvc.GetComponentCoderIds()[1], b); err != nil {
			te.t.Fatal(err)
		}
		wins = append(wins, w)
	}
	if v.NWindows == 1 && len(v.Windows) == 0 {
		wins = []string{"GW"}
	}
	pane, err := windowing.DecodePane(v.Pane)
	if err != nil {
		te.t.Fatal(err)
	}
	return fmt.Sprintf("%s @%s %s %s", elem, timeString(v.Timestamp), strings.Join(wins, ","), renderPane(pane))
}

func renderPane(p windowing.PaneInfo) string {
	if p == noFiring {
		return "nofiring"
	}
	s := fmt.Sprintf("%v#%d", p.Timing, p.Index)
	if p.IsFirst {
		s += " first"
	}
	if p.IsLast {
		s += " last"
	}
	return s
}

var noFiring, _ = windowing.DecodePane(noFiringPane)

// renderValue renders the value of coder id at the start of b and returns
// the bytes after it.
func renderValue(coders map[string]*pipepb.Coder, id string, b []byte) (string, []byte, error) {
	c := coders[id]
	comps := c.GetComponentCoderIds()
	switch urn := c.GetSpec().GetUrn(); urn {
	case "beam:coder:string_utf8:v1", "beam:coder:bytes:v1":
		n, l := binary.Uvarint(b)
		if l <= 0 || uint64(len(b)-l) < n {
			return "", nil, fmt.Errorf("%s: truncated", urn)
		}
		return fmt.Sprintf("%q", b[l:l+int(n)]), b[l+int(n):], nil
	case "beam:coder:length_prefix:v1":
		n, l := binary.Uvarint(b)
		if l <= 0 || uint64(len(b)-l) < n {
			return "", nil, fmt.Errorf("%s: truncated", urn)
		}
		s, rest, err := renderValue(coders, comps[0], b[l:l+int(n)])
		if err != nil || len(rest) > 0 {
			s = fmt.Sprintf("%x", b[l:l+int(n)])
		}
		return s, b[l+int(n):], nil
	case "beam:coder:kv:v1":
		k, rest, err := renderValue(coders, comps[0], b)
		if err != nil {
			return "", nil, err
		}
		v, rest, err := renderValue(coders, comps[1], rest)
		return k + ":" + v, rest, err
	case "beam:coder:iterable:v1":
		if len(b) < 4 {
			return "", nil, fmt.Errorf("iterable: truncated")
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		var vs []string
		each := func(n int) error {
			for range n {
				var v string
				var err error
				if v, b, err = renderValue(coders, comps[0], b); err != nil {
					return err
				}
				vs = append(vs, v)
			}
			return nil
		}
		if n >= 0 {
			if err := each(int(n)); err != nil {
				return "", nil, err
			}
			return "[" + strings.Join(vs, " ") + "]", b, nil
		}
		// Blocks, ended by 0 or by a state token (a paged group).
		for {
			cnt, l := binary.Uvarint(b)
			if l <= 0 {
				return "", nil, fmt.Errorf("iterable: truncated block count")
			}
			b = b[l:]
			switch {
			case cnt == 0:
				return "[" + strings.Join(vs, " ") + "]", b, nil
			case cnt == math.MaxUint64:
				tl, l := binary.Uvarint(b)
				if l <= 0 || uint64(len(b)-l) < tl {
					return "", nil, fmt.Errorf("iterable: truncated state token")
				}
				return "[" + strings.Join(append(vs, fmt.Sprintf("state(%x)", b[l:l+int(tl)])), " ") + "]", b[l+int(tl):], nil
			}
			if err := each(int(cnt)); err != nil {
				return "", nil, err
			}
		}
	case "beam:coder:interval_window:v1":
		if len(b) < 9 {
			return "", nil, fmt.Errorf("interval window: truncated")
		}
		end := int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
		d, l := binary.Uvarint(b[8:])
		if l <= 0 {
			return "", nil, fmt.Errorf("interval window: truncated")
		}
		return fmt.Sprintf("[%d,%d)", end-int64(d), end), b[8+l:], nil
	case "beam:coder:nullable:v1":
		if len(b) < 1 {
			return "", nil, fmt.Errorf("%s: truncated", urn)
		}
		if b[0] == 0 {
			return "null", b[1:], nil
		}
		return renderValue(coders, comps[0], b[1:])
	case "beam:coder:global_window:v1":
		return "GW", b, nil
	case "beam:coder:varint:v1":
		v, l := binary.Uvarint(b)
		if l <= 0 {
			return "", nil, fmt.Errorf("%s: truncated", urn)
		}
		return fmt.Sprint(int64(v)), b[l:], nil
	default:
		return "", nil, fmt.Errorf("coder %s: %s not rendered", id, urn)
	}
}

// describe shows produced records, one line each: data as rendered
// elements (with their key; the partition of unkeyed ones, round-robin,
// shows as *), watermark and processing-time reports and status records.
func (te *testEnv) describe(recs []*kgo.Record) []string {
	te.t.Helper()
	var out []string
	for _, r := range recs {
		topic := strings.TrimPrefix(r.Topic, shuffle.TopicName(testApp, ""))
		where := fmt.Sprintf("%s/%d", topic, r.Partition)
		switch {
		case topic == shuffle.StatusTopic:
			s, err := DecodeStatus(r.Value)
			if err != nil {
				te.t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("status %s %s", r.Key, timeString(s.Watermark)))
		case len(r.Value) == 0:
			te.t.Fatalf("%s: empty record", where)
		case r.Value[0] == shuffle.KindWatermark:
			p, wm, err := shuffle.DecodeWatermark(r.Value)
			if err != nil {
				te.t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s wm %s %s", where, p, timeString(wm)))
		case r.Value[0] == shuffle.KindProcessingTime:
			p, _, err := shuffle.DecodeProcessingTime(r.Value)
			if err != nil {
				te.t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s pt %s", where, p))
		case r.Value[0] == shuffle.KindData:
			pc := te.env.Topics.ByName[topic].PCollection
			if r.Key != nil {
				where += fmt.Sprintf(" key %q", r.Key)
			} else {
				where = topic + "/*" // round-robin
			}
			out = append(out, fmt.Sprintf("%s %s", where, te.render(pc, r.Value[1:])))
		default:
			te.t.Fatalf("%s: record kind %d", where, r.Value[0])
		}
	}
	return out
}

// storeContents is every key and value under prefix in the store.
func storeContents(t *testing.T, db *pebble.DB, prefix []byte) map[string]string {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: state.PrefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	return out
}

// checkLines fails unless got equals want, showing both.
func checkLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\ngot:\n\t%s\nwant:\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// sinkTopics are the topics sub writes, in the order of its sinks.
func (te *testEnv) sinkTopics(sub *translate.SubTopology) []string {
	var out []string
	for _, s := range sub.Sinks {
		if !slices.Contains(out, s.Topic) {
			out = append(out, s.Topic)
		}
	}
	return out
}

// reports are the lines (as describe shows them) of tk's watermark report
// wm to every partition of every topic sub writes, then its status.
func (te *testEnv) reports(tk *Task, wm string) []string {
	return append(te.broadcast(tk, "wm "+tk.ID()+" "+wm), "status "+tk.ID()+" "+wm)
}

// broadcast are the lines of what (as describe shows it) written by tk to
// every partition of every topic it writes.
func (te *testEnv) broadcast(tk *Task, what string) []string {
	var out []string
	for _, topic := range te.sinkTopics(tk.sub) {
		for p := range te.env.Topics.Partitions[topic] {
			out = append(out, fmt.Sprintf("%s/%d %s", topic, p, what))
		}
	}
	return out
}

// sunk are the lines of each unkeyed element produced by sub, written to
// every topic it writes.
func (te *testEnv) sunk(sub *translate.SubTopology, elems ...string) []string {
	var out []string
	for _, e := range elems {
		for _, topic := range te.sinkTopics(sub) {
			out = append(out, topic+"/* "+e)
		}
	}
	return out
}

// lines concatenates line lists.
func lines(parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch x := p.(type) {
		case string:
			out = append(out, x)
		case []string:
			out = append(out, x...)
		default:
			panic(fmt.Sprintf("lines: %T", p))
		}
	}
	return out
}

// find returns the sub-topology pred accepts (the first).
func (te *testEnv) find(what string, pred func(*translate.SubTopology) bool) *translate.SubTopology {
	te.t.Helper()
	for _, st := range te.plan.SubTopologies {
		if pred(st) {
			return st
		}
	}
	te.t.Fatalf("no sub-topology %s", what)
	return nil
}

// writes reports whether st writes a topic of kind k.
func (te *testEnv) writes(st *translate.SubTopology, k translate.TopicKind) bool {
	for _, s := range st.Sinks {
		if te.env.Topics.ByName[s.Topic].Kind == k {
			return true
		}
	}
	return false
}

// counter is the sum of counter name of transform in ms (the host's
// counters and the tests' are all int64 sums).
func counter(t *testing.T, ms *metrics.Store, transform, name string) int64 {
	t.Helper()
	var n int64
	for _, m := range ms.Results() {
		if m.GetLabels()["NAME"] == name && m.GetLabels()["PTRANSFORM"] == transform {
			v, err := coder.DecodeVarInt(bytes.NewReader(m.GetPayload()))
			if err != nil {
				t.Fatal(err)
			}
			n += v
		}
	}
	return n
}

// producer is the producer id of partition p of the sub-topology writing
// sub's input (the first).
func (te *testEnv) producer(sub *translate.SubTopology, p int32) string {
	te.t.Helper()
	return shuffle.ProducerID(te.find("writing "+sub.Input, func(st *translate.SubTopology) bool {
		return slices.ContainsFunc(st.Sinks, func(s translate.Sink) bool { return s.Topic == sub.Input })
	}).ID, p)
}

// timeString renders a timestamp in milliseconds, the ends of time as -inf
// and +inf.
func timeString(ms int64) string {
	switch {
	case ms <= minWatermark:
		return "-inf"
	case ms >= maxWatermark:
		return "+inf"
	}
	return fmt.Sprint(mtime.Time(ms))
}

// countKeys counts the keys of kind in the store of sub-topology sub's
// task of partition 0.
func countKeys(t *testing.T, db *pebble.DB, sub int, kind state.Kind) int {
	t.Helper()
	lower := state.Key(state.TaskPrefix(sub, 0), kind)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: state.PrefixEnd(lower)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}
