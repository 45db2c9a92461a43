package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/ksrunner/ksrunner/examples/wordcount/wc"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

func init() {
	register.Function4x0(splitNumber)
	register.Emitter2[string, int]()
	register.Function3x1(formatJoin)
	register.Iter1[int]()
	register.Function1x1(formatTotal)
	register.Function2x1(formatSum)
	register.Function2x1(valueOf)
	register.Function1x2(withOne)
	register.Function1x0(dropInt)
	register.Function3x0(withSide)
	register.Iter1[string]()
	register.Function2x0(dropGroup)
	register.DoFn3x0[state.Provider, string, int](&statefulFn{})
	register.DoFn2x0[[]byte, func(int)](&panicFn{})
	register.Emitter1[int]()
	register.DoFn2x0[context.Context, []byte](&blockFn{})
	register.Function1x2(hotPair)
	register.Function2x1(summarizeOnce)
	register.Function2x1(summarizeAgain)
	register.Iter1[string]()
	register.Function3x1(summarizeWithSide)
	register.Function2x1(keyInitial)
	register.DoFn3x2[state.Provider, string, func(*string) bool, string, error](&summarizeStatefulFn{})
	register.DoFn4x2[state.Provider, string, func(*string) bool, func(*string) bool, string, error](&summarizeStatefulSideFn{})
	register.Function1x2(hotRandomPair)
}

// hotKeyPipeline groups 4,000 values of about 1 KiB on one key (a group
// of 4 MB, which the host pages: host/internal/task/gbkpages.go) and a
// few small keys, and summarizes each group twice, in two ParDos reading
// the same group (the SDK opens its state twice). Each summary counts the
// values and checks their sum of indices, so a value lost or read twice
// shows.
func hotKeyPipeline(out string) *beam.Pipeline {
	var ns []int
	for i := range 4000 {
		ns = append(ns, i)
	}
	p, s := beam.NewPipelineWithRoot()
	groups := beam.GroupByKey(s, beam.ParDo(s, hotPair, beam.CreateList(s, ns)))
	textio.Write(s, out, beam.Flatten(s, beam.ParDo(s, summarizeOnce, groups), beam.ParDo(s, summarizeAgain, groups)))
	return p
}

// hotSessionsPipeline is hotKeyPipeline's GroupByKey over sessions: a
// windowed GroupByKey (merging windows), whose hot pane of about 4 MB the
// stages read in pages.
func hotSessionsPipeline(out string) *beam.Pipeline {
	var ns []int
	for i := range 4000 {
		ns = append(ns, i)
	}
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewSessions(time.Minute), beam.ParDo(s, hotPair, beam.CreateList(s, ns)))
	groups := beam.GroupByKey(s, kvs)
	textio.Write(s, out, beam.Flatten(s, beam.ParDo(s, summarizeOnce, groups), beam.ParDo(s, summarizeAgain, groups)))
	return p
}

// hotSidePipeline is hotKeyPipeline's groups, of values that do not
// compress (a broker measures compressed batches), read by a ParDo with a
// side input that does not wait on the GroupByKey: the ParDo reads the
// groups where they are, the hot one (about 4 MB) in pages from the store,
// each group held there until the side input is ready; it crosses no
// topic, whatever internal_max_message_bytes says.
func hotSidePipeline(out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	groups := beam.GroupByKey(s, beam.ParDo(s, hotRandomPair, beam.CreateList(s, hotNumbers())))
	side := beam.CreateList(s, []string{"x", "y"})
	textio.Write(s, out, beam.ParDo(s, summarizeWithSide, groups, beam.SideInput{Input: side}))
	return p
}

// hotSideOfGroupsPipeline is hotSidePipeline with a side input made from
// the groups (the first letter of each key), which waits on the
// GroupByKey: the ParDo heads a sub-topology of its own, and each group
// crosses its "-main" topic, the hot one in pieces (each a stored piece
// of its values, where the reader parks it for the side input).
func hotSideOfGroupsPipeline(out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	groups := beam.GroupByKey(s, beam.ParDo(s, hotRandomPair, beam.CreateList(s, hotNumbers())))
	side := beam.ParDo(s, keyInitial, groups)
	textio.Write(s, out, beam.ParDo(s, summarizeWithSide, groups, beam.SideInput{Input: side}))
	return p
}

// hotStableGroupsPipeline is hotSidePipeline's groups summarized by a
// ParDo that requires stable input (stableSummarize): its input is a topic
// of its own, which each group crosses whole, the hot one of about 4 MB in
// one record, so it needs internal_max_message_bytes above Kafka's default
// 1 MiB. Its output is hotSideWantWith("").
func hotStableGroupsPipeline(t *testing.T, out string) *pipepb.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	groups := beam.GroupByKey(s, beam.ParDo(s, hotRandomPair, beam.CreateList(s, hotNumbers())))
	textio.Write(s, out, beam.ParDo(s, stableSummarize, groups))
	pipe := marshal(t, p)
	if err := pipelinetest.RequireStableInput(pipe, "stableSummarize"); err != nil {
		t.Fatal(err)
	}
	return pipe
}

// hugeStablePipeline makes one element of 2 MiB, which a ParDo requiring
// stable input reads: it crosses that ParDo's topic whole, as an element
// that is not a group always does.
func hugeStablePipeline(t *testing.T, out string) *pipepb.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	textio.Write(s, out, beam.ParDo(s, stableLength, beam.ParDo(s, hugeElement, beam.Create(s, 2<<20))))
	pipe := marshal(t, p)
	if err := pipelinetest.RequireStableInput(pipe, "stableLength"); err != nil {
		t.Fatal(err)
	}
	return pipe
}

func hugeElement(n int) string { return strings.Repeat("x", n) }

func stableLength(s string) string { return fmt.Sprintf("length=%d", len(s)) }

func init() {
	register.Function1x1(hugeElement)
	register.Function1x1(stableLength)
	register.Function2x1(stableSummarize)
}

func stableSummarize(key string, vs func(*string) bool) string {
	return summarizeWithSide(key, vs, func(*string) bool { return false })
}

// hotStatefulPipeline is hotSidePipeline's groups read by a stateful
// ParDo, their only reader, which stays with the GroupByKey and reads the
// hot group in pages; its output is hotSideWantWith("st").
func hotStatefulPipeline(out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	groups := beam.GroupByKey(s, beam.ParDo(s, hotRandomPair, beam.CreateList(s, hotNumbers())))
	textio.Write(s, out, beam.ParDo(s, &summarizeStatefulFn{}, groups))
	return p
}

// summarizeStatefulFn summarizes a group as summarizeWithSide does, its
// "side" the letters "st" when its state shows the key's first group.
type summarizeStatefulFn struct {
	Seen state.Value[bool]
}

func (fn *summarizeStatefulFn) ProcessElement(sp state.Provider, key string, vs func(*string) bool) (string, error) {
	seen, _, err := fn.Seen.Read(sp)
	if err != nil {
		return "", err
	}
	if err := fn.Seen.Write(sp, true); err != nil {
		return "", err
	}
	side := "st"
	if seen {
		side = "again"
	}
	return "side=" + side + " " + summarize(key, vs), nil
}

// hotSideSessionsPipeline is hotSidePipeline behind a GroupByKey over
// session windows (merging: a windowed GroupByKey), whose groups the
// ParDo with the side input, their only reader, reads where they are,
// parking each until the side input is ready for it. The side input, the
// initials of the keys that another GroupByKey of the same pairs makes,
// is complete one topic after the groups fire, so they are parked as a
// rule. Its output is hotSideWantWith("ccch").
func hotSideSessionsPipeline(out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewSessions(time.Minute), beam.ParDo(s, hotRandomPair, beam.CreateList(s, hotNumbers())))
	side := beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, keyInitial, beam.GroupByKey(s, kvs)))
	sums := beam.ParDo(s, summarizeWithSide, beam.GroupByKey(s, kvs), beam.SideInput{Input: side})
	textio.Write(s, out, beam.WindowInto(s, window.NewGlobalWindows(), sums))
	return p
}

// hotStatefulSideLatenessPipeline is hotSidePipeline's groups, behind a
// GroupByKey with allowed lateness (a windowed GroupByKey), read by a ParDo
// with user state and a side input, their only reader; its output is
// hotSideWant.
func hotStatefulSideLatenessPipeline(out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, hotRandomPair, beam.CreateList(s, hotNumbers())), beam.AllowedLateness(time.Minute))
	side := beam.CreateList(s, []string{"x", "y"})
	textio.Write(s, out, beam.ParDo(s, &summarizeStatefulSideFn{}, beam.GroupByKey(s, kvs), beam.SideInput{Input: side}))
	return p
}

// summarizeStatefulSideFn is summarizeWithSide with user state: a key's
// second group would say "again" after the side input's letters.
type summarizeStatefulSideFn struct {
	Seen state.Value[bool]
}

func (fn *summarizeStatefulSideFn) ProcessElement(sp state.Provider, key string, vs func(*string) bool, side func(*string) bool) (string, error) {
	seen, _, err := fn.Seen.Read(sp)
	if err != nil {
		return "", err
	}
	if err := fn.Seen.Write(sp, true); err != nil {
		return "", err
	}
	out := summarizeWithSide(key, vs, side)
	if seen {
		out = "again " + out
	}
	return out, nil
}

// keyInitial is a group's key's first letter.
func keyInitial(key string, _ func(*string) bool) string { return key[:1] }

// hotSideWant is hotSidePipeline's output, computed here; hotSideWantWith
// is it with side for the side input's letters, sorted.
func hotSideWant() []string { return hotSideWantWith("xy") }

func hotSideWantWith(side string) []string {
	type sum struct{ n, sum, bytes int }
	sums := map[string]*sum{}
	for _, n := range hotNumbers() {
		k, v := hotRandomPair(n)
		if sums[k] == nil {
			sums[k] = &sum{}
		}
		sums[k].n, sums[k].sum, sums[k].bytes = sums[k].n+1, sums[k].sum+n, sums[k].bytes+len(v)
	}
	var out []string
	for k, s := range sums {
		out = append(out, fmt.Sprintf("side=%s %s values=%d sum=%d bytes=%d", side, k, s.n, s.sum, s.bytes))
	}
	slices.Sort(out)
	return out
}

// hotRandomPair is hotPair with values of random letters (seeded by n).
func hotRandomPair(n int) (string, string) {
	k, v := hotPair(n)
	r := rand.New(rand.NewPCG(uint64(n), 1))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
	b := []byte(v)
	for i := 6; i < len(b); i++ {
		b[i] = letters[r.IntN(len(letters))]
	}
	return k, string(b)
}

func hotNumbers() []int {
	var ns []int
	for i := range 4000 {
		ns = append(ns, i)
	}
	return ns
}

func summarizeWithSide(key string, vs func(*string) bool, side func(*string) bool) string {
	var all, w string
	for side(&w) {
		all += w
	}
	sorted := []byte(all)
	slices.Sort(sorted)
	return "side=" + string(sorted) + " " + summarize(key, vs)
}

func hotPair(n int) (string, string) {
	key := "hot"
	if n%100 == 0 {
		key = fmt.Sprintf("cold%d", n/100%3)
	}
	return key, fmt.Sprintf("%06d%s", n, strings.Repeat("v", 1000))
}

func summarize(key string, vs func(*string) bool) string {
	var n, sum, bytes int
	var v string
	for vs(&v) {
		var i int
		fmt.Sscanf(v[:6], "%d", &i)
		n, sum, bytes = n+1, sum+i, bytes+len(v)
	}
	return fmt.Sprintf("%s values=%d sum=%d bytes=%d", key, n, sum, bytes)
}

func summarizeOnce(key string, vs func(*string) bool) string { return "once " + summarize(key, vs) }

func summarizeAgain(key string, vs func(*string) bool) string { return "again " + summarize(key, vs) }

// wordcountPipeline is examples/wordcount on its built-in text plus
// generated lines (enough words to spread over every partition), written
// with textio to out.
func wordcountPipeline(out string) *beam.Pipeline {
	lines := append([]string(nil), wc.Text...)
	for i := 0; i < 400; i++ {
		lines = append(lines, fmt.Sprintf("w%d w%d x%d %s", i%37, i%101, i, wc.Text[i%len(wc.Text)]))
	}
	p, s := beam.NewPipelineWithRoot()
	textio.Write(s, out, wc.CountWords(s, beam.CreateList(s, lines)))
	return p
}

// readFiles is how many files readFilesPipeline reads.
const readFiles = 8

var readFilesInput struct {
	once sync.Once
	dir  string
	glob string
	err  error
}

// removeReadFilesInput removes readFilesPipeline's input, if written.
func removeReadFilesInput() {
	if d := readFilesInput.dir; d != "" {
		os.RemoveAll(d)
	}
}

// readFilesPipeline counts the words of readFiles text files (written once
// per test binary) read with textio.Read, a splittable DoFn whose
// restrictions (a file each) ksrunner spreads over the tasks, and writes
// the counts with textio to out.
func readFilesPipeline(out string) *beam.Pipeline {
	in := &readFilesInput
	in.once.Do(func() {
		dir, err := os.MkdirTemp("", "ksrunner-e2e-read-")
		if err != nil {
			in.err = err
			return
		}
		in.dir = dir
		for f := range readFiles {
			var b strings.Builder
			for i := range 200 {
				fmt.Fprintf(&b, "f%d w%d %s\n", f, i%23, wc.Text[(f*200+i)%len(wc.Text)])
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("in-%d.txt", f)), []byte(b.String()), 0o644); err != nil {
				in.err = err
				return
			}
		}
		in.glob = filepath.Join(dir, "in-*.txt")
	})
	if in.err != nil {
		panic(fmt.Sprintf("writing readFilesPipeline's input: %v", in.err))
	}
	p, s := beam.NewPipelineWithRoot()
	textio.Write(s, out, wc.CountWords(s, textio.Read(s, in.glob)))
	return p
}

// multiPipeline: a three-output ParDo whose outputs go through a
// CoGroupByKey, a global Combine (stats.Sum), a per-key Combine
// (stats.SumPerKey) and a Flatten of lines from all three shuffles plus the
// unshuffled third output, written with textio to out.
func multiPipeline(out string) *beam.Pipeline {
	nums := make([]int, 300)
	for i := range nums {
		nums[i] = i + 1
	}
	p, s := beam.NewPipelineWithRoot()
	evens, odds, fives := beam.ParDo3(s, splitNumber, beam.CreateList(s, nums))
	joined := beam.ParDo(s, formatJoin, beam.CoGroupByKey(s, evens, odds))
	total := beam.ParDo(s, formatTotal, stats.Sum(s, beam.ParDo(s, valueOf, evens)))
	sums := beam.ParDo(s, formatSum, stats.SumPerKey(s, odds))
	textio.Write(s, out, beam.Flatten(s, joined, total, sums, fives))
	return p
}

func splitNumber(n int, even, odd func(string, int), fives func(string)) {
	key := fmt.Sprintf("k%d", n%7)
	if n%2 == 0 {
		even(key, n)
	} else {
		odd(key, n)
	}
	if n%5 == 0 {
		fives(fmt.Sprintf("five %d", n))
	}
}

func collect(iter func(*int) bool) []int {
	var vs []int
	var v int
	for iter(&v) {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	return vs
}

func formatJoin(key string, evens, odds func(*int) bool) string {
	return fmt.Sprintf("join %s evens=%v odds=%v", key, collect(evens), collect(odds))
}

func formatTotal(sum int) string           { return fmt.Sprintf("total of evens %d", sum) }
func formatSum(key string, sum int) string { return fmt.Sprintf("sum of odds %s %d", key, sum) }
func valueOf(_ string, v int) int          { return v }

func withOne(w string) (string, int) { return w, 1 }
func dropInt(int)                    {}

// statefulPipeline uses user state; tests edit it into unsupported shapes.
// Each transform a test edits is in a scope of its own, so that tests find
// it by name: "Pair" (withOne, stateless), "UsesState" (statefulFn, user
// state), "UsesSideInput" (a ParDo with an iterable side input) and "Group"
// (a GroupByKey over fixed windows).
func statefulPipeline() *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	words := beam.CreateList(s, []string{"a", "b"})
	kvs := beam.ParDo(s.Scope("Pair"), withOne, words)
	beam.ParDo0(s.Scope("UsesState"), &statefulFn{}, kvs)
	beam.ParDo0(s.Scope("UsesSideInput"), withSide, kvs, beam.SideInput{Input: words})
	grouped := beam.GroupByKey(s.Scope("Group"), beam.WindowInto(s, window.NewFixedWindows(time.Minute), kvs))
	beam.ParDo0(s, dropGroup, grouped)
	return p
}

func withSide(_ string, _ int, side func(*string) bool) {
	var w string
	for side(&w) {
	}
}

func dropGroup(_ string, vs func(*int) bool) {}

type statefulFn struct {
	Count state.Value[int]
}

func (f *statefulFn) ProcessElement(sp state.Provider, _ string, _ int) {
	n, _, _ := f.Count.Read(sp)
	f.Count.Write(sp, n+1)
}

// panicFn panics with its Message.
type panicFn struct{ Message string }

func (f *panicFn) ProcessElement(_ []byte, emit func(int)) { panic(f.Message) }

func panicPipeline(msg string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	out := beam.ParDo(s, &panicFn{Message: msg}, beam.Impulse(s))
	beam.ParDo0(s, dropInt, out)
	return p
}

// blockers lets a blockFn running in this process's LOOPBACK worker tell the
// test what it does, by token.
var blockers sync.Map // token -> *blockState

type blockState struct {
	started  chan struct{} // closed when the first element is being processed
	returned chan error    // the process call's end: nil when its context ended
	ticks    atomicCount
}

type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCount) inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *atomicCount) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func newBlocker(token string) *blockState {
	b := &blockState{started: make(chan struct{}), returned: make(chan error, 1)}
	blockers.Store(token, b)
	return b
}

// blockFn processes its element until its context is done (at most a
// minute), ticking every 10ms.
type blockFn struct{ Token string }

func (f *blockFn) ProcessElement(ctx context.Context, _ []byte) {
	v, ok := blockers.Load(f.Token)
	if !ok {
		panic("blockFn: unknown token " + f.Token)
	}
	b := v.(*blockState)
	close(b.started)
	limit := time.After(time.Minute)
	for {
		select {
		case <-ctx.Done():
			b.returned <- nil
			return
		case <-limit:
			b.returned <- fmt.Errorf("blockFn: context still live after a minute")
			return
		case <-time.After(10 * time.Millisecond):
			b.ticks.inc()
		}
	}
}

func blockPipeline(token string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo0(s, &blockFn{Token: token}, beam.Impulse(s))
	return p
}

// sortedLines splits text into its sorted non-empty lines.
func sortedLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}
