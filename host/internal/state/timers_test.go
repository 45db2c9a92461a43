package state

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/pebble/v2"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// The timer families of the tests: one per time domain, of one transform.
var (
	evFam   = translate.TimerFamily{TransformID: "t1", FamilyID: "ev", EventTime: true}
	procFam = translate.TimerFamily{TransformID: "t1", FamilyID: "proc"}
)

// tmr is a timer as a DoFn sets it; nil wins is the global window.
type tmr struct {
	key, tag   string
	wins       []typex.Window
	clear      bool
	fire, hold int64
	pane       typex.PaneInfo
}

// at is the timer key/tag firing at fire, holding the output at fire.
func at(keyTag string, fire int64) tmr {
	key, tag, _ := strings.Cut(keyTag, "/")
	return tmr{key: key, tag: tag, fire: fire, hold: fire}
}

// cleared is the clearing of the timer key/tag.
func cleared(keyTag string) tmr {
	tm := at(keyTag, 0)
	tm.clear = true
	return tm
}

// timerCoding encodes and decodes timers of string keys with the SDK's timer
// coder and parses them with the host's codec of the same coder, built from
// its pipeline proto as translate gives it.
type timerCoding struct {
	host *shuffle.TimerCodec
	sdk  *coder.Coder
}

func newTimerCoding(t testing.TB, interval bool) timerCoding {
	t.Helper()
	spec := func(urn string, comps ...string) *pipepb.Coder {
		return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: comps}
	}
	coders := map[string]*pipepb.Coder{
		"key": spec("beam:coder:string_utf8:v1"),
		"gw":  spec("beam:coder:global_window:v1"),
		"iw":  spec("beam:coder:interval_window:v1"),
		"tgw": spec("beam:coder:timer:v1", "key", "gw"),
		"tiw": spec("beam:coder:timer:v1", "key", "iw"),
	}
	id, wc := "tgw", coder.NewGlobalWindow()
	if interval {
		id, wc = "tiw", coder.NewIntervalWindow()
	}
	host, err := shuffle.NewTimerCodec(coders, id)
	if err != nil {
		t.Fatal(err)
	}
	return timerCoding{host: host, sdk: coder.NewT(coder.NewString(), wc)}
}

func (c timerCoding) encode(t testing.TB, ts ...tmr) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := exec.MakeElementEncoder(c.sdk)
	for _, tm := range ts {
		wins := tm.wins
		if wins == nil {
			wins = window.SingleGlobalWindow
		}
		rec := exec.TimerRecv{
			Key: &exec.FullValue{Elm: tm.key}, Windows: wins, Pane: tm.pane,
			TimerMap: timers.TimerMap{Tag: tm.tag, Clear: tm.clear, FireTimestamp: mtime.Time(tm.fire), HoldTimestamp: mtime.Time(tm.hold)},
		}
		if err := enc.Encode(&exec.FullValue{Elm: rec}, &b); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func (c timerCoding) decode(t testing.TB, b []byte) exec.TimerRecv {
	t.Helper()
	r := bytes.NewReader(b)
	fv, err := exec.MakeElementDecoder(c.sdk).Decode(r)
	if err != nil {
		t.Fatalf("decoding timer %x: %v", b, err)
	}
	if r.Len() != 0 {
		t.Fatalf("timer %x: %d bytes after it", b, r.Len())
	}
	return fv.Elm.(exec.TimerRecv)
}

// timerHarness is one task's user store with a timer coding.
type timerHarness struct {
	db *pebble.DB
	u  *User
	tc timerCoding
}

func newTimerHarness(t testing.TB, interval bool) *timerHarness {
	db := memDB(t)
	return &timerHarness{db: db, u: newUser(t, db, testPrefix), tc: newTimerCoding(t, interval)}
}

// set hands timers to SetTimers in one buffer, as one data chunk of the SDK.
func (th *timerHarness) set(t testing.TB, fam translate.TimerFamily, ts ...tmr) {
	t.Helper()
	var carry []byte
	if err := th.u.SetTimers(fam, th.tc.host, th.tc.encode(t, ts...), &carry); err != nil {
		t.Fatal(err)
	}
	if len(carry) != 0 {
		t.Fatalf("whole timers left a carry of %x", carry)
	}
}

// due calls DueTimers and describes the timers as "family key/tag@fire".
func (th *timerHarness) due(t testing.TB, wm, now int64) []string {
	t.Helper()
	ds, err := th.u.DueTimers(wm, now)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		if d.Family[0] != "t1" {
			t.Errorf("timer of transform %q", d.Family[0])
		}
		tm := th.tc.decode(t, d.Encoded)
		out = append(out, fmt.Sprintf("%s %s/%s@%d", d.Family[1], tm.Key.Elm, tm.Tag, int64(tm.FireTimestamp)))
	}
	return out
}

func (th *timerHarness) hold(t testing.TB) int64 {
	t.Helper()
	h, err := th.u.TimerHold()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// timerStep is one step of a timer scenario.
type timerStep func(t *testing.T, th *timerHarness)

func set(fam translate.TimerFamily, ts ...tmr) timerStep {
	return func(t *testing.T, th *timerHarness) { t.Helper(); th.set(t, fam, ts...) }
}

// due checks the timers DueTimers returns at (wm, now), in order.
func due(wm, now int64, want ...string) timerStep {
	return func(t *testing.T, th *timerHarness) {
		t.Helper()
		if got := th.due(t, wm, now); !slices.Equal(got, want) {
			t.Errorf("DueTimers(%d, %d) = %q, want %q", wm, now, got, want)
		}
	}
}

func holdIs(want int64) timerStep {
	return func(t *testing.T, th *timerHarness) {
		t.Helper()
		if got := th.hold(t); got != want {
			t.Errorf("TimerHold = %d, want %d", got, want)
		}
	}
}

// reopen ends the cycle (commit or abort) and opens the store again, as a
// restarted task does.
func reopen(commit bool) timerStep {
	return func(t *testing.T, th *timerHarness) {
		t.Helper()
		if commit {
			if err := th.u.Commit(); err != nil {
				t.Fatal(err)
			}
		} else {
			th.u.Abort()
		}
		th.u = newUser(t, th.db, testPrefix)
	}
}

const (
	farFuture = int64(1) << 50 // a processing time no test reaches
	eogw      = int64(mtime.EndOfGlobalWindowTime)
)

func TestTimers(t *testing.T) {
	tests := []struct {
		name  string
		steps []timerStep
	}{
		{"event time fires once the watermark is past it, and once", []timerStep{
			set(evFam, at("a", 10), at("b", 20), at("c", 30)),
			due(10, farFuture),
			due(11, farFuture, "ev a/@10"),
			due(11, farFuture),
			due(30, farFuture, "ev b/@20"),
			due(maxTime, 0, "ev c/@30"),
			due(maxTime, 0),
		}},
		{"processing time fires once now reaches it", []timerStep{
			set(procFam, at("a", 100), at("b", 200)),
			due(0, 99),
			due(1000, 100, "proc a/@100"),
			due(1000, 199),
			due(0, 200, "proc b/@200"),
		}},
		{"at the max watermark every processing-time timer fires too", []timerStep{
			set(evFam, at("a", 10), at("b", eogw)),
			set(procFam, at("p", maxTime), at("q", 5)),
			due(11, 0, "ev a/@10"),
			due(maxTime-1, 4, "ev b/@"+fmt.Sprint(eogw)),
			set(evFam, at("c", 20)),
			due(maxTime, 0, "ev c/@20", "proc q/@5", "proc p/@"+fmt.Sprint(maxTime)),
			due(maxTime, 0),
		}},
		{"at the max watermark an event-time timer at the end of time fires", []timerStep{
			set(evFam, at("a", maxTime)),
			due(maxTime-1, 0),
			due(maxTime, 0, "ev a/@"+fmt.Sprint(maxTime)),
			due(maxTime, 0),
		}},
		{"a timer set earlier replaces the old one", []timerStep{
			set(evFam, at("a", 50)),
			set(evFam, at("a", 10)),
			due(20, 0, "ev a/@10"),
			due(maxTime, 0),
		}},
		{"a timer set later replaces the old one", []timerStep{
			set(evFam, at("a", 10)),
			set(evFam, at("a", 50)),
			due(20, 0),
			due(51, 0, "ev a/@50"),
			due(maxTime, 0),
		}},
		{"the last of one buffer wins", []timerStep{
			set(evFam, at("a", 10), at("b", 5), at("a", 40)),
			due(maxTime, 0, "ev b/@5", "ev a/@40"),
		}},
		{"a cleared timer disappears", []timerStep{
			set(evFam, at("a", 10), at("b", 10)),
			set(evFam, cleared("a")),
			due(maxTime, 0, "ev b/@10"),
		}},
		{"a cleared timer can be set again", []timerStep{
			set(evFam, at("a", 10), cleared("a"), at("a", 30)),
			due(20, 0),
			due(maxTime, 0, "ev a/@30"),
		}},
		{"clearing an unset timer does nothing", []timerStep{
			set(procFam, cleared("z"), at("a", 1)),
			due(0, 1, "proc a/@1"),
		}},
		{"keys, tags and families are distinct timers", []timerStep{
			set(evFam, at("b/x", 10), at("a/y", 10), at("a/x", 10)),
			set(procFam, at("a/x", 10)),
			set(evFam, cleared("a/z")),
			due(maxTime, 0, "ev a/x@10", "ev a/y@10", "ev b/x@10", "proc a/x@10"),
		}},
		{"committed timers survive a reopen", []timerStep{
			set(evFam, at("a", 10), at("b", 20)),
			reopen(true),
			set(evFam, at("b", 30)),
			reopen(true),
			holdIs(10),
			due(maxTime, 0, "ev a/@10", "ev b/@30"),
		}},
		{"fired timers stay fired after a commit", []timerStep{
			set(evFam, at("a", 10)),
			due(11, 0, "ev a/@10"),
			reopen(true),
			due(maxTime, 0),
			holdIs(maxTime),
		}},
		{"aborted timers are gone", []timerStep{
			set(evFam, at("a", 10)),
			reopen(true),
			set(evFam, at("a", 40), at("b", 20)),
			reopen(false),
			due(maxTime, 0, "ev a/@10"),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := newTimerHarness(t, false)
			for _, s := range tc.steps {
				s(t, th)
			}
		})
	}
}

// withHold is at(keyTag, fire) with output timestamp hold.
func withHold(keyTag string, fire, hold int64) tmr {
	tm := at(keyTag, fire)
	tm.hold = hold
	return tm
}

func TestTimerHold(t *testing.T) {
	th := newTimerHarness(t, false)
	for _, s := range []timerStep{
		holdIs(maxTime),
		set(evFam, withHold("a", 100, 40), withHold("b", 100, 15), withHold("c", 100, 70)),
		holdIs(15),
		set(evFam, withHold("b", 100, 50)), // re-set with a later hold
		holdIs(40),
		set(evFam, cleared("a")),
		holdIs(50),
		set(procFam, withHold("p", 7, 5)), // processing-time timers hold too
		holdIs(5),
		due(0, 7, "proc p/@7"), // a fired timer no longer holds
		holdIs(50),
		set(evFam, withHold("d", 20, 60)),
		holdIs(50), // the hold, not the firing time
		due(maxTime, 0, "ev d/@20", "ev b/@100", "ev c/@100"),
		holdIs(maxTime),
	} {
		s(t, th)
	}
}

// TestTimerWindows: a timer set in several windows is one timer per window,
// each delivered in the SDK's timer coder with only its own window and
// everything else as set.
func TestTimerWindows(t *testing.T) {
	th := newTimerHarness(t, true)
	w1 := window.IntervalWindow{Start: 0, End: 1000}
	w2 := window.IntervalWindow{Start: 500, End: 1500}
	w3 := window.IntervalWindow{Start: 2000, End: 3000}
	pane := typex.PaneInfo{Timing: typex.PaneLate, IsFirst: false, IsLast: true, Index: 3, NonSpeculativeIndex: 1}
	multi := tmr{key: "k", tag: "tag", wins: []typex.Window{w2, w1}, fire: 10, hold: 5, pane: pane}
	single := tmr{key: "k", tag: "tag", wins: []typex.Window{w3}, fire: 20, hold: 6, pane: pane}
	th.set(t, evFam, multi, single)

	ds, err := th.u.DueTimers(maxTime, 0)
	if err != nil {
		t.Fatal(err)
	}
	// By firing time, then by window (w1's encoding sorts first: it ends
	// first).
	wantWins := []typex.Window{w1, w2, w3}
	if len(ds) != len(wantWins) {
		t.Fatalf("%d timers fired, want %d", len(ds), len(wantWins))
	}
	for i, d := range ds {
		got := th.tc.decode(t, d.Encoded)
		want := multi
		if i == 2 {
			want = single
		}
		if len(got.Windows) != 1 || !got.Windows[0].Equals(wantWins[i]) {
			t.Errorf("timer %d: windows %v, want [%v]", i, got.Windows, wantWins[i])
		}
		if got.Key.Elm != want.key || got.Tag != want.tag || got.Clear || int64(got.FireTimestamp) != want.fire || int64(got.HoldTimestamp) != want.hold || got.Pane != want.pane {
			t.Errorf("timer %d = %+v, want %+v", i, got, want)
		}
		// Byte for byte what the SDK encodes for the one window.
		one := want
		one.wins = []typex.Window{wantWins[i]}
		if enc := th.tc.encode(t, one); !bytes.Equal(d.Encoded, enc) {
			t.Errorf("timer %d encoded %x, the SDK encodes %x", i, d.Encoded, enc)
		}
		if d.Family != [2]string{"t1", "ev"} {
			t.Errorf("timer %d of family %q", i, d.Family)
		}
	}

	// Clearing or re-setting a timer in one window leaves its others.
	th.set(t, evFam, multi)
	th.set(t, evFam, tmr{key: "k", tag: "tag", wins: []typex.Window{w1}, clear: true})
	th.set(t, evFam, tmr{key: "k", tag: "tag", wins: []typex.Window{w2}, fire: 30, hold: 30})
	th.set(t, evFam, tmr{key: "k", tag: "tag", wins: []typex.Window{w3}, fire: 15, hold: 8})
	if got := th.hold(t); got != 8 {
		t.Errorf("hold %d, want 8", got)
	}
	ds, err = th.u.DueTimers(maxTime, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fired []string
	for _, d := range ds {
		tm := th.tc.decode(t, d.Encoded)
		fired = append(fired, fmt.Sprintf("%v@%d", tm.Windows, int64(tm.FireTimestamp)))
	}
	if want := []string{fmt.Sprintf("%v@15", []typex.Window{w3}), fmt.Sprintf("%v@30", []typex.Window{w2})}; !slices.Equal(fired, want) {
		t.Errorf("fired %q, want %q", fired, want)
	}
}

// TestSetTimersCarry: the SDK's timer stream may split anywhere; the part of
// a timer at a chunk's end waits in the carry for the next chunk, and the
// result is as if the stream came whole.
func TestSetTimersCarry(t *testing.T) {
	tc := newTimerCoding(t, true)
	w1, w2 := window.IntervalWindow{Start: 0, End: 100}, window.IntervalWindow{Start: 50, End: 150}
	ts := []tmr{
		{key: "first", tag: "", wins: []typex.Window{w1, w2}, fire: 10, hold: 10},
		{key: "second", tag: "t", wins: []typex.Window{w1}, fire: 20, hold: 3},
		{key: "first", wins: []typex.Window{w2}, clear: true},
		{key: "third", tag: "long tag", wins: []typex.Window{w2}, fire: 5, hold: 5, pane: typex.PaneInfo{Timing: typex.PaneEarly, Index: 1, NonSpeculativeIndex: -1}},
	}
	var stream []byte
	ends := []int{0} // where each timer ends in the stream
	for _, tm := range ts {
		stream = append(stream, tc.encode(t, tm)...)
		ends = append(ends, len(stream))
	}
	th := newTimerHarness(t, true)
	th.set(t, evFam, ts...)
	want, wantHold := th.due(t, maxTime, 0), int64(3)
	if len(want) != 3 {
		t.Fatalf("whole stream fired %q, want 3 timers", want)
	}

	feed := func(t *testing.T, chunks ...[]byte) {
		t.Helper()
		var carry []byte
		done := 0
		for _, c := range chunks {
			mine := bytes.Clone(c)
			if err := th.u.SetTimers(evFam, tc.host, mine, &carry); err != nil {
				t.Fatal(err)
			}
			clear(mine) // the store must not keep the caller's buffer
			done += len(c)
			last := 0
			for _, e := range ends {
				if e <= done {
					last = e
				}
			}
			if !bytes.Equal(carry, stream[last:done]) {
				t.Fatalf("after %d bytes: carry %x, want %x", done, carry, stream[last:done])
			}
		}
		if got := th.hold(t); got != wantHold {
			t.Errorf("hold %d, want %d", got, wantHold)
		}
		if got := th.due(t, maxTime, 0); !slices.Equal(got, want) {
			t.Errorf("fired %q, want %q", got, want)
		}
	}
	for i := 0; i <= len(stream); i++ {
		t.Run(fmt.Sprintf("split at %d", i), func(t *testing.T) { feed(t, stream[:i], stream[i:]) })
	}
	t.Run("byte by byte", func(t *testing.T) {
		var chunks [][]byte
		for i := range stream {
			chunks = append(chunks, stream[i:i+1])
		}
		feed(t, chunks...)
	})
}

func TestSetTimersCorrupt(t *testing.T) {
	th := newTimerHarness(t, false)
	bad := append(str(t, "k"), str(t, "")...)
	bad = append(bad, 0xff, 0xff, 0xff, 0xff) // a negative window count
	var carry []byte
	err := th.u.SetTimers(evFam, th.tc.host, bad, &carry)
	if err == nil || !strings.Contains(err.Error(), "timer family ev of t1") {
		t.Errorf("SetTimers of a corrupt timer: %v, want an error naming the family", err)
	}
}

// FuzzTimers checks the timer store against a model: a map from timer id
// to its firing and hold time, for random sets and clears in both domains.
// DueTimers returns exactly the model's due timers, event time first and
// each domain by firing time; TimerHold is the model's smallest hold.
func FuzzTimers(f *testing.F) {
	f.Add([]byte{0x20, 5, 5, 10})
	f.Add([]byte{0x00, 5, 1, 0, 0x08, 0, 0, 0, 0x60, 3, 9, 4, 0x21, 3, 2, 63})
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		b := make([]byte, 4*(1+r.IntN(30)))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		type state struct{ fire, hold int64 }
		type id struct {
			event    bool
			key, tag string
		}
		model := map[id]state{}
		th := newTimerHarness(t, false)
		describe := func(i id, fire int64) string {
			fam := procFam
			if i.event {
				fam = evFam
			}
			return fmt.Sprintf("%s %s/%s@%d", fam.FamilyID, i.key, i.tag, fire)
		}
		check := func(wm, now int64) {
			var want []string
			wantHold := maxTime
			for i, s := range model {
				if (i.event && s.fire < wm) || (!i.event && (s.fire <= now || wm >= maxTime)) {
					want = append(want, describe(i, s.fire))
					delete(model, i)
				} else {
					wantHold = min(wantHold, s.hold)
				}
			}
			got := th.due(t, wm, now)
			// Event time first, then by firing time within a domain.
			order := func(s string) (string, int64) {
				fam, rest, _ := strings.Cut(s, " ")
				_, fire, _ := strings.Cut(rest, "@")
				var n int64
				fmt.Sscan(fire, &n)
				return fam, n
			}
			if !slices.IsSortedFunc(got, func(a, b string) int {
				fa, ta := order(a)
				fb, tb := order(b)
				return cmp.Or(cmp.Compare(fa, fb), cmp.Compare(ta, tb))
			}) {
				t.Fatalf("DueTimers(%d, %d) out of order: %q", wm, now, got)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("DueTimers(%d, %d) = %q, want %q", wm, now, got, want)
			}
			if h := th.hold(t); h != wantHold {
				t.Fatalf("TimerHold = %d, want %d", h, wantHold)
			}
		}
		for ; len(b) >= 4; b = b[4:] {
			// b[0]: key (2 bits), tag, clear, family, check; b[1] fire,
			// b[2] hold, b[3] the watermark and time of the check.
			i := id{event: b[0]&0x10 == 0, key: fmt.Sprint("k", b[0]&3), tag: fmt.Sprint(b[0] >> 2 & 1)}
			fam := procFam
			if i.event {
				fam = evFam
			}
			tm := tmr{key: i.key, tag: i.tag, fire: int64(b[1] % 64), hold: int64(b[2] % 64)}
			if b[0]&0x08 != 0 {
				tm.clear = true
				delete(model, i)
			} else {
				model[i] = state{tm.fire, tm.hold}
			}
			th.set(t, fam, tm)
			if b[0]&0x20 != 0 {
				check(int64(b[3]%64), int64(b[3]%64))
			}
		}
		check(maxTime, 0)
		if len(model) != 0 {
			t.Fatalf("timers left at the max watermark: %v", model)
		}
	})
}
