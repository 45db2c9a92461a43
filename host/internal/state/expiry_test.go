package state

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
)

// expiryCell is one user state cell of TestExpireState, with the value it
// holds.
type expiryCell struct {
	name string
	key  *fnpb.StateKey
	data []byte // as appended (and read back)
}

// expiryCells are, for window win, a bag, a multimap value and an ordered
// list of transform t1 (whose state expires) for keys k1 and k2, and a bag
// of t2 (whose state does not).
func expiryCells(t *testing.T, winName string, win []byte) []expiryCell {
	var out []expiryCell
	for _, k := range []string{"k1", "k2"} {
		base := userKey{"t1", "s1", win, str(t, k)}
		out = append(out,
			expiryCell{fmt.Sprintf("t1 bag %s %s", k, winName), base.bag(), str(t, "b-"+k)},
			expiryCell{fmt.Sprintf("t1 multimap %s %s", k, winName), userKey{"t1", "s2", win, str(t, k)}.multimap(str(t, "m")), str(t, "m-"+k)},
			expiryCell{fmt.Sprintf("t1 ordered %s %s", k, winName), base.ordered(-1<<62, 1<<62), orderedEntries(t, entry{7, "o-" + k})},
		)
	}
	return append(out, expiryCell{"t2 bag " + winName, userKey{"t2", "s1", win, str(t, "k1")}.bag(), str(t, "t2")})
}

// A transform's user state in a window expires once the watermark passes
// the window's end plus the allowed lateness: ExpireState deletes every
// key's bags, multimap values and ordered lists of that window, and nothing
// of other windows, of the global window, or of transforms whose state
// does not expire. A value appended to an expired window (a late element)
// expires at the next sweep; nothing expires at the end of time.
func TestExpireState(t *testing.T) {
	const lateness = 5000 // w0 expires at 59999+5000
	w0, w1 := intervalWin(t, 0, 60000), intervalWin(t, 60000, 120000)
	db := memDB(t)
	open := func() (*User, *StageHandler) {
		u := newUser(t, db, testPrefix)
		u.SetStateExpiry("t1", lateness)
		return u, NewStageHandler(u, nil, testOrdered(t))
	}
	u, h := open()
	first, later, global := expiryCells(t, "w0", w0), expiryCells(t, "w1", w1), expiryCells(t, "global", nil)
	var all []expiryCell
	all = append(append(append(all, first...), later...), global...)
	for _, c := range all {
		mustAppend(t, h, c.key, c.data)
	}
	check := func(when string, h *StageHandler, gone map[string]bool) {
		t.Helper()
		for _, c := range all {
			got := mustGet(t, h, c.key)
			if want := !gone[c.name]; want != (len(got) > 0) {
				t.Errorf("%s: %s holds %q, want it kept: %v", when, c.name, got, want)
			} else if want && !bytes.Equal(got, c.data) {
				t.Errorf("%s: %s holds %q, want %q", when, c.name, got, c.data)
			}
		}
	}
	expire := func(u *User, wm int64, want int) {
		t.Helper()
		n, err := u.ExpireState(wm)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("ExpireState(%d) deleted %d scopes, want %d", wm, n, want)
		}
	}
	expired := map[string]bool{}
	for _, c := range first {
		expired[c.name] = c.name[:2] == "t1"
	}

	expire(u, 59999+lateness, 0) // not past the expiry yet
	check("at the expiry", h, nil)
	expire(u, 60000+lateness, 3) // t1's bag, multimap and ordered list scopes of w0
	check("past the expiry", h, expired)
	expire(u, 60000+lateness, 0)
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	u, h = open()
	check("committed and opened again", h, expired)

	// A late element's state in w0 expires at the next sweep, in this
	// opening of the task and after the sweep dropped the scope.
	late := first[0]
	mustAppend(t, h, late.key, late.data)
	expire(u, 60000+lateness, 1)
	check("a late value swept", h, expired)
	mustAppend(t, h, late.key, late.data)
	expire(u, 60000+lateness, 1)
	check("a late value swept again", h, expired)

	expire(u, maxTime, 0)
	check("at the end of time", h, expired)
}

// A processing-time timer of a window whose state expired does not fire,
// as Java's runners ignore it, and is gone; one of a window still open
// fires, and at the end of time, when nothing expires, every one does.
func TestProcessingTimerOfExpiredWindow(t *testing.T) {
	w0, w1 := window.IntervalWindow{Start: 0, End: 100}, window.IntervalWindow{Start: 100, End: 200}
	timers := func() []tmr {
		return []tmr{
			{key: "k", wins: []typex.Window{w0}, fire: 50, hold: 50},
			{key: "k", tag: "open", wins: []typex.Window{w1}, fire: 50, hold: 150},
		}
	}
	th := newTimerHarness(t, true)
	th.u.SetStateExpiry("t1", 0)
	th.set(t, procFam, timers()...)
	if got, want := th.due(t, 150, 1000), []string{"proc k/open@50"}; !slices.Equal(got, want) {
		t.Errorf("due at watermark 150: %q, want %q (w0 expired at 99)", got, want)
	}
	if got := th.due(t, 150, 1000); len(got) != 0 {
		t.Errorf("due again: %q, want nothing (the expired window's timer is gone)", got)
	}
	th.set(t, procFam, timers()...)
	if got, want := th.due(t, maxTime, 1000), []string{"proc k/@50", "proc k/open@50"}; !slices.Equal(got, want) {
		t.Errorf("due at the end of time: %q, want %q", got, want)
	}
}
